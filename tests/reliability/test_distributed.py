"""``tf.distribute.MirroredStrategy`` over the two logical CPU devices (set up in tests/conftest.py).

``model.fit`` of a binarized model with learnable quantizers (ste.quantizers.LSQ and PACT when the package has
them, and a PACT-style op written with the DSL in models.py) ends with the same weights as the same run on one
device: the replicas' gradients (each through the ste rules) are summed to what one device computes.
Multi-worker training runs in subprocesses: see test_processes.py.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import tensorflow as tf

from . import models


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
