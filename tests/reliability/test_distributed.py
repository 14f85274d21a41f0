"""``tf.distribute.MirroredStrategy`` over the two logical CPU devices (set up in tests/conftest.py).

``model.fit`` of a binarized model with a learnable PACT-style quantizer ends with the same weights as the same run
on one device: the replicas' gradients (each through the ste rules) are summed to what one device computes.
Multi-worker training runs in subprocesses: see test_processes.py.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from . import models


def _fit(strategy: tf.distribute.Strategy | None) -> dict[str, np.ndarray]:
    x, y = models.make_data(96)
    if strategy is None:
        model = models.compile_model(models.make_model(5))
    else:
        with strategy.scope():
            model = models.compile_model(models.make_model(5))
    model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    return models.weights_of(model)


def test_mirrored_fit_matches_one_device() -> None:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) >= 2, "tests/conftest.py should provide two logical CPU devices"
    strategy = tf.distribute.MirroredStrategy(devices[:2])
    assert strategy.num_replicas_in_sync == 2
    mirrored = _fit(strategy)
    single = _fit(None)
    initial = models.weights_of(models.make_model(5))
    assert mirrored.keys() == single.keys()
    for key in single:
        np.testing.assert_allclose(mirrored[key], single[key], rtol=1e-5, atol=1e-6, err_msg=key)
        assert not np.array_equal(single[key], initial[key]), f"{key} did not train"
