"""Synaptic, RLIF, RSynaptic and LI: forward values and BPTT gradients against the hand-written numpy model
(reference.simulate / reference.bptt), cells in keras.layers.RNN, learned values, feature maps and errors."""

from __future__ import annotations

import inspect
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from . import reference

STEPS, BATCH, UNITS = 7, 3, 5


def _data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    current = rng.normal(0.35, 0.7, size=(BATCH, STEPS, UNITS))
    return current, rng.normal(size=(BATCH, STEPS, UNITS)), rng.normal(size=(BATCH, UNITS))


def _recurrent_weights(layer: keras.layers.Layer, seed: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Random recurrent weights set into the (built) layer; (None, None) for a layer without them."""
    cell = layer.cell
    if "recurrent_kernel" not in cell._learned:
        return None, None
    rng = np.random.default_rng(100 + seed)
    kernel = rng.normal(0, 0.5, size=cell._learned["recurrent_kernel"].shape)
    cell._learned["recurrent_kernel"].assign(kernel)
    bias = None
    if "recurrent_bias" in cell._learned:
        bias = rng.normal(0, 0.2, size=(UNITS,))
        cell._learned["recurrent_bias"].assign(bias)
    return kernel, bias


def _run(layer: keras.layers.Layer, current: np.ndarray, g: np.ndarray, h: np.ndarray) -> dict[str, Any]:
    x = tf.constant(current)
    layer.build(x.shape)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out, membrane, *_ = layer(x)
        loss = tf.reduce_sum(out * g) + tf.reduce_sum(membrane * h)
    learned = layer.cell._learned
    names = list(learned)
    grads = tape.gradient(loss, [x, *(learned[n] for n in names)])
    return {"out": out.numpy(), "membrane": membrane.numpy(), "current": grads[0].numpy(), **{
        n: v.numpy() for n, v in zip(names, grads[1:])
    }}


KINDS = ["Synaptic", "RLIF-all", "RLIF-one-bias", "RSynaptic-all-bias", "RSynaptic-one", "LI"]
CASES = [(k, r, d) for k in KINDS[:-1] for r in ("subtract", "zero") for d in (True, False)]
CASES += [("Synaptic", "none", True), ("RLIF-all", "none", False), ("LI", "none", True)]


def _neuron(kind: str, reset: str, detach: bool) -> tuple[keras.layers.Layer, reference.Synapse]:
    spiking = {"reset": reset, "detach_reset": detach, "learn_threshold": True, "learn_surrogate": True}
    spiking.update(threshold=0.8, surrogate="atan(alpha=1.5)")
    common = {"return_state": True, "dtype": "float64", "learn_beta": True}
    recurrent = {"all_to_all": "-all" in kind, "recurrent_bias": "bias" in kind}
    n = reference.Synapse(beta=0.85, theta=0.8, reset=reset, detach=detach, surrogate=reference.Surrogate("atan", 1.5))
    if kind == "Synaptic":
        layer = ste.spiking.Synaptic(alpha=0.6, beta=0.85, learn_alpha=True, **spiking, **common)
        n.alpha = 0.6
    elif kind.startswith("RLIF"):
        layer = ste.spiking.RLIF(beta=0.85, **recurrent, **spiking, **common)
    elif kind.startswith("RSynaptic"):
        layer = ste.spiking.RSynaptic(alpha=0.6, beta=0.85, learn_alpha=True, **recurrent, **spiking, **common)
        n.alpha = 0.6
    else:
        layer = ste.spiking.LI(beta=0.85, **common)
        n.spiking, n.reset = False, "none"
    return layer, n


@pytest.mark.parametrize(("kind", "reset", "detach"), CASES, ids=[f"{k}-{r}-{'det' if d else 'att'}" for k, r, d in CASES])
def test_bptt_matches_numpy(kind: str, reset: str, detach: bool) -> None:
    seed = CASES.index((kind, reset, detach))
    current, g, h = _data(seed)
    layer, n = _neuron(kind, reset, detach)
    layer.build((BATCH, STEPS, UNITS))
    n.recurrent, n.bias = _recurrent_weights(layer, seed)
    got = _run(layer, current, g, h)
    expected = reference.simulate(n, current)
    if n.spiking:
        assert 0.05 < expected["S"].mean() < 0.9, "the data should make some but not all neurons fire"
        np.testing.assert_array_equal(got["out"], expected["S"].transpose(1, 0, 2))
    else:
        np.testing.assert_allclose(got["out"], expected["U"].transpose(1, 0, 2), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["membrane"], expected["U"][-1], rtol=1e-12, atol=1e-12)
    want = reference.bptt(n, current, g, h)
    tol = {"rtol": 1e-10, "atol": 1e-12}
    np.testing.assert_allclose(got["current"], want["current"], **tol)
    np.testing.assert_allclose(got["beta"], want["beta"], **tol)
    if n.alpha is not None:
        np.testing.assert_allclose(got["alpha"], want["alpha"], **tol)
    if n.spiking:
        np.testing.assert_allclose(got["threshold"], want["threshold"], **tol)
        np.testing.assert_allclose(got["surrogate_alpha"], want["surrogate"], **tol)
    if n.recurrent is not None:
        assert np.any(want["recurrent"] != 0)
        np.testing.assert_allclose(got["recurrent_kernel"], want["recurrent"], **tol)
    if n.bias is not None:
        np.testing.assert_allclose(got["recurrent_bias"], want["bias"], **tol)
