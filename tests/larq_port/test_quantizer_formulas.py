"""larq 0.14 aliases: forward values and gradients equal numpy transcriptions of larq's formulas.

References written from larq/quantizers.py and larq/math.py (larq 0.14): ``math.sign(x) = sign(sign(x) + 0.1)``,
``math.heaviside(x) = sign(relu(x))``, ``_clipped_gradient = dy where abs(x) <= clip_value`` (all of dy when
clip_value is None), ``approx_sign``'s ``(1 - abs(x))·2·dy where abs(x) <= 1``, ``swish_sign``'s
``dy·beta·(2 − beta·x·tanh(beta·x/2))/(1 + cosh(beta·x))``, ``ste_tern``'s ``sign(sign(x + D) + sign(x − D))`` with
``D = 0.7·sum(abs(x))/size(x)`` for ternary weight networks, ``MagnitudeAwareSign``'s
``stop_gradient(mean(abs(x), axes[:-1]))·ste_sign(x)`` and ``DoReFa``'s clip (activations) or
``tanh(x)/(2·stop_gradient(max(abs(tanh(x))))) + 0.5`` (weights), ``round(x·n)/n`` with an identity gradient, and
``2·q − 1`` for weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste
import ste.larq as lq
from ste import quantizers as q

GRID = np.array([-4.0, -1.5, -1.0, -0.75, -0.5, -0.25, -0.05, 0.0, 0.05, 0.25, 0.5, 0.75, 1.0, 1.5, 4.0])


def larq_sign(x):
    return np.sign(np.sign(x) + 0.1)


def clipped(x, dy, clip_value):
    return dy if clip_value is None else np.where(np.abs(x) <= clip_value, dy, 0.0)


@pytest.mark.parametrize("clip_value", [1.0, 0.5, None])
def test_ste_sign(run, clip_value):
    y, grad, dy = run(q.get(f"ste_sign(clip_value={clip_value})"), GRID, tf.float32)
    np.testing.assert_array_equal(y, larq_sign(GRID))
    np.testing.assert_array_equal(grad, clipped(GRID, dy, clip_value))


@pytest.mark.parametrize("dtype", [tf.float16, tf.float32])
def test_approx_sign(run, dtype):
    y, grad, dy = run(lq.quantizers.ApproxSign(), GRID, dtype)
    np.testing.assert_array_equal(y, larq_sign(GRID))
    np.testing.assert_allclose(grad, np.where(np.abs(GRID) <= 1.0, (1 - np.abs(GRID)) * 2 * dy, 0.0), rtol=1e-3)


@pytest.mark.parametrize("beta", [5.0, 2.0])
def test_swish_sign(run, beta):
    y, grad, dy = run(q.get(f"swish_sign(beta={beta})"), GRID, tf.float64)
    bx = beta * GRID
    np.testing.assert_array_equal(y, larq_sign(GRID))
    np.testing.assert_allclose(
        grad, dy * beta * (2 - bx * np.tanh(bx * 0.5)) / (1 + np.cosh(bx)), rtol=1e-10, atol=1e-14
    )


@pytest.mark.parametrize("clip_value", [1.0, 0.25])
def test_ste_heaviside(run, clip_value):
    y, grad, dy = run(lq.quantizers.SteHeaviside(clip_value=clip_value), GRID, tf.float32)
    np.testing.assert_array_equal(y, np.sign(np.maximum(GRID, 0.0)))
    np.testing.assert_array_equal(grad, clipped(GRID, dy, clip_value))


@pytest.mark.parametrize(("threshold_value", "clip_value"), [(0.05, 1.0), (0.25, 0.5)])
def test_ste_tern(run, threshold_value, clip_value):
    y, grad, dy = run(lq.quantizers.SteTern(threshold_value=threshold_value, clip_value=clip_value), GRID, tf.float32)
    t = threshold_value
    np.testing.assert_array_equal(y, np.sign(np.sign(GRID + t) + np.sign(GRID - t)))
    np.testing.assert_array_equal(grad, clipped(GRID, dy, clip_value))


def test_ste_tern_ternary_weight_networks(run):
    x = np.random.default_rng(3).normal(size=50)
    y, grad, dy = run(q.get("ste_tern(ternary_weight_networks=True)"), x, tf.float64)
    d = 0.7 * np.sum(np.abs(x)) / x.size
    np.testing.assert_array_equal(y, np.sign(np.sign(x + d) + np.sign(x - d)))
    np.testing.assert_array_equal(grad, clipped(x, dy, 1.0))


@pytest.mark.parametrize("clip_value", [1.0, 0.5])
def test_magnitude_aware_sign(run, clip_value):
    x = np.random.default_rng(4).normal(size=(3, 3, 4, 6))
    y, grad, dy = run(lq.quantizers.get(f"magnitude_aware_sign(clip_value={clip_value})"), x, tf.float64)
    scale = np.mean(np.abs(x), axis=(0, 1, 2))
    np.testing.assert_allclose(y, scale * larq_sign(x), rtol=1e-12)
    np.testing.assert_allclose(grad, scale * clipped(x, dy, clip_value), rtol=1e-12)


@pytest.mark.parametrize("k_bit", [1, 2, 4])
def test_dorefa_activations(run, k_bit):
    n = 2**k_bit - 1
    x = np.linspace(-0.5, 1.5, 41)
    y, grad, dy = run(q.get(f"dorefa_quantizer(k_bit={k_bit})"), x, tf.float64)
    np.testing.assert_allclose(y, np.round(np.clip(x, 0.0, 1.0) * n) / n, atol=1e-12)
    np.testing.assert_array_equal(grad, np.where((x >= 0) & (x <= 1), dy, 0.0))


def test_dorefa_weights(run):
    n = 3
    x = np.random.default_rng(5).normal(size=30)
    y, grad, dy = run(lq.quantizers.DoReFaQuantizer(k_bit=2, mode="weights"), x, tf.float64)
    t = np.tanh(x)
    m = np.max(np.abs(t))
    np.testing.assert_allclose(y, 2 * (np.round((t / (2 * m) + 0.5) * n) / n) - 1, atol=1e-12)
    np.testing.assert_allclose(grad, dy * 2 * (1 - t**2) / (2 * m), rtol=1e-10)


@pytest.mark.parametrize(
    ("spec", "config"),
    [
        ("ste_sign", {"clip_value": 1.0}),
        ("approx_sign", {}),
        ("swish_sign", {"beta": 5.0}),
        ("ste_heaviside", {"clip_value": 1.0}),
        ("ste_tern", {"threshold_value": 0.05, "ternary_weight_networks": False, "clip_value": 1.0}),
        ("magnitude_aware_sign", {}),
        ("dorefa_quantizer", {"bits": 2, "mode": "activations"}),
    ],
)
def test_larq_names_resolve_with_larq_defaults(spec, config):
    quantizer = q.get(spec)
    assert isinstance(quantizer, q.Quantizer)
    assert {k: v for k, v in quantizer.get_config().items() if k in config} == config
    assert quantizer.precision in (1, 2)


def test_larq_layers_accept_larq_arguments():
    layer = lq.layers.QuantDepthwiseConv2D(3, depthwise_quantizer="ste_sign", depthwise_constraint="weight_clip")
    assert isinstance(layer.kernel_quantizer, lq.quantizers.SteSign)
    assert isinstance(layer.depthwise_constraint, ste.constraints.WeightClip)
