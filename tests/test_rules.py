"""Issue 11: misuse of the DSL becomes a typed error or the documented result; the one Rule interface; cache keys."""

from __future__ import annotations

import math
import re
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste._core._rules import CallableRule, LikeRule, Rule, SurrogateRule
from tests.references import reference_derivative, tf_sign

MODES = ["eager", "tf.function", "jit_compile"]
X = np.array([-2.0, -0.5, 0.25, 1.5], np.float32)


def _in_mode(fn: Any, mode: str) -> Any:
    return fn if mode == "eager" else tf.function(fn, jit_compile=mode == "jit_compile")


def _grad(op: Any, x: Any, mode: str = "eager", **kwargs: Any) -> Any:
    def step(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x, **kwargs)
        return tape.gradient(y, x)

    result = _in_mode(step, mode)(tf.convert_to_tensor(x))
    return result if isinstance(x, tf.Tensor) else np.asarray(result)


# -- item 1: a value function passed as a VJP rule ----------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [tf.tanh, tf.nn.relu, tf.math.sigmoid, np.tanh, keras.activations.tanh, keras.ops.tanh, max, pow, math.tanh],
    ids=[
        "tf.tanh",
        "tf.nn.relu",
        "tf.math.sigmoid",
        "np.tanh",
        "keras.activations.tanh",
        "keras.ops.tanh",
        "max",  # max(dy, x) binds, then compares tensors at gradient time (a raw ValueError)
        "pow",
        "math.tanh",
    ],
)
def test_a_library_function_is_refused_as_a_vjp_rule(fn: Any) -> None:
    with pytest.raises(ste.errors.RuleError, match="backward_like") as info:
        ste.forward(tf.sign).backward(fn)
    assert "vector-Jacobian" in str(info.value)
    with pytest.raises(ste.errors.RuleError, match="backward_like"):
        ste.backward(fn)


def test_a_callable_that_cannot_take_dy_and_an_input_is_refused() -> None:
    with pytest.raises(ste.errors.RuleError, match="backward_like"):
        ste.forward(tf.sign).backward(lambda x: x)
    with pytest.raises(ste.errors.RuleError, match="backward_like"):
        ste.forward(tf.sign).backward(abs)
    # the suggested fix works: the gradient is tanh'(x), not tanh(dy)
    grad = _grad(ste.forward(tf.sign).backward_like(tf.tanh), X)
    np.testing.assert_allclose(grad, 1.0 - np.tanh(X.astype(np.float64)) ** 2, rtol=1e-6)


def test_a_rule_with_hyperparameters_bound_later_is_accepted() -> None:
    def rule(dy: tf.Tensor, x: tf.Tensor, *, width: float) -> tf.Tensor:
        return dy * tf.cast(tf.abs(x) <= width, dy.dtype)

    op = ste.forward(lambda x, width: tf.sign(x)).backward(rule)
    np.testing.assert_array_equal(_grad(op, X, width=1.0), (np.abs(X) <= 1.0).astype(np.float32))


# -- item 3: a registry surrogate on a multi-output forward ----------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("structure", ["tuple", "dict"])
def test_surrogate_on_a_multi_output_forward_raises_when_traced(structure: str, mode: str) -> None:
    if structure == "tuple":
        forward = lambda x: (tf.sign(x[1]), tf.sign(x[0]))  # noqa: E731
    else:
        forward = lambda x: {"a": tf.sign(x), "b": tf.sign(-x)}  # noqa: E731
    op = ste.forward(forward).backward("identity")
    with pytest.raises(ste.errors.RuleError, match="one-output"):
        _grad(op, X, mode)


# -- unclear errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_non_elementwise_forward_with_a_surrogate(mode: str) -> None:
    op = ste.forward(tf.reduce_sum).backward("identity")
    with pytest.raises(ste.errors.RuleError, match=r"elementwise forward \(output shape = input shape\)") as info:
        _grad(op, X, mode)
    assert "backward_like" in str(info.value)


def test_non_elementwise_forward_with_a_surrogate_and_unknown_shapes_says_so_at_run_time() -> None:
    op = ste.forward(lambda x: tf.reduce_sum(x, axis=-1)).backward("identity")
    step = tf.function(lambda x: _grad(op, x, "eager"), input_signature=[tf.TensorSpec(None, tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"elementwise forward \(output shape = input shape\)"):
        step(tf.constant([[1.0, 2.0]]))


def test_a_float_hyperparameter_given_positionally_gets_the_keyword_hint() -> None:
    def quantize(x: tf.Tensor, *, bits: float) -> tf.Tensor:
        return tf.round(x * bits) / bits

    op = ste.forward(quantize).backward("straight_through")
    with pytest.raises(ste.errors.CallError, match="by keyword") as info:
        op(X, 3.0)
    assert "[1]" in str(info.value)
    rule_op = ste.forward(lambda x, *rest: tf.round(x)).backward(lambda dy, x: dy)
    with pytest.raises(ste.errors.RuleError, match="by keyword"):
        rule_op(X, 3.0)
    with pytest.raises(ste.errors.CallError, match="by keyword"):
        tf.function(lambda x: op(x, 3.0))(tf.constant(X))
    np.testing.assert_allclose(op(X, bits=3.0).numpy(), np.round(X * 3.0) / 3.0)


def test_backward_decorator_on_a_rule_with_another_name_explains_the_naming() -> None:
    @ste.forward
    def binarize(x: tf.Tensor) -> tf.Tensor:
        return tf_sign(x)

    @binarize.backward
    def binarize_grad(dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        return dy

    assert isinstance(binarize_grad, ste.STEFunction)
    with pytest.raises(ste.errors.MissingBackwardError, match="property.setter") as info:
        binarize(X)
    message = str(info.value)
    assert "'binarize_grad'" in message and "def binarize(dy, x)" in message
    np.testing.assert_array_equal(_grad(binarize_grad, X), np.ones(4, np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_indexed_slices_without_dense_shape_is_a_typed_error(mode: str) -> None:
    op = ste.forward(tf_sign).backward(lambda dy, x: tf.IndexedSlices(dy, tf.range(tf.shape(dy)[0])))
    with pytest.raises(ste.errors.RuleError, match="dense_shape"):
        _grad(op, X, mode)
    with_shape = ste.forward(tf_sign).backward(
        lambda dy, x: tf.IndexedSlices(dy, tf.range(tf.shape(dy)[0]), dense_shape=tf.shape(x))
    )
    np.testing.assert_array_equal(_grad(with_shape, X, mode), np.ones(4, np.float32))


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("rule", ["sigmoid_surrogate", "callable"])
def test_cond_in_a_persistent_tape_in_tf_function(rule: str, jit: bool) -> None:
    """TensorFlow's cond gradient asserted on an input captured from the enclosing graph; ste captures it."""
    op = (
        ste.forward(tf.sign).backward("sigmoid_surrogate")
        if rule == "sigmoid_surrogate"
        else ste.forward(tf.sign).backward(lambda dy, x: dy * tf.sigmoid(x) * tf.sigmoid(-x))
    )
    x = tf.constant(X)

    @tf.function(jit_compile=jit)
    def step(x: tf.Tensor, flag: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = tf.cond(flag, lambda: op(x), lambda: x * 2.0)
        return tape.gradient(y, x)

    s = 1.0 / (1.0 + np.exp(-X.astype(np.float64)))
    np.testing.assert_allclose(step(x, tf.constant(True)).numpy(), s * (1.0 - s), rtol=1e-6)
    np.testing.assert_array_equal(step(x, tf.constant(False)).numpy(), np.full(4, 2.0, np.float32))


# -- item 6: compile cache keys -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_cache_keys_distinguish_signed_zeros_and_bools(mode: str) -> None:
    def forward(x: tf.Tensor, *, t: float = 1.0, flags: tuple[Any, ...] = (1,)) -> tf.Tensor:
        kind = 2.0 if isinstance(flags[0], bool) else 1.0
        return x * math.copysign(1.0, t) * kind

    op = ste.forward(forward).backward("identity")
    x = tf.constant(X)

    def run(x: tf.Tensor, **kw: Any) -> tf.Tensor:  # a new tf.function each time: only ste's own cache is shared
        return _in_mode(lambda x: op(x, **kw), mode)(x)

    np.testing.assert_array_equal(run(x, t=0.0).numpy(), X)
    np.testing.assert_array_equal(run(x, t=-0.0).numpy(), -X)
    np.testing.assert_array_equal(run(x, flags=(1,)).numpy(), X)
    np.testing.assert_array_equal(run(x, flags=(True,)).numpy(), 2.0 * X)
    np.testing.assert_array_equal(run(x, t=float("nan")).numpy(), X)  # NaN is a usable key (copysign(1, nan) = 1)
    np.testing.assert_array_equal(run(x, t=np.float32(-0.0)).numpy(), -X)


# -- one Rule interface ---------------------------------------------------------------------------------------


def test_every_rule_kind_implements_the_protocol_and_describes_itself() -> None:
    def rule(dy: tf.Tensor, x: tf.Tensor, scale: float = 1.0) -> tf.Tensor:
        return dy * scale

    ops = {
        "ste.forward(sign).backward(triangle(width=2.0))": ste.forward(tf.sign).backward("triangle", width=2.0),
        "ste.forward(sign).backward(rule, scale=2.0)": ste.forward(tf.sign).backward(rule, scale=2.0),
        "ste.forward(sign).backward_like(tanh)": ste.forward(tf.sign).backward_like(tf.tanh),
    }
    for text, op in ops.items():
        assert repr(op) == text
    members = [m for m in dir(Rule) if not m.startswith("_")]
    for kind in (SurrogateRule, CallableRule, LikeRule):
        assert all(hasattr(kind, m) for m in members), kind


def test_no_module_outside_rules_branches_on_rule_classes() -> None:
    import pathlib

    root = pathlib.Path(ste.__file__).parent
    for path in root.rglob("*.py"):
        if "_rules" in path.relative_to(root).parts:  # the rule kinds themselves
            continue
        text = path.read_text()
        patterns = (
            r"isinstance\((op\.)?_?rule\b",
            r"SurrogateRule",
            r"CallableRule",
            r"LikeRule\)",
            r"\._accepted",
            r"rule\.(g|fn|surrogate|params)\b",
        )
        for pattern in patterns:
            assert not re.search(pattern, text), f"{path.relative_to(root)} matches {pattern}"


def test_check_gradient_uses_each_rules_reference() -> None:
    x = np.linspace(-2.0, 2.0, 41)
    ste.testing.check_gradient(ste.forward(tf_sign).backward("sigmoid_surrogate", beta=2.0), x)
    ste.testing.check_gradient(ste.forward(tf_sign).backward_like(tf.tanh), x)
    wrong = ste.forward(tf_sign).backward(lambda dy, x: dy * tf.sigmoid(x))
    with pytest.raises(ste.errors.CallError, match="reference="):
        ste.testing.check_gradient(wrong, x)
    with pytest.raises(AssertionError):
        ste.testing.check_gradient(wrong, x, reference=lambda x: tf.tanh(x))
    np.testing.assert_allclose(
        _grad(ste.forward(tf_sign).backward("sigmoid_surrogate", beta=2.0), x),
        reference_derivative("sigmoid_surrogate", x, {"beta": 2.0}),
        rtol=1e-12,
    )


def test_user_callables_stay_accepted_as_rules() -> None:
    """Only library value functions and callables that cannot take (dy, x) are refused."""

    @tf.function
    def traced_rule(dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        return 2.0 * dy

    class Rule2:
        def __call__(self, dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
            return 3.0 * dy

    for rule, factor in ((traced_rule, 2.0), (Rule2(), 3.0)):
        np.testing.assert_array_equal(_grad(ste.forward(tf.sign).backward(rule), X), np.full(4, factor, np.float32))
