"""Every patch ste applies to Keras and TensorFlow, the upstream behaviour each works around, and its version guard.

``import ste`` applies none of them. :func:`apply` installs them when one of ste's Keras layers (a quantized layer,
a quantizer, a neuron, a pruning, clustering or QAT wrapper, ...) is created or an ste op
(:class:`ste.STEFunction`) is first called: before a program can save an op, build a model of ste's layers or fit
one under a strategy (``fit`` builds a model that has no ``keras.Input`` itself, after its multi-worker fix would
be needed); each patch installs only on the releases in its guard and only when the patched name has the
expected form, and :func:`installed` says which are in place. To drop a patch, delete its line in :data:`PATCHES`.

* ``save_check``: Keras's ``saving_lib.save_model`` (and the legacy ``.h5`` saver) opens, and so truncates, the file
  before it serializes the model, so a model holding an op that cannot be saved (one built from a lambda) left an
  empty file. The patched savers serialize the config first and raise ste's :class:`ste.errors.SerializationError`
  before any file is touched; Keras's own errors are raised by the real save, as before.
* ``multi_worker_fit``: Keras 3 cannot ``fit`` under ``MultiWorkerMirroredStrategy`` with more than one worker
  (keras-team/keras#20585). ``TensorFlowTrainer._maybe_symbolic_build`` reduces the whole distributed first batch to
  build the model (a ``PerReplica`` cannot be converted to a tensor): the fix builds from this worker's first
  replica's batch. ``reduce_per_replica(..., "mean")`` reduces scalar logs over ``axis=0``, an axis a scalar does not
  have: the fix reduces over ``axis=None``, the mean over every replica of every worker. Both call Keras's function
  unchanged unless the strategy is a multi-worker ``MultiWorkerMirroredStrategy`` (docs/distributed.md).
* ``fresh_collective_keys``: each ``tf.distribute.MirroredStrategy`` numbers its collective ops from the same keys
  (group key 1, instance key 100 and up) while TensorFlow keeps every launched instance's parameters for the
  process, so a second strategy's first collective fails against the first one's record ("Shape mismatch in the
  collective instance 100"). TensorFlow's own tests step ``MirroredStrategy._collective_key_base`` by 100000 between
  strategies; the fix does that for every strategy built after it. A strategy built before (the usual
  ``strategy = MirroredStrategy()`` then ``with strategy.scope(): <ste model>``) gets keys of its own when one of
  ste's layers is created in its scope, if it has launched no collective yet (its instance keys are all unused):
  its collective all-reduce is rebuilt from fresh keys, as its constructor builds it. ``MultiWorkerMirroredStrategy``,
  whose workers must agree on their keys, is not touched.
* ``fake_quant_gradient_ops``: TensorFlow 2.16 registers no gradient for the gradient ops of its fake-quant kernels
  (``FakeQuantWithMinMaxVarsGradient``, its per-channel and ``Args`` forms), so a second-order gradient through a QAT
  model (a gradient penalty) raised ``LookupError``; TensorFlow 2.21 registers them as not differentiable. The fix
  makes the same ``tf.no_gradient`` registration where a name has none: their own derivatives are zero almost
  everywhere, and ste's fake quantization reads only their first-order output.
* ``snapshot_gradient``: TensorFlow registers no gradient for ``Snapshot`` (a gradient through
  ``tf.raw_ops.Snapshot`` raises ``LookupError``; checked on 2.16 and 2.21). ste's backward passes end each masked
  product with one (``ste._core._bitmask.opaque``: it hands its input's buffer on, and Grappler does not regroup
  products across it), so a second-order gradient through an ste op (a gradient penalty) needs one: the fix
  registers an identity's gradient, the derivative of an op that returns its input, where TensorFlow has none.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

from .errors import STEError

__all__ = [
    "CHECKED_KERAS",
    "CHECKED_TENSORFLOW",
    "PATCHES",
    "Patch",
    "apply",
    "fresh_keys_for_current_strategy",
    "installed",
    "multi_worker",
]

#: Keras versions (major, minor) the Keras patches were checked on; a newer Keras runs its own code until it is
#: checked here too (3.6 is the first with ``_maybe_symbolic_build``).
CHECKED_KERAS = ((3, 6), (3, 15))
#: TensorFlow versions (major, minor) the TensorFlow patch was checked on.
CHECKED_TENSORFLOW = ((2, 16), (2, 21))


def _release(version: str) -> tuple[int, int]:
    major, minor, *_ = (int("".join(ch for ch in part if ch.isdigit()) or 0) for part in version.split("."))
    return major, minor


def _keras_version() -> tuple[int, int]:
    import keras

    return _release(keras.__version__)


def _checked_keras() -> bool:
    import keras

    return keras.backend.backend() == "tensorflow" and CHECKED_KERAS[0] <= _keras_version() <= CHECKED_KERAS[1]


def _checked_tensorflow() -> bool:
    import tensorflow as tf

    return CHECKED_TENSORFLOW[0] <= _release(tf.__version__) <= CHECKED_TENSORFLOW[1]


# -- save_check ----------------------------------------------------------------------------------------------------


def _checked_first(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (a Keras saver taking the model first) preceded by a config check that raises ste's errors."""

    import keras

    @functools.wraps(original)
    def save_model(model: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Keras repeats its warnings when it serializes for real
                keras.saving.serialize_keras_object(model)
        except STEError:
            raise
        except Exception:  # Keras's own errors: raised as before, by the real save below
            pass
        return original(model, *args, **kwargs)

    save_model._ste_checks_first = True  # type: ignore[attr-defined]
    return save_model


def _install_save_check() -> bool:
    """Make Keras's savers (``.keras``, and the legacy ``.h5``) raise ste's errors before they open (and truncate)
    the file."""
    if not _checked_keras():
        return False
    try:
        from keras.src.legacy.saving import legacy_h5_format
        from keras.src.saving import saving_lib
    except ImportError:  # pragma: no cover - another Keras layout: ste's errors then come from inside the save
        return False
    for module, name in ((saving_lib, "save_model"), (legacy_h5_format, "save_model_to_hdf5")):
        original = getattr(module, name)
        if not getattr(original, "_ste_checks_first", False):
            setattr(module, name, _checked_first(original))
    return True


def _save_check_installed() -> bool:
    from keras.src.saving import saving_lib

    return bool(getattr(saving_lib.save_model, "_ste_checks_first", False))


# -- multi_worker_fit ---------------------------------------------------------------------------------------------


_MARK = "_ste_multi_worker_fix"


def multi_worker(strategy: Any) -> bool:
    """True for a ``MultiWorkerMirroredStrategy`` with more than one worker (the case Keras gets wrong)."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    in_multi_worker_mode = getattr(strategy.extended, "_in_multi_worker_mode", None)
    return bool(in_multi_worker_mode()) if in_multi_worker_mode is not None else False


def _first_local_batch(batch: Any) -> Any:
    """This worker's first replica's part of a distributed batch (its shapes and dtypes are the model's input)."""
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()

    def local(value: Any) -> Any:
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    return tf.nest.map_structure(local, batch)


def _fixed_symbolic_build(original: Any) -> Any:
    @functools.wraps(original)
    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy: Any = getattr(self, "_distribute_strategy", None)
        if iterator is None or not multi_worker(strategy):
            return original(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:
            with strategy.scope():
                data_batch = _first_local_batch(next(it))
            break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    setattr(_maybe_symbolic_build, _MARK, True)
    return _maybe_symbolic_build


def _fixed_reduce_per_replica(original: Any) -> Any:
    @functools.wraps(original)
    def reduce_per_replica(values: Any, strategy: Any, reduction: Any) -> Any:
        if reduction not in ("auto", "mean") or not multi_worker(strategy):
            return original(values, strategy, reduction)
        import tensorflow as tf

        return tf.nest.map_structure(lambda value: strategy.reduce("MEAN", value, axis=None), values)

    setattr(reduce_per_replica, _MARK, True)
    return reduce_per_replica


def _targets() -> tuple[Any, Any] | None:
    """Keras's TensorFlow trainer module and class, when they have the two functions with the expected signatures."""
    try:
        from keras.src.backend.tensorflow import trainer
    except ImportError:  # pragma: no cover - another Keras layout
        return None
    build = getattr(getattr(trainer, "TensorFlowTrainer", None), "_maybe_symbolic_build", None)
    reduce = getattr(trainer, "reduce_per_replica", None)
    if build is None or reduce is None:
        return None
    if list(inspect.signature(build).parameters) != ["self", "iterator", "data_batch"]:
        return None
    if list(inspect.signature(reduce).parameters) != ["values", "strategy", "reduction"]:
        return None
    return trainer, trainer.TensorFlowTrainer


def _install_fit_fixes() -> bool:
    """Install both fit fixes when this Keras is a checked version with the TensorFlow backend; True when installed."""
    if not _checked_keras():
        return False
    targets = _targets()
    if targets is None:
        return False
    module, trainer = targets
    if not getattr(trainer._maybe_symbolic_build, _MARK, False):
        trainer._maybe_symbolic_build = _fixed_symbolic_build(trainer._maybe_symbolic_build)
    if not getattr(module.reduce_per_replica, _MARK, False):
        module.reduce_per_replica = _fixed_reduce_per_replica(module.reduce_per_replica)
    return True


def _fit_fixes_installed() -> bool:
    """Whether Keras's ``fit`` runs with ste's multi-worker fixes."""
    targets = _targets()
    if targets is None:
        return False
    module, trainer = targets
    return bool(
        getattr(trainer._maybe_symbolic_build, _MARK, False) and getattr(module.reduce_per_replica, _MARK, False)
    )


# -- fresh_collective_keys ----------------------------------------------------------------------------------------


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


def _install_fresh_keys() -> bool:
    """Give every new ``MirroredStrategy`` collective keys of its own; True when installed."""
    import tensorflow as tf

    if not _checked_tensorflow():
        return False
    strategy = tf.distribute.MirroredStrategy
    current = strategy.__dict__.get("_collective_key_base")
    if isinstance(current, _FreshBase):
        return True
    if type(current) is not int or current != 0:
        return False
    strategy._collective_key_base = _FreshBase()
    return True


def _fresh_keys_installed() -> bool:
    """Whether every new ``MirroredStrategy`` gets collective keys of its own."""
    import tensorflow as tf

    return isinstance(tf.distribute.MirroredStrategy.__dict__.get("_collective_key_base"), _FreshBase)


def _unused_keys(extended: Any) -> bool:
    """Whether a strategy's collective keys are TensorFlow's, all unused: one group per device set, each device's
    next instance key still the first one (``INSTANCE_KEY_START_NUMBER``)."""
    from tensorflow.python.distribute import cross_device_utils

    keys = getattr(extended, "_collective_keys", None)
    table = getattr(keys, "_instance_key_table", None)
    if type(keys) is not cross_device_utils.CollectiveKeys or not isinstance(table, dict):
        return False
    first = cross_device_utils.INSTANCE_KEY_START_NUMBER
    return all(isinstance(group, dict) and all(n == first for n in group.values()) for group in table.values())


def fresh_keys_for_current_strategy() -> None:
    """Give the ``MirroredStrategy`` whose scope is open (in cross-replica context) collective keys of its own if it
    was built before :func:`apply` (its key base is TensorFlow's 0) and has launched no collective: its collective
    ops are rebuilt from the next fresh base (``_make_collective_ops_with_fallbacks``, which its constructor calls),
    and they replace its cross-device ops where those were the collective ones. Anything else is left alone."""
    import tensorflow as tf

    if not tf.distribute.has_strategy() or not tf.distribute.in_cross_replica_context():
        return
    strategy = tf.distribute.get_strategy()
    if type(strategy) is not tf.distribute.MirroredStrategy or not _fresh_keys_installed():
        return
    extended = strategy.extended
    if getattr(extended, "_collective_key_base", None) != 0 or not _unused_keys(extended):
        return
    rebuild = getattr(extended, "_make_collective_ops_with_fallbacks", None)
    if rebuild is None:  # pragma: no cover - another TensorFlow layout
        return
    with _lock:
        if extended._collective_key_base != 0:
            return
        collective_default = extended._cross_device_ops is extended._collective_ops
        extended._collective_key_base = tf.distribute.MirroredStrategy._collective_key_base  # the next fresh base
        extended._collective_ops = rebuild()
        if collective_default:
            extended._cross_device_ops = extended._collective_ops


#: TensorFlow's fake-quant gradient ops, each not differentiable (a piecewise-constant function of the input)
_FAKE_QUANT_GRADIENTS = (
    "FakeQuantWithMinMaxVarsGradient",
    "FakeQuantWithMinMaxVarsPerChannelGradient",
    "FakeQuantWithMinMaxArgsGradient",
)


def _unregistered_fake_quant_gradients() -> list[str]:
    from tensorflow.python.framework import ops  # the gradient registry (no public accessor)

    missing = []
    for name in _FAKE_QUANT_GRADIENTS:
        try:
            ops._gradient_registry.lookup(name)
        except LookupError:
            missing.append(name)
    return missing


def _install_fake_quant_gradients() -> bool:
    """Register the fake-quant gradient ops TensorFlow leaves unregistered as not differentiable; True when done."""
    import tensorflow as tf

    for name in _unregistered_fake_quant_gradients():
        tf.no_gradient(name)
    return True


def _fake_quant_gradients_installed() -> bool:
    """Whether every fake-quant gradient op has a gradient entry (TensorFlow's or this patch's)."""
    return not _unregistered_fake_quant_gradients()


def _snapshot_has_gradient() -> bool:
    from tensorflow.python.framework import ops  # the gradient registry (no public accessor)

    try:
        ops._gradient_registry.lookup("Snapshot")
    except LookupError:
        return False
    return True


def _snapshot_gradient(op: Any, grad: Any) -> Any:
    return grad  # an identity's: Snapshot returns its input


def _install_snapshot_gradient() -> bool:
    """Register an identity's gradient for ``Snapshot`` where TensorFlow registers none; True when one is in place."""
    import tensorflow as tf

    if not _snapshot_has_gradient():
        try:
            tf.RegisterGradient("Snapshot")(_snapshot_gradient)
        except KeyError:  # registered meanwhile (another thread, or TensorFlow itself)
            pass
    return True


# -- the table -----------------------------------------------------------------------------------------------------


class Patch(NamedTuple):
    """One patch: what it works around (upstream), how to install it (True when installed) and to check it."""

    upstream: str
    install: Callable[[], bool]
    is_installed: Callable[[], bool]


#: Every patch ste applies, by name. Deleting a line removes that patch.
PATCHES: dict[str, Patch] = {
    "save_check": Patch(
        "Keras: saving_lib.save_model opens the file first", _install_save_check, _save_check_installed
    ),
    "multi_worker_fit": Patch("keras-team/keras#20585", _install_fit_fixes, _fit_fixes_installed),
    "fresh_collective_keys": Patch(
        "TensorFlow: MirroredStrategy collective keys", _install_fresh_keys, _fresh_keys_installed
    ),
    "fake_quant_gradient_ops": Patch(
        "TensorFlow 2.16: fake-quant gradient ops without a gradient entry",
        _install_fake_quant_gradients,
        _fake_quant_gradients_installed,
    ),
    "snapshot_gradient": Patch(
        "TensorFlow: Snapshot has no gradient entry", _install_snapshot_gradient, _snapshot_has_gradient
    ),
}

_applied = False
_lock = threading.Lock()


def apply(*, fresh_keys: bool = True) -> None:
    """Install every patch of :data:`PATCHES` that this Keras and TensorFlow take (once per process), and, with
    ``fresh_keys`` (a layer being created: it makes variables under the open strategy), give the strategy whose scope
    is open fresh collective keys if it needs them (:func:`fresh_keys_for_current_strategy`). An op's call passes
    ``fresh_keys=False``: it creates no variables, and its call is a hot path."""
    global _applied
    if not _applied:
        with _lock:
            if not _applied:
                for patch in PATCHES.values():
                    patch.install()
                _applied = True
    if fresh_keys:
        fresh_keys_for_current_strategy()


def installed() -> dict[str, bool]:
    """Each patch's name → whether it is in place."""
    return {name: patch.is_installed() for name, patch in PATCHES.items()}
