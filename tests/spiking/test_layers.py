"""Keras behaviour of the spiking layers and cells: sequences, states, stateful, masking, cells in keras.layers.RNN,
parameter ranges, learnable parameters, dtypes and the zero-gradient warning. References: reference.py (numpy)."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from . import reference

STEPS, BATCH, UNITS = 6, 2, 4


def _currents(seed: int = 0, steps: int = STEPS) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.5, 0.8, size=(BATCH, steps, UNITS))


def _spikes(neuron: reference.Neuron, x: np.ndarray) -> np.ndarray:
    return reference.forward(neuron, x)["S"].transpose(1, 0, 2)


def test_return_sequences_and_state() -> None:
    x = _currents()
    expected = reference.forward(reference.Neuron(beta=0.8), x)
    last, membrane, spikes = ste.spiking.LIF(beta=0.8, return_sequences=False, return_state=True, dtype="float64")(x)
    np.testing.assert_array_equal(last.numpy(), expected["S"][-1])
    np.testing.assert_array_equal(spikes.numpy(), expected["S"][-1])
    np.testing.assert_allclose(membrane.numpy(), expected["U"][-1], rtol=1e-12)


def test_cell_in_keras_rnn_equals_layer() -> None:
    x = _currents(1)
    cell_out = keras.layers.RNN(ste.spiking.LIFCell(0.7, reset="zero"), return_sequences=True, dtype="float64")(x)
    np.testing.assert_array_equal(cell_out.numpy(), _spikes(reference.Neuron(beta=0.7, reset="zero"), x))
    alif = keras.layers.RNN(ste.spiking.ALIFCell(units=UNITS, rho=0.5, adaptation=0.3), return_state=True)
    assert [tuple(s.shape) for s in alif(x.astype("float32"))[1:]] == [(BATCH, UNITS)] * 3


def test_stateful_continues_across_calls() -> None:
    x = _currents(2, steps=8)
    layer = ste.spiking.LIF(beta=0.9, stateful=True, dtype="float64")
    first, second = layer(x[:, :4]).numpy(), layer(x[:, 4:]).numpy()
    np.testing.assert_array_equal(np.concatenate([first, second], 1), _spikes(reference.Neuron(beta=0.9), x))
    layer.reset_state()
    np.testing.assert_array_equal(layer(x[:, :4]).numpy(), first)


def test_masked_steps_emit_nothing_and_keep_the_state() -> None:
    x = _currents(3)
    mask = np.array([[True, False, True, True, False, True], [True] * STEPS])
    out = ste.spiking.LIF(beta=0.8, dtype="float64")(x, mask=tf.constant(mask)).numpy()
    for b in range(BATCH):
        kept = _spikes(reference.Neuron(beta=0.8), x[b : b + 1, mask[b]])[0]
        np.testing.assert_array_equal(out[b, mask[b]], kept)
        np.testing.assert_array_equal(out[b, ~mask[b]], 0.0)


def test_masking_layer_in_a_model() -> None:
    x = _currents(4).astype("float32")
    x[0, -2:] = 0.0  # padded tail
    model = keras.Sequential([keras.Input((STEPS, UNITS)), keras.layers.Masking(0.0), ste.spiking.LIF(beta=0.8)])
    out = model(x).numpy()
    np.testing.assert_array_equal(out[0, -2:], 0.0)
    np.testing.assert_array_equal(out[0, :4], _spikes(reference.Neuron(beta=0.8), x[:1, :4].astype("float64"))[0])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_spikes_are_exactly_zero_or_one_in_every_dtype(dtype: str) -> None:
    x = tf.cast(_currents(5) * 3, dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        spikes = ste.spiking.LIF(beta=0.9, dtype=dtype)(x)
    assert spikes.dtype == dtype and set(np.unique(spikes.numpy().astype("float32"))) == {0.0, 1.0}
    grad = tape.gradient(spikes, x)
    assert grad.dtype == dtype and np.all(np.isfinite(grad.numpy().astype("float32")))
    assert np.any(grad.numpy().astype("float32") != 0)


def test_parameter_errors_are_ste_errors() -> None:
    for bad in ({"beta": 1.5}, {"beta": -0.1}, {"threshold": 0.0}, {"reset": "hard"}, {"emit": "both"}):
        with pytest.raises(ste.errors.ParameterError):
            ste.spiking.LIF(**bad)
    with pytest.raises(ste.errors.ParameterError, match="no leak"):
        ste.spiking.IF(beta=0.5)
    with pytest.raises(ste.errors.UnknownSurrogateError):
        ste.spiking.LIF(surrogate="atn")

    class NoPrimitive(ste.registry.Surrogate):
        width: float = 1.0

        def derivative(self, x: tf.Tensor) -> tf.Tensor:
            return tf.cast(tf.abs(x) < self.param("width", x.dtype), x.dtype)

    with pytest.raises(ste.errors.ParameterError, match="primitive"):
        ste.spiking.LIF(surrogate=NoPrimitive(), learn_surrogate=True)
    with pytest.raises(ste.errors.ParameterError, match="no numeric parameter"):
        ste.spiking.LIF(surrogate="zero", learn_surrogate=True)
    with pytest.raises(ste.errors.ParameterError, match="not numeric parameters"):
        ste.spiking.LIF(learn_surrogate=["slope"])
    with pytest.raises(ste.errors.CallError, match=r"\[batch, time, features\]"):
        ste.spiking.LIF()(tf.zeros((2, 3)))


@pytest.mark.parametrize("spec", ["boxcar(width=1e-50)", "gaussian(sigma=1e-50)"])
def test_surrogate_parameter_outside_the_dtype_is_refused_not_nan(spec: str) -> None:
    # 1e-50 underflows to 0 in float32 (smallest normal 1.2e-38): the derivative would be NaN (0/0), so the spike
    # refuses it when traced; in float64 the same surrogate is representable and its gradient is finite.
    with pytest.raises(ste.errors.ParameterError, match="not representable in float32"):
        ste.spiking.LIF(surrogate=spec)(tf.ones((2, 3, 4)))
    x = tf.constant(np.full((2, 3, 4), 0.5), tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        spikes = ste.spiking.LIF(surrogate=spec, dtype="float64")(x)
    assert np.all(np.isfinite(tape.gradient(spikes, x).numpy()))


def test_learned_parameters_stay_in_range_and_train() -> None:
    layer = ste.spiking.LIF(beta=0.95, learn_beta=True, learn_threshold=True, learn_surrogate=["alpha"])
    model = keras.Sequential([keras.Input((STEPS, UNITS)), keras.layers.Dense(UNITS), layer])
    model.compile(keras.optimizers.SGD(50.0), loss=lambda y, p: -tf.reduce_mean(p) * 1e3)  # push hard
    model.fit(_currents(6).astype("float32"), np.zeros((BATCH,)), epochs=3, verbose=0)
    values = {v.name: float(v.numpy()) for v in layer.weights}
    assert set(values) == {"beta", "threshold", "surrogate_alpha"}
    assert 0.0 <= values["beta"] <= 1.0 and values["threshold"] > 0 and values["surrogate_alpha"] > 0
    assert values["beta"] != 0.95 and values["threshold"] != 1.0


def test_zero_surrogate_gradient_warns_once() -> None:
    layer = ste.spiking.LIF(beta=0.5, surrogate="boxcar(width=0.01)")
    x = tf.fill((BATCH, STEPS, UNITS), 0.1)  # U stays near 0.2, far from ϑ = 1: boxcar's support is |U − ϑ| < 0.005
    with pytest.warns(RuntimeWarning, match="zero gradient"):
        layer(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(x)  # once per layer
        ste.spiking.LIF(beta=0.5)(x)  # atan is never 0
        ste.spiking.LIF(beta=0.5, surrogate="boxcar(width=2.0)")(x)


def test_summary_counts_spiking_layers() -> None:
    model = keras.Sequential(
        [
            keras.Input((STEPS, 8)),
            keras.layers.Dense(6),
            ste.spiking.LIF(learn_beta=True, name="lif"),
            keras.layers.Dense(3),
            keras.layers.RNN(ste.spiking.ALIFCell(units=3), return_sequences=True, name="rnn_alif"),
            keras.layers.LSTM(2),
        ]
    )
    lines: list[str] = []
    result = ste.summary(model, print_fn=lines.append)
    assert result.spiking_layers == 2 and result.neurons == 6 + 3
    assert {row.name: row.neurons for row in result.layers}["lif"] == 6
    assert "Spiking layers: 2, with 9 neurons in all" in lines[0]
