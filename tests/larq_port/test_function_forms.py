"""larq's function forms (``ste.larq.quantizers.ste_sign(x)`` ...) and ``NoOp``: values and gradients against numpy
transcriptions of larq 0.14's formulas (REFERENCE.md §2; larq/quantizers.py), with larq's keyword names."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste import quantizers as q
from ste.larq import quantizers as lqq
from tests.larq_port.test_quantizer_formulas import GRID, clipped, larq_sign
from tests.quantizers.conftest import FLOATS

RNG = np.random.default_rng(4)
KERNEL = RNG.normal(size=(3, 3, 4, 6))
WEIGHTS = RNG.normal(size=30)
LEVELS = np.linspace(-0.5, 1.5, 41)


def _swish(x, dy, beta):
    return dy * beta * (2 - beta * x * np.tanh(beta * x * 0.5)) / (1 + np.cosh(beta * x))


def _tern(x, d):
    return np.sign(np.sign(x + d) + np.sign(x - d))


def _dorefa_weights(x, n):
    t, m = np.tanh(x), np.max(np.abs(np.tanh(x)))
    return 2 * (np.round((t / (2 * m) + 0.5) * n) / n) - 1


def _scale(x):
    return np.mean(np.abs(x), axis=(0, 1, 2))


# (function form with larq's keywords, input, numpy value(x), numpy gradient(x, dy)) from larq 0.14's formulas.
CASES = {
    "ste_sign": (
        lambda v: lqq.ste_sign(v, clip_value=0.5),
        GRID,
        larq_sign,
        lambda x, dy: clipped(x, dy, 0.5),
    ),
    "ste_sign_unclipped": (lambda v: lqq.ste_sign(v, clip_value=None), GRID, larq_sign, lambda x, dy: dy),
    "approx_sign": (
        lqq.approx_sign,
        GRID,
        larq_sign,
        lambda x, dy: np.where(np.abs(x) <= 1, (1 - np.abs(x)) * 2 * dy, 0),
    ),
    "swish_sign": (lambda v: lqq.swish_sign(v, beta=2.0), GRID, larq_sign, lambda x, dy: _swish(x, dy, 2.0)),
    "ste_heaviside": (
        lambda v: lqq.ste_heaviside(v, clip_value=0.25),
        GRID,
        lambda x: np.sign(np.maximum(x, 0.0)),
        lambda x, dy: clipped(x, dy, 0.25),
    ),
    "ste_tern": (
        lambda v: lqq.ste_tern(v, threshold_value=0.25, ternary_weight_networks=False, clip_value=0.5),
        GRID,
        lambda x: _tern(x, 0.25),
        lambda x, dy: clipped(x, dy, 0.5),
    ),
    "ste_tern_twn": (
        lambda v: lqq.ste_tern(v, ternary_weight_networks=True),
        WEIGHTS,
        lambda x: _tern(x, 0.7 * np.sum(np.abs(x)) / x.size),
        lambda x, dy: clipped(x, dy, 1.0),
    ),
    "magnitude_aware_sign": (
        lambda v: lqq.magnitude_aware_sign(v, clip_value=0.5),
        KERNEL,
        lambda x: _scale(x) * larq_sign(x),
        lambda x, dy: _scale(x) * clipped(x, dy, 0.5),
    ),
    "dorefa_activations": (
        lambda v: lqq.dorefa_quantizer(v, k_bit=4, mode="activations"),
        LEVELS,
        lambda x: np.round(np.clip(x, 0.0, 1.0) * 15) / 15,
        lambda x, dy: np.where((x >= 0) & (x <= 1), dy, 0.0),
    ),
    "dorefa_weights": (
        lambda v: lqq.dorefa_quantizer(v, k_bit=2, mode="weights"),
        WEIGHTS,
        lambda x: _dorefa_weights(x, 3),
        lambda x, dy: dy * (1 - np.tanh(x) ** 2) / np.max(np.abs(np.tanh(x))),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_function_form_matches_larqs_formula(run, name):
    fn, x, value, gradient = CASES[name]
    y, grad, dy = run(fn, x, tf.float64)
    np.testing.assert_allclose(y, value(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, gradient(x, dy), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["ste_sign", "approx_sign", "ste_tern"])
def test_function_forms_keep_every_float_dtype(run, dtype, name):
    fn, x, value, gradient = CASES[name]
    y, grad, dy = run(fn, x, dtype)
    np.testing.assert_array_equal(y, value(x))
    np.testing.assert_allclose(grad, gradient(x, dy), rtol=1e-2)


def test_function_forms_use_larqs_defaults(run):
    for fn, reference in [
        (lqq.ste_sign, "ste_sign"),
        (lqq.ste_heaviside, "ste_heaviside"),
        (lqq.swish_sign, "swish_sign"),
    ]:
        _, grad, _ = run(fn, GRID, tf.float64)
        _, expected, _ = run(q.get(reference), GRID, tf.float64)  # the class with larq's defaults
        np.testing.assert_array_equal(grad, expected)


def test_function_forms_reject_bad_arguments_with_ste_errors():
    with pytest.raises(ste.errors.ParameterError, match="clip_value"):
        lqq.ste_sign(GRID, clip_value=-1.0)
    with pytest.raises(ste.errors.ParameterError, match="mode"):
        lqq.dorefa_quantizer(GRID, mode="weight")


def test_function_form_inside_a_keras_activation_layer_and_tf_function():
    layer = keras.layers.Activation(lqq.approx_sign)
    x = tf.constant([[-0.5, 0.0, 2.0]])
    np.testing.assert_array_equal(layer(x).numpy(), [[-1.0, 1.0, 1.0]])
    np.testing.assert_array_equal(tf.function(lqq.ste_sign)(x).numpy(), [[-1.0, 1.0, 1.0]])


@pytest.mark.parametrize("dtype", FLOATS)
def test_noop_is_the_identity_with_a_declared_precision(run, dtype):
    y, grad, dy = run(q.NoOp(precision=1), GRID, dtype)
    np.testing.assert_array_equal(y, GRID.astype(dtype.as_numpy_dtype).astype(np.float64))
    np.testing.assert_array_equal(grad, dy)
    assert q.NoOp(precision=4).precision == 4
    assert "noop" not in q.names()  # precision has no default, so NoOp has no name that builds without arguments


def test_noop_serializes_and_rejects_a_bad_precision():
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(q.NoOp(precision=2)))
    assert isinstance(restored, q.NoOp) and restored.precision == 2
    for bad in (0, 33, 1.5, True, None):
        with pytest.raises(ste.errors.ParameterError, match="precision"):
            q.NoOp(precision=bad)


def test_noop_kernel_counts_at_its_precision_in_the_layer():
    layer = ste.layers.QuantDense(4, kernel_quantizer=q.NoOp(precision=1), kernel_constraint="weight_clip")
    layer.build((None, 3))
    assert layer.kernel_precisions == {"kernel": 1}
    np.testing.assert_array_equal(layer.quantized_kernel.numpy(), layer.kernel.numpy())


def test_summary_counts_a_noop_kernel_at_its_declared_precision():
    model = keras.Sequential(
        [keras.Input((3,)), ste.layers.QuantDense(4, kernel_quantizer=q.NoOp(precision=1), use_bias=False)]
    )
    (layer,) = ste.summary(model, print_fn=None).layers
    assert layer.kernel_bits == (1,) and layer.params == {1: 12}
