"""``ste.spiking.fuse`` and ``Fused`` with masks and malformed input: the unfused Keras layers are the reference."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import ste
from tests.helpers import expect_ste_error


def _pair_models() -> tuple[keras.Model, keras.Model]:
    keras.utils.set_random_seed(3)
    unfused = keras.Sequential(
        [
            keras.Input((12, 6)),
            keras.layers.Masking(0.0),
            keras.layers.Dense(5),
            ste.spiking.LIF(beta=0.8),
            keras.layers.Dense(3),
            ste.spiking.LIF(beta=0.8),
        ]
    )
    for layer in unfused.layers:
        if isinstance(layer, keras.layers.Dense):
            layer.kernel.assign(np.full(layer.kernel.shape, 0.4, "float32"))
    fused = ste.spiking.fuse(unfused)
    return unfused, fused


def test_fused_honours_a_keras_mask_as_the_unfused_layers() -> None:
    unfused, fused = _pair_models()
    assert any(isinstance(layer, ste.spiking.Fused) for layer in fused.layers), [type(x).__name__ for x in fused.layers]
    x = np.random.default_rng(0).uniform(0, 3, (4, 12, 6)).astype("float32")
    x[:, 8:] = 0.0  # padded steps
    x[1, 3] = 0.0  # a masked step in the middle
    want, got = np.asarray(unfused(x)), np.asarray(fused(x))
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.all(got[:, 8:] == 0) and np.all(got[1, 3] == 0)
    assert want[:, :8].sum() > 0  # the test has spikes to compare


def test_fused_refuses_input_without_time_axis() -> None:
    layer = ste.spiking.Fused([ste.spiking.SpikingDense(4, ste.spiking.LIFCell(beta=0.9))])
    expect_ste_error(lambda: layer(np.zeros((3, 6), "float32")))


def test_fused_refuses_a_feature_map_mask() -> None:
    model = keras.Sequential(
        [
            keras.Input((5, 4, 4, 1)),
            keras.layers.Masking(0.0),
            ste.spiking.Fused([ste.spiking.SpikingConv2D(2, 3, ste.spiking.LIFCell(beta=0.9), padding="same")]),
        ]
    )
    expect_ste_error(lambda: model(np.ones((2, 5, 4, 4, 1), "float32")))


nir = pytest.importorskip("nir")
