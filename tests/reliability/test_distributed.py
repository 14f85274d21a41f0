"""``tf.distribute.MirroredStrategy`` over the logical CPU devices (four, set up in tests/conftest.py).

``model.fit`` of a binarized model with learnable quantizers (ste.quantizers.LSQ and PACT when the package has
them, and a PACT-style op written with the DSL in models.py) ends with the same weights as the same run on one
device: the replicas' gradients (each through the ste rules) are summed to what one device computes.
The networks of the scale-out tests (scaleout.py: binarized conv net with synchronized batch norm and
CaseOptimizer(Bop, Adam), LSQ/PACT net, spiking net) trained on 1 replica x 16, 2 x 8 and 4 x 4 end with the same
weights and logs; batch norm without synchronization differs by design. Multi-worker training runs in subprocesses:
see test_processes.py.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from . import models, scaleout


def _fit(strategy: tf.distribute.Strategy | None, lsq: bool, initialize_first: bool = True) -> dict[str, np.ndarray]:
    x, y = models.make_data(96)
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = models.compile_model(models.make_model(5, lsq=lsq))
    if initialize_first:
        model(x[:16], training=True)  # LSQ's data-dependent initial step, from the same (first) batch in both runs
    model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    return models.weights_of(model)


def _mirrored() -> tf.distribute.Strategy:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) >= 2, "tests/conftest.py should provide two logical CPU devices"
    # ReductionToOneDevice: no collective ops, whose instance keys can clash with another MirroredStrategy created
    # earlier in the same process (other test modules), aborting every later collective ("Restart your program").
    strategy = tf.distribute.MirroredStrategy(devices[:2], cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert strategy.num_replicas_in_sync == 2
    return strategy


def test_mirrored_fit_matches_one_device() -> None:
    """PACT (ste.quantizers, when present) and the DSL's learned clip; LSQ is checked separately below."""
    mirrored = _fit(_mirrored(), lsq=False)
    single = _fit(None, lsq=False)
    initial = models.weights_of(models.make_model(5, lsq=False))
    assert mirrored.keys() == single.keys()
    if models.HAS_QUANTIZERS:
        assert "pact/alpha" in single
    for key in single:
        np.testing.assert_allclose(mirrored[key], single[key], rtol=1e-5, atol=1e-6, err_msg=key)
        if not key.endswith("initialized"):
            assert not np.array_equal(single[key], initial[key]), f"{key} did not train"


@pytest.mark.skipif(not models.HAS_QUANTIZERS, reason="needs ste.quantizers.LSQ")
@pytest.mark.parametrize("initialize_first", [True, False], ids=["initialized-first", "initialized-in-fit"])
def test_lsq_under_mirrored_matches_one_device(initialize_first: bool) -> None:
    mirrored = _fit(_mirrored(), lsq=True, initialize_first=initialize_first)
    single = _fit(None, lsq=True, initialize_first=initialize_first)
    for key in single:
        np.testing.assert_allclose(mirrored[key], single[key], rtol=1e-5, atol=1e-6, err_msg=key)


def _replicas(n: int) -> tf.distribute.Strategy:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) >= n, "tests/conftest.py should provide four logical CPU devices"
    return tf.distribute.MirroredStrategy(devices[:n], cross_device_ops=tf.distribute.ReductionToOneDevice())


_ONE_REPLICA: dict[str, dict[str, Any]] = {}


def _one_replica(kind: str) -> dict[str, Any]:
    if kind not in _ONE_REPLICA:
        _ONE_REPLICA[kind] = scaleout.fit(kind, None)
    return _ONE_REPLICA[kind]


# Custom loops over logical devices took minutes on 2 loaded cores (their steps ran many times slower than fit's,
# not investigated): they are checked with 2 workers (test_processes.py); fit here.
@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("kind", scaleout.NETS)
def test_replicas_train_as_one(kind: str, replicas: int) -> None:
    """1 replica x 16 against n replicas x 16/n: the same weights after 10 steps of fit, the same loss and flip
    ratios."""
    scaleout.assert_same(scaleout.fit(kind, _replicas(replicas)), _one_replica(kind))


def test_unsynchronized_batch_norm_differs_by_design() -> None:
    """Each replica normalizes with its own batch's moments when batch norm is not synchronized: 2 x 8 is then not
    1 x 16 (docs/distributed.md); the same net with synchronized=True is (test above)."""
    single = _one_replica("binary")  # batch norm on one replica: the same with or without synchronization
    two = scaleout.fit("binary", _replicas(2), synchronized=False)
    moving = "bn1/moving_mean"
    assert not np.allclose(two["weights"][moving], single["weights"][moving], rtol=1e-3, atol=1e-5)
    # the moving mean of per-replica means is still the mean of the whole batch (equal halves): only the variance
    # (and so the normalized activations and every later weight) differ
    assert not np.allclose(two["weights"]["head/kernel"], single["weights"]["head/kernel"], rtol=1e-3, atol=1e-5)
