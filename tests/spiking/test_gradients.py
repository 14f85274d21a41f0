"""Forward values and BPTT gradients of LIF, IF and ALIF equal the hand-written numpy model (reference.py).

float64, 7 steps, every reset mode, with and without a detached reset, every learnable parameter trained; the
gradient with respect to the input currents, β, ϑ and the surrogate's parameter is compared.
"""

from __future__ import annotations

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


@pytest.mark.parametrize(
    ("kind", "reset", "detach"), CASES, ids=[f"{k}-{r}-{'detach' if d else 'attached'}" for k, r, d in CASES]
)
def test_bptt_matches_numpy(kind: str, reset: str, detach: bool) -> None:
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
