"""The DSL end to end: the three questions, decorator forms, calling conventions, execution modes."""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.helpers import value_and_grads

GRID = np.array([-3.0, -1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0, 3.0], dtype=np.float32)


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# -- the three questions ------------------------------------------------------------------------------------


def test_relu_forward_sigmoid_backward() -> None:
    op = ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid)
    dy = np.linspace(-2, 2, GRID.size).astype(np.float32)
    y, (g,) = value_and_grads(op, GRID, dy=tf.constant(dy))
    np.testing.assert_array_equal(y, np.maximum(GRID, 0))
    s = np_sigmoid(GRID.astype(np.float64))
    np.testing.assert_allclose(g, dy * s * (1 - s), rtol=1e-6, atol=1e-7)


def test_hard_mask_with_identity_and_sigmoid_gradients() -> None:
    mask = ste.forward(lambda x: tf.cast(x > 0, x.dtype)).backward("identity")
    y, (g,) = value_and_grads(mask, GRID)
    np.testing.assert_array_equal(y, (GRID > 0).astype(np.float32))
    np.testing.assert_array_equal(g, np.ones_like(GRID))

    soft = ste.forward(lambda x: tf.cast(x > 0, x.dtype)).backward("sigmoid_surrogate", beta=4.0)
    y, (g,) = value_and_grads(soft, GRID)
    np.testing.assert_array_equal(y, (GRID > 0).astype(np.float32))
    s = np_sigmoid(4.0 * GRID.astype(np.float64))
    np.testing.assert_allclose(g, 4.0 * s * (1 - s), rtol=1e-6, atol=1e-7)


def test_skip_an_activations_derivative_in_a_keras_model() -> None:
    skip = ste.forward(tf.sigmoid).backward("identity")
    x = np.array([[0.5, -1.0], [2.0, 0.25]], dtype=np.float32)
    w0 = np.array([[1.0, -2.0], [0.5, 1.5]], dtype=np.float32)

    with tf.GradientTape() as tape:
        w = tf.Variable(w0)
        z = tf.matmul(x, w)
        loss = tf.reduce_sum(skip(z))
    (gw,) = tape.gradient(loss, [w])
    # d loss / dz = 1 everywhere (the sigmoid's derivative is skipped), so d loss / dw = x^T @ ones.
    np.testing.assert_allclose(gw.numpy(), x.T @ np.ones((2, 2), np.float32), rtol=1e-6)
    np.testing.assert_allclose(skip(z).numpy(), np_sigmoid(x @ w0), rtol=1e-6)


# -- decorator forms, metadata, immutability ----------------------------------------------------------------


def test_decorator_forward_then_backward() -> None:
    @ste.forward
    def binarize(x):  # type: ignore[no-untyped-def]
        """Sign with sign(0) = +1."""
        return tf.where(x >= 0, tf.ones_like(x), -tf.ones_like(x))

    assert isinstance(binarize, ste.Forward)

    @binarize.backward
    def binarize(dy, x):  # type: ignore[no-untyped-def]
        return dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype)

    assert isinstance(binarize, ste.STEFunction)
    y, (g,) = value_and_grads(binarize, GRID)
    np.testing.assert_array_equal(y, np.where(GRID >= 0, 1.0, -1.0))
    np.testing.assert_array_equal(g, (np.abs(GRID) <= 1).astype(np.float32))
    assert binarize.__doc__ == "Sign with sign(0) = +1."


def test_decorating_a_plain_function_with_a_registry_rule() -> None:
    @ste.backward("straight_through")
    def heaviside(x: tf.Tensor) -> tf.Tensor:
        """Heaviside step."""
        return tf.cast(x > 0, x.dtype)

    y, (g,) = value_and_grads(heaviside, GRID)
    np.testing.assert_array_equal(y, (GRID > 0).astype(np.float32))
    np.testing.assert_array_equal(g, (np.abs(GRID) <= 1.0).astype(np.float32))
    assert heaviside.__name__ == "heaviside"
    assert heaviside.__doc__ == "Heaviside step."
    assert list(inspect.signature(heaviside).parameters) == ["x"]
    assert repr(heaviside) == "ste.forward(heaviside).backward(straight_through(clip=1.0))"


def test_backward_like_decorator() -> None:
    @ste.backward_like(tf.tanh)
    def sign(x: tf.Tensor) -> tf.Tensor:
        return tf.sign(x)

    y, (g,) = value_and_grads(sign, GRID)
    np.testing.assert_array_equal(y, np.sign(GRID))
    np.testing.assert_allclose(g, 1 - np.tanh(GRID.astype(np.float64)) ** 2, rtol=1e-6, atol=2e-7)
    assert repr(sign) == "ste.forward(sign).backward_like(tanh)"
    assert sign.rule is tf.tanh


def test_forward_without_backward_raises() -> None:
    fwd = ste.forward(tf.sign)
    with pytest.raises(ste.errors.MissingBackwardError, match=r"ste.forward\(sign\) has no backward rule"):
        fwd(tf.constant(1.0))
    assert repr(fwd) == "ste.forward(sign)"


def test_backward_returns_a_new_op_and_leaves_the_original_unchanged() -> None:
    first = ste.forward(tf.sign).backward("straight_through", clip=1.0)
    second = first.backward("sigmoid_surrogate(beta=2.0)")
    third = second.backward_like(tf.tanh)
    assert first is not second and second is not third
    assert repr(first) == "ste.forward(sign).backward(straight_through(clip=1.0))"
    assert repr(second) == "ste.forward(sign).backward(sigmoid_surrogate(beta=2.0))"
    assert first.rule == ste.registry.get("straight_through", clip=1.0)
    assert first.forward_fn is tf.sign and third.forward_fn is tf.sign
    _, (g1,) = value_and_grads(first, GRID)
    np.testing.assert_array_equal(g1, (np.abs(GRID) <= 1).astype(np.float32))
    with pytest.raises(AttributeError):
        first.rule = "zero"  # type: ignore[misc]


def test_callable_rule_repr_names_rule_and_bound_params() -> None:
    def scaled(dy: tf.Tensor, x: tf.Tensor, scale: float) -> tf.Tensor:
        return dy * scale

    op = ste.forward(tf.sign).backward(scaled, scale=3.0)
    assert repr(op) == "ste.forward(sign).backward(scaled, scale=3.0)"
    _, (g,) = value_and_grads(op, GRID)
    np.testing.assert_array_equal(g, np.full_like(GRID, 3.0))


# -- calling conventions -----------------------------------------------------------------------------------


def _scaled_clip():  # type: ignore[no-untyped-def]
    @ste.forward
    def hardclip(x, *, limit):  # type: ignore[no-untyped-def]
        return tf.clip_by_value(x, -limit, limit)

    @hardclip.backward
    def hardclip(dy, x, *, limit):  # type: ignore[no-untyped-def]
        return dy * tf.cast(tf.abs(x) <= 2 * limit, dy.dtype)

    return hardclip


@pytest.mark.parametrize("mode", ["eager", "function", "xla"])
def test_keyword_hyperparameters_reach_forward_and_rule_in_every_mode(mode: str) -> None:
    op = _scaled_clip()
    x = tf.constant(GRID)

    def run(x, limit):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x, limit=limit)
        return y, tape.gradient(y, x)

    if mode != "eager":
        run = tf.function(run, jit_compile=(mode == "xla"))
    for limit in (0.5, 1.0):
        y, g = run(x, limit)
        np.testing.assert_allclose(y.numpy(), np.clip(GRID, -limit, limit))
        np.testing.assert_array_equal(g.numpy(), (np.abs(GRID) <= 2 * limit).astype(np.float32))


def test_hyperparameter_tensor_is_not_differentiated() -> None:
    op = _scaled_clip()
    x = tf.constant(GRID)
    limit = tf.constant(1.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, limit])
        y = op(x, limit=limit)
    assert tape.gradient(y, limit) is None
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), (np.abs(GRID) <= 2).astype(np.float32))


def test_several_inputs_each_get_their_gradient() -> None:
    @ste.forward
    def gate(x, w):  # type: ignore[no-untyped-def]
        return tf.cast(x * w > 0, x.dtype)

    @gate.backward
    def gate(dy, x, w):  # type: ignore[no-untyped-def]
        return dy * w, tf.reduce_sum(dy * x, axis=0)

    x = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], np.float32)
    w = np.array([0.5, -1.0, 2.0], np.float32)
    dy = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]], np.float32)
    y, (gx, gw) = value_and_grads(gate, x, w, dy=tf.constant(dy))
    np.testing.assert_array_equal(y, (x * w > 0).astype(np.float32))
    np.testing.assert_allclose(gx, dy * w)
    np.testing.assert_allclose(gw, (dy * x).sum(axis=0))


def test_rule_may_return_none_for_an_input() -> None:
    op = ste.forward(lambda x, t: tf.cast(x > t, x.dtype)).backward(lambda dy, x, t: (dy, None))
    x, t = tf.constant([1.0, -1.0]), tf.constant([0.0, 0.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, t])
        y = op(x, t)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [1.0, 1.0])
    assert tape.gradient(y, t) is None


def test_python_numbers_and_numpy_arrays_are_inputs() -> None:
    op = ste.forward(tf.sign).backward("identity")
    assert op(2.5).numpy() == 1.0
    assert op(np.float64(-2.0)).dtype == tf.float64


def test_tf_variable_gets_its_gradient() -> None:
    op = ste.forward(tf.sign).backward("straight_through", clip=1.0)
    v = tf.Variable([0.5, -3.0, 0.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(op(v) * tf.constant([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(tape.gradient(loss, v).numpy(), [1.0, 0.0, 3.0])


class _BinaryScale(keras.layers.Layer):
    """y = sign(w) * x with a clipped straight-through gradient for w."""

    def __init__(self, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.op = ste.forward(tf.sign).backward("straight_through", clip=1.0)

    def build(self, input_shape):  # type: ignore[no-untyped-def]
        self.w = self.add_weight(shape=(input_shape[-1],), initializer=keras.initializers.Constant([0.5, -2.0, 0.1]))

    def call(self, x):  # type: ignore[no-untyped-def]
        return x * self.op(self.w)


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_keras_fit_updates_a_keras_variable_through_the_op(run_eagerly: bool) -> None:
    keras.utils.set_random_seed(0)
    x = np.array([[1.0, 2.0, -1.0], [0.5, -1.0, 2.0]], np.float32)
    target = np.zeros((2, 3), np.float32)
    layer = _BinaryScale()
    model = keras.Sequential([keras.Input((3,)), layer])
    lr = 0.1
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse", run_eagerly=run_eagerly)
    w0 = np.array([0.5, -2.0, 0.1], np.float32)
    model.fit(x, target, batch_size=2, epochs=1, verbose=0, shuffle=False)
    # loss = mean((x * sign(w))^2); dloss/dw_j = sum_i 2 x_ij^2 sign(w_j) / 6 * 1[|w_j| <= 1]
    sign = np.where(w0 >= 0, 1.0, -1.0)
    grad = (2 * x**2 * sign).sum(axis=0) / x.size * (np.abs(w0) <= 1)
    np.testing.assert_allclose(layer.w.numpy(), w0 - lr * grad, rtol=1e-6)


def test_jacobian_is_the_documented_diagonal() -> None:
    op = ste.forward(lambda x: tf.cast(x > 0, x.dtype)).backward("sigmoid_surrogate", beta=2.0)
    x = tf.constant(GRID[:5])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    jac = tape.jacobian(y, x)
    s = np_sigmoid(2.0 * GRID[:5].astype(np.float64))
    np.testing.assert_allclose(jac.numpy(), np.diag(2 * s * (1 - s)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_second_order_gradient_of_a_differentiable_rule(mode: str) -> None:
    op = ste.forward(tf.sign).backward_like(tf.tanh)

    def second(x):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = op(x)
            g = inner.gradient(y, x)
        return g, outer.gradient(g, x)

    if mode == "function":
        second = tf.function(second)
    g, gg = second(tf.constant(GRID, tf.float64))
    t = np.tanh(GRID.astype(np.float64))
    np.testing.assert_allclose(g.numpy(), 1 - t**2, rtol=1e-12)
    np.testing.assert_allclose(gg.numpy(), -2 * t * (1 - t**2), rtol=1e-12, atol=1e-15)


def test_eager_function_and_xla_agree_inside_control_flow() -> None:
    op = ste.forward(tf.round).backward("sigmoid_surrogate", beta=1.5)

    def step(x):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.cond(tf.reduce_sum(x) > -100.0, lambda: op(x), lambda: x)
            y = tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, op(v) + x), (0, y), maximum_iterations=2)[1]
        return y, tape.gradient(y, x)

    x = tf.constant(GRID)
    results = [step(x), tf.function(step)(x), tf.function(step, jit_compile=True)(x)]
    for y, g in results[1:]:
        np.testing.assert_allclose(y.numpy(), results[0][0].numpy(), rtol=1e-6)
        np.testing.assert_allclose(g.numpy(), results[0][1].numpy(), rtol=1e-5)

    # independent check of the eager result: y2 = round(round(round(x) + x) + x) ... chain rule with d = sigmoid'
    def d(v: np.ndarray) -> np.ndarray:
        s = np_sigmoid(1.5 * v)
        return 1.5 * s * (1 - s)

    x64 = GRID.astype(np.float64)
    y0 = np.round(x64)
    y1 = np.round(y0) + x64
    grad = d(y1) * (d(y0) * d(x64) + 1) + 1
    np.testing.assert_allclose(results[0][1].numpy(), grad, rtol=1e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_an_op_passed_to_a_tf_function_keeps_its_rule(jit: bool) -> None:
    """An op given to a tf.function as an argument (or a lambda's default) is traced as the op, not its forward."""
    op = ste.forward(tf.sign).backward("sigmoid_surrogate", beta=1.0)
    by_argument = tf.function(lambda x, f: f(x), jit_compile=jit)
    by_default = tf.function(lambda x, f=op: f(x), jit_compile=jit)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    sigma = 1 / (1 + np.exp(-x.astype(np.float64)))
    expected = sigma * (1 - sigma)  # d/dx sigmoid(x): the surrogate's gradient, where tf.sign's own is 0
    for call in (lambda t: by_argument(t, op), by_default):
        t = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = call(t)
        np.testing.assert_array_equal(y.numpy(), np.sign(x))
        np.testing.assert_allclose(tape.gradient(y, t).numpy(), expected, rtol=1e-6)


def _halve_and_round(x: tf.Tensor) -> tf.Tensor:  # a module-level forward: AutoGraph does not allowlist this module
    return tf.round(x / 2.0)


def test_an_op_called_from_autograph_code_runs_as_it_does_eagerly(caplog: pytest.LogCaptureFixture) -> None:
    """Eager calls skip the do_not_convert wrapper; in AutoGraph-converted code the op still runs unconverted (no
    AutoGraph warning) with its rule, the same as eagerly."""
    op = ste.forward(_halve_and_round).backward("sigmoid_surrogate", beta=2.0)

    def step(x):  # type: ignore[no-untyped-def]
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x)
            if tf.reduce_sum(y) > -1e9:  # Python control flow on a tensor: AutoGraph converts this function
                y = y * 3.0
        return y, tape.gradient(y, x)

    x = tf.constant(GRID)
    with caplog.at_level("WARNING"):
        traced = tf.function(step, autograph=True)(x)
    assert not [r for r in caplog.records if "AutoGraph" in r.getMessage()]
    x64 = GRID.astype(np.float64)
    s = np_sigmoid(2.0 * x64)
    for y, g in (traced, step(x)):  # the eager call takes the fast path
        np.testing.assert_array_equal(y.numpy(), 3.0 * np.round(GRID / 2.0))
        np.testing.assert_allclose(g.numpy(), 3.0 * 2.0 * s * (1 - s), rtol=1e-5, atol=1e-7)
