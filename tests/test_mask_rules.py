"""``ste.mask_rule`` (issue 13): hand-written rules that read their input only through a predicate keep it as bits.

DoReFa activations, Uniform and MagnitudeAwareSign (with a mask-only surrogate) use it. Every gradient is compared bit
for bit with the plain path (``ste.bit_masks(False)``: the op keeps its float input) and with a numpy formula.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste._core._rules import PackedMask, make_rule
from ste.quantizers._uniform import dorefa_activations_vjp, uniform_vjp
from tests.test_bit_masks import (  # noqa: F401  (the fixture applies here too)
    DTYPES,
    MODES,
    _grad_fn,
    _pack_small_eager_tensors,
    lean_equals_plain,
)

_NUMPY = {tf.float16: np.float16, tf.bfloat16: ml_dtypes.bfloat16, tf.float32: np.float32, tf.float64: np.float64}


def _mas_formula(x: np.ndarray, dy: np.ndarray, clip: float, dtype: tf.DType) -> np.ndarray:
    """dy·α·1[|x| <= clip] with α held constant, the product rounded in ``dtype``; α = abs of the forward's output
    α·sign(x) (its value is tested against larq's in tests/quantizers)."""
    alpha = np.abs(np.asarray(tf.cast(ste.quantizers.MagnitudeAwareSign()(tf.cast(x, dtype)), tf.float64)))
    kind = _NUMPY[dtype]
    return (dy.astype(kind) * alpha.astype(kind)).astype(np.float64) * (np.abs(x) <= clip)


CASES: dict[str, tuple[Any, Any]] = {
    "dorefa(bits=2)": (ste.quantizers.DoReFa(bits=2), lambda x, dy, dtype: dy * ((x >= 0) & (x <= 1))),
    "uniform(bits=3, -0.5..2)": (
        ste.quantizers.Uniform(bits=3, min=-0.5, max=2.0),
        lambda x, dy, dtype: dy * ((x >= -0.5) & (x <= 2.0)),
    ),
    "magnitude_aware_sign": (ste.quantizers.MagnitudeAwareSign(), lambda x, dy, d: _mas_formula(x, dy, 1.0, d)),
    "magnitude_aware_sign(straight_through(clip=0.5))": (
        ste.quantizers.MagnitudeAwareSign(surrogate="straight_through(clip=0.5)"),
        lambda x, dy, d: _mas_formula(x, dy, 0.5, d),
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_quantizer_rules_keep_bits_with_bit_identical_gradients(dtype: tf.DType, mode: str) -> None:
    for name, (quantizer, formula) in CASES.items():
        for x, dy, lean in lean_equals_plain(quantizer, dtype, mode, name):
            x64, dy64 = np.asarray(tf.cast(x, tf.float64)), np.asarray(tf.cast(dy, tf.float64))
            expected = tf.cast(tf.constant(formula(x64, dy64, dtype), tf.float64), dtype)
            # values (XLA may turn dy·0 = −0 into +0, in the plain path alike); α = mean(|x|) is a reduction whose
            # order XLA may change, so the magnitude-aware sign's values are compared within 2 ulps
            rtol = 2 * float(ml_dtypes.finfo(_NUMPY[dtype]).eps) if name.startswith("magnitude") else 0.0
            np.testing.assert_allclose(
                np.asarray(tf.cast(lean, tf.float64)), np.asarray(tf.cast(expected, tf.float64)), rtol, 0, err_msg=name
            )


def test_what_the_quantizer_rules_keep() -> None:
    x = tf.random.stateless_normal([3, 11], seed=(1, 2))  # 33 elements: 5 bytes
    for fn, kwargs in ((dorefa_activations_vjp, {"bits": 2}), (uniform_vjp, {"bits": 4, "low": -1.0, "high": 1.0})):
        saved = make_rule(fn, {}).saved_for_backward([x], kwargs)
        assert isinstance(saved, PackedMask)
        assert saved.bits.dtype == tf.uint8 and saved.bits.shape == [5] and saved.kept == ()
    mas = ste.quantizers.MagnitudeAwareSign()
    saved = make_rule(mas.op.rule, {}).saved_for_backward([x], {})
    assert isinstance(saved, PackedMask) and [k.shape for k in saved.kept] == [[11]]  # the mask and one α per channel
    # a surrogate that needs the value keeps the input
    value = ste.quantizers.MagnitudeAwareSign(surrogate="approx_sign")
    assert not isinstance(make_rule(value.op.rule, {}).saved_for_backward([x], {}), PackedMask)


def test_a_users_rule_declares_its_mask() -> None:
    @ste.mask_rule(lambda x, *, width: tf.abs(x) < width / 2)
    def window(dy: tf.Tensor, inside: tf.Tensor, *, width: float) -> tf.Tensor:
        return dy * tf.cast(inside, dy.dtype) / width

    op = ste.forward(tf.sign).backward(window, width=4.0)
    x = tf.constant([-3.0, -2.0, -1.5, 0.0, 1.9, 2.0, 5.0])
    dy = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert isinstance(make_rule(window, {"width": 4.0}).saved_for_backward([x], {}), PackedMask)
    for mode in MODES:
        for enabled in (True, False, None):  # None: in a graph the function's own input is kept as it is
            with ste.bit_masks(enabled):
                got = _grad_fn(op, mode)(x, dy)
            np.testing.assert_array_equal(got.numpy(), dy.numpy() * (np.abs(x.numpy()) < 2.0) / 4.0)


def test_mask_rule_misuse_is_refused() -> None:
    with pytest.raises(ste.errors.RuleError, match="expected a function of the input"):
        ste.mask_rule(3)  # type: ignore[arg-type]

    @ste.mask_rule(lambda x: tf.cast(x > 0, x.dtype))
    def float_mask(dy: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        return dy * mask

    with pytest.raises(ste.errors.RuleError, match="must return a boolean tensor"):
        op = ste.forward(tf.sign).backward(float_mask)
        tf.function(lambda x: op(x)).get_concrete_function(tf.TensorSpec([3]))

    @ste.mask_rule(lambda x: x > 0)
    def two(dy: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        return dy

    with pytest.raises(ste.errors.RuleError, match="one positional input; this op has 2"):
        ste.forward(tf.add).backward(two)(tf.ones([2]), tf.ones([2]))
