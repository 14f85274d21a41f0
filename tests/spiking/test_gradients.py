"""Forward values and BPTT gradients of LIF, IF and ALIF equal the hand-written numpy model (reference.py).

float64, 7 steps, every reset mode, with and without a detached reset, every learnable parameter trained; the
gradient with respect to the input currents, β, ϑ and the surrogate's parameter is compared.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste

from . import reference

STEPS, BATCH, UNITS = 7, 3, 5


def _data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    current = rng.normal(0.45, 0.8, size=(BATCH, STEPS, UNITS))
    return current, rng.normal(size=(BATCH, STEPS, UNITS)), rng.normal(size=(BATCH, UNITS))


def _layer_gradients(layer: tf.keras.layers.Layer, current: np.ndarray, g: np.ndarray, h: np.ndarray):
    x = tf.constant(current)
    layer.build(x.shape)
    with tf.GradientTape() as tape:
        tape.watch(x)
        spikes, membrane, *_ = layer(x)
        loss = tf.reduce_sum(spikes * g) + tf.reduce_sum(membrane * h)
    learned = layer.cell._learned
    names = list(learned)
    grads = tape.gradient(loss, [x, *(learned[n] for n in names)])
    return spikes.numpy(), membrane.numpy(), grads[0].numpy(), {n: v.numpy() for n, v in zip(names, grads[1:])}


CASES = [
    (kind, reset, detach)
    for kind in ("LIF", "IF", "ALIF")
    for reset in ("subtract", "zero", "none")
    for detach in (True, False)
]


def _case(kind: str, reset: str, detach: bool) -> tuple[Any, ...]:
    """Data, the ste layer (every parameter learned) and the numpy neuron of one case."""
    current, g, h = _data(CASES.index((kind, reset, detach)))
    common = {"reset": reset, "detach_reset": detach, "learn_threshold": True, "learn_surrogate": True}
    common.update(threshold=0.8, surrogate="atan(alpha=1.5)", return_state=True, dtype="float64")
    surrogate = reference.Surrogate("atan", 1.5)
    if kind == "LIF":
        layer = ste.spiking.LIF(beta=0.85, learn_beta=True, **common)
        neuron = reference.Neuron(beta=0.85, theta=0.8, reset=reset, detach=detach, surrogate=surrogate)
    elif kind == "IF":
        layer = ste.spiking.IF(**common)
        neuron = reference.Neuron(beta=1.0, theta=0.8, reset=reset, detach=detach, surrogate=surrogate)
    else:
        layer = ste.spiking.ALIF(beta=0.85, rho=0.7, adaptation=0.6, learn_beta=True, **common)
        neuron = reference.Neuron(0.85, 0.8, reset, detach, rho=0.7, scale=0.6, surrogate=surrogate)
    return current, g, h, layer, neuron


@pytest.mark.parametrize(
    ("kind", "reset", "detach"), CASES, ids=[f"{k}-{r}-{'detach' if d else 'attached'}" for k, r, d in CASES]
)
def test_bptt_matches_numpy(kind: str, reset: str, detach: bool) -> None:
    current, g, h, layer, neuron = _case(kind, reset, detach)
    spikes, membrane, g_current, g_params = _layer_gradients(layer, current, g, h)
    expected = reference.forward(neuron, current)
    assert 0 < expected["S"].mean() < 0.9, "the data should make some but not all neurons fire"
    np.testing.assert_array_equal(spikes, expected["S"].transpose(1, 0, 2))
    assert set(np.unique(spikes)) <= {0.0, 1.0}
    np.testing.assert_allclose(membrane, expected["U"][-1], rtol=1e-12, atol=1e-12)
    want = reference.backward(neuron, current, g, h)
    np.testing.assert_allclose(g_current, want["current"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_params["threshold"], want["threshold"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_params["surrogate_alpha"], want["alpha"], rtol=1e-10, atol=1e-12)
    if kind != "IF":
        np.testing.assert_allclose(g_params["beta"], want["beta"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("spec", ["fast_sigmoid(slope=3.0)", "boxcar(width=1.0)"])
def test_other_surrogates_match_numpy(spec: str) -> None:
    current, g, h = _data(7)
    name, value = spec.split("(")[0], float(spec.split("=")[1].rstrip(")"))
    layer = ste.spiking.LIF(beta=0.9, surrogate=spec, return_state=True, dtype="float64", detach_reset=False)
    _, _, g_current, _ = _layer_gradients(layer, current, g, h)
    neuron = reference.Neuron(beta=0.9, theta=1.0, detach=False, surrogate=reference.Surrogate(name, value))
    np.testing.assert_allclose(g_current, reference.backward(neuron, current, g, h)["current"], rtol=1e-10, atol=1e-12)


def test_spike_is_heaviside_with_theta_zero_at_zero() -> None:
    x = tf.constant([-1.0, -0.0, 0.0, 1e-30, 2.0], tf.float64)
    np.testing.assert_array_equal(ste.spiking.heaviside(x).numpy(), [0, 0, 0, 1, 1])
    # a membrane exactly at the threshold does not fire
    layer = ste.spiking.LIF(beta=0.5, threshold=1.0, dtype="float64")
    out = layer(tf.constant([[[1.0], [0.5]]], tf.float64)).numpy().ravel()  # U = 1.0 (no spike), then 1.0 again
    np.testing.assert_array_equal(out, [0.0, 0.0])


# -- in a graph: ste's own time loop (spiking/_loop.py; eager calls use Keras's) --------------------------------


def _graph_gradients(layer: tf.keras.layers.Layer, current: np.ndarray, g: np.ndarray, h: np.ndarray):
    """Outputs, final states and the gradients of the input and learned parameters, in a ``tf.function``."""
    x = tf.constant(current)
    layer.build(x.shape)
    weights = list(layer.cell._learned.values())

    @tf.function
    def run() -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs = tf.nest.flatten(layer(x))
            loss = tf.reduce_sum(outputs[0] * (g if outputs[0].shape.rank == 3 else g[:, -1]))
            loss += tf.reduce_sum(outputs[1] * h)  # the last membrane, as the eager test
        return outputs, tape.gradient(loss, [x, *weights])

    outputs, grads = run()
    return [t.numpy() for t in outputs], [t.numpy() for t in grads]


@pytest.mark.parametrize(
    ("kind", "reset", "detach"), CASES, ids=[f"{k}-{r}-{'detach' if d else 'attached'}" for k, r, d in CASES]
)
def test_bptt_in_a_graph_matches_numpy(kind: str, reset: str, detach: bool) -> None:
    current, g, h, layer, neuron = _case(kind, reset, detach)
    (spikes, membrane, *_), grads = _graph_gradients(layer, current, g, h)
    expected = reference.forward(neuron, current)
    np.testing.assert_array_equal(spikes, expected["S"].transpose(1, 0, 2))
    np.testing.assert_allclose(membrane, expected["U"][-1], rtol=1e-12, atol=1e-12)
    want = reference.backward(neuron, current, g, h)
    np.testing.assert_allclose(grads[0], want["current"], rtol=1e-10, atol=1e-12)
    names = list(layer.cell._learned)
    np.testing.assert_allclose(grads[1 + names.index("threshold")], want["threshold"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads[1 + names.index("surrogate_alpha")], want["alpha"], rtol=1e-10, atol=1e-12)
    if kind != "IF":
        np.testing.assert_allclose(grads[1 + names.index("beta")], want["beta"], rtol=1e-10, atol=1e-12)


LOOP_CASES = {
    "LIF-subtract-detach": lambda: ste.spiking.LIF(beta=0.85, learn_beta=True, learn_threshold=True),
    "LIF-zero-attached": lambda: ste.spiking.LIF(beta=0.85, reset="zero", detach_reset=False),
    "LIF-go_backwards": lambda: ste.spiking.LIF(beta=0.85, go_backwards=True),
    "LIF-last-step-only": lambda: ste.spiking.LIF(beta=0.85, return_sequences=False),
    "ALIF": lambda: ste.spiking.ALIF(beta=0.85, rho=0.7, adaptation=0.6, learn_beta=True),
    "Synaptic": lambda: ste.spiking.Synaptic(alpha=0.8, beta=0.85, learn_alpha=True),
    "RLIF": lambda: ste.spiking.RLIF(beta=0.85),
    "RSynaptic": lambda: ste.spiking.RSynaptic(alpha=0.8, beta=0.85, all_to_all=False),
    "LI": lambda: ste.spiking.LI(beta=0.85, learn_beta=True),
}


@pytest.mark.parametrize("name", list(LOOP_CASES))
def test_graph_loop_is_keras_loop_bit_for_bit(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The same layer, weights and data in a tf.function, once through ste's time loop and once through
    # keras.layers.RNN's: every output, final state and gradient must be the same bits.
    current, g, h = _data(11)

    def build() -> tf.keras.layers.Layer:
        layer = LOOP_CASES[name]()
        config = {**layer.get_config(), "return_state": True, "dtype": "float64"}
        layer = type(layer).from_config(config)
        layer.build((BATCH, STEPS, UNITS))
        for weight in layer.weights:  # the same non-trivial weights in both
            if weight.shape.rank:
                weight.assign(np.random.default_rng(3).normal(0, 0.3, weight.shape))
        return layer

    # Grappler's arithmetic optimizer reassociates sums differently in the two loops' graphs (RSynaptic's final
    # current then differs in the last bit), so it is off for both.
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    try:
        ours = _graph_gradients(build(), current, g, h)
        monkeypatch.setattr(ste.spiking.SpikingRNN, "inner_loop", tf.keras.layers.RNN.inner_loop)
        keras_loop = _graph_gradients(build(), current, g, h)
    finally:
        tf.config.optimizer.set_experimental_options({"arithmetic_optimization": True, **saved})
    assert len(ours[0]) == len(keras_loop[0]) and len(ours[1]) == len(keras_loop[1])
    for a, b in zip(ours[0] + ours[1], keras_loop[0] + keras_loop[1]):
        np.testing.assert_array_equal(a, b)
    assert np.abs(ours[1][0]).sum() > 0, "the input gradient should not vanish"
