"""Fresh collective keys for every ``tf.distribute.MirroredStrategy`` of a process: a guarded fix installed by
``import ste``.

Each ``MirroredStrategy`` numbers its collective ops (all-reduce, all-gather) from the same start: group key 1,
instance key 100 and up. TensorFlow keeps every launched instance's parameters for the whole process, so the second
strategy's first collective meets the first strategy's record under the same keys and the step fails, for any
model: "Shape mismatch in the collective instance 100 ... expected shape [1210] but another member in the group
expected shape [1236]" (two float Keras models), or "Collective instance 100 expected type 0 ... but got type 2" (a
reduction against a gather). TensorFlow's own tests step ``MirroredStrategy._collective_key_base`` by 100000 between
strategies for this reason. The fix does that for every strategy: each one built after ``import ste`` starts its
group keys at k·100000 + 1, k = 1, 2, ..., so no two strategies of the process share a key. A MirroredStrategy's
collectives stay inside its process, so the keys only need to agree among its own devices (they come from one
counter); ``MultiWorkerMirroredStrategy``, whose workers must agree, is not touched.

Installed only when ``MirroredStrategy._collective_key_base`` is TensorFlow's plain ``0``; :func:`installed` says
whether it is.
"""

from __future__ import annotations

import threading
from typing import Any

import tensorflow as tf

__all__ = ["STEP", "install", "installed"]

#: The distance between two strategies' first group keys (TensorFlow's tests use the same step).
STEP = 100000


class _FreshBase:
    """A class attribute whose every read (one per strategy built) is the next multiple of :data:`STEP`."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def __get__(self, instance: Any, owner: Any) -> int:
        with self.lock:
            self.count += 1
            return self.count * STEP


def install() -> bool:
    """Install the fix (see the module docstring); True when it is installed."""
    strategy = tf.distribute.MirroredStrategy
    current = strategy.__dict__.get("_collective_key_base")
    if isinstance(current, _FreshBase):
        return True
    if type(current) is not int or current != 0:
        return False
    strategy._collective_key_base = _FreshBase()
    return True


def installed() -> bool:
    """Whether every new ``MirroredStrategy`` gets collective keys of its own."""
    return isinstance(tf.distribute.MirroredStrategy.__dict__.get("_collective_key_base"), _FreshBase)
