"""``ste.spiking.fuse(model)``: the plain Keras spiking stack rewritten as fused loops, checked against the model it
was made from (Keras ``Dense`` + the neuron layers, differentiated by TensorFlow's autodiff)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste


def _spikes(shape: tuple[int, ...]) -> tf.Tensor:
    return tf.cast(tf.random.stateless_uniform(shape, seed=(3, 4)) < 0.3, tf.float32)


def _outputs_and_gradients(model: Any, x: tf.Tensor) -> tuple[np.ndarray, list[np.ndarray]]:
    with tf.GradientTape() as tape:
        y = model(x, training=True)
        loss = tf.reduce_sum(y * tf.range(1, y.shape[-1] + 1, dtype=y.dtype))  # every output counts differently
    grads = tape.gradient(loss, model.trainable_variables)
    return y.numpy(), [g.numpy() for g in grads]


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fuse_computes_the_plain_stack_with_its_weights(jit_compile: bool) -> None:
    plain = keras.Sequential(
        [
            keras.Input((12, 16)),
            keras.layers.Dense(32),
            ste.spiking.LIF(beta=0.9),
            keras.layers.Dense(8, use_bias=False),
            ste.spiking.LIF(beta=0.8, threshold=0.5),
        ]
    )
    fast = ste.spiking.fuse(plain, jit_compile=jit_compile)
    assert [type(layer).__name__ for layer in fast.layers] == ["Fused"]
    assert [type(layer).__name__ for layer in fast.layers[0].fused_layers] == ["SpikingDense", "SpikingDense"]
    x = _spikes((4, 12, 16))
    y_plain, g_plain = _outputs_and_gradients(plain, x)
    y_fast, g_fast = _outputs_and_gradients(fast, x)
    np.testing.assert_array_equal(y_fast, y_plain)
    assert [g.shape for g in g_fast] == [g.shape for g in g_plain]
    for fused, reference in zip(g_fast, g_plain):
        assert np.abs(reference).max() > 0
        np.testing.assert_allclose(fused, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
    # the weights were copied, not shared: training one leaves the other
    fast.layers[0].fused_layers[0].kernel.assign_add(tf.ones_like(fast.layers[0].fused_layers[0].kernel))
    assert not np.allclose(fast.layers[0].fused_layers[0].kernel.numpy(), plain.layers[0].kernel.numpy())


def test_fuse_keeps_other_layers_and_splits_the_stacks_there() -> None:
    plain = keras.Sequential(
        [
            keras.Input((6, 10)),
            keras.layers.Dense(12),
            ste.spiking.LIF(beta=0.9),
            keras.layers.Dropout(0.0),
            keras.layers.Dense(5, activation="relu"),  # an activation: not what SpikingDense computes, kept
            ste.spiking.LIF(beta=0.9),
            keras.layers.Dense(4),
            ste.spiking.LIF(beta=0.9, return_sequences=False),  # the last step only: kept
        ]
    )
    fast = ste.spiking.fuse(plain)
    assert [type(layer).__name__ for layer in fast.layers] == ["Fused", "Dropout", "Dense", "LIF", "Dense", "LIF"]
    x = _spikes((3, 6, 10))
    np.testing.assert_array_equal(fast(x).numpy(), plain(x).numpy())


def test_fuse_refuses_what_it_cannot_rewrite() -> None:
    inputs = keras.Input((4, 3))
    functional = keras.Model(inputs, ste.spiking.LIF(beta=0.9)(keras.layers.Dense(2)(inputs)))
    with pytest.raises(ste.errors.ParameterError, match="keras.Sequential"):
        ste.spiking.fuse(functional)  # type: ignore[arg-type]
    with pytest.raises(ste.errors.ParameterError, match="not built"):
        ste.spiking.fuse(keras.Sequential([keras.layers.Dense(2), ste.spiking.LIF(beta=0.9)]))
