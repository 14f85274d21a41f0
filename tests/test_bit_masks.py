"""Bit-packed backward masks (issue 13): the packing, mask-only surrogates and binary layers keep bits.

Every gradient is compared bit for bit with the plain path (``ste.bit_masks(False)``: the op keeps its float input, as
in ste 0.1) and with a numpy formula.
"""

from __future__ import annotations

import itertools
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste._core._bitmask import pack_bits, unpack_bits
from ste._core._rules import PackedMask, make_rule


@pytest.fixture(autouse=True)
def _pack_small_eager_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default ops pack masks of large tensors only; these tests pack every size."""
    monkeypatch.setattr(ste._core._bitmask, "MIN_ELEMENTS", 0)


DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
MODES = ("eager", "function", "xla")
SIZES = ((0,), (1,), (13,), (5, 7), (2, 8, 3))


def _run(fn: Any, mode: str) -> Any:
    if mode == "eager":
        return fn
    return tf.function(fn, jit_compile=mode == "xla", reduce_retracing=True)


def _values(shape: tuple[int, ...], dtype: tf.DType) -> tf.Tensor:
    size = int(np.prod(shape))
    grid = np.linspace(-2.5, 2.5, size) if size else np.zeros(0)
    specials = np.array([0.0, 1.0, -1.0, 0.5, -0.5, 2.0])[: min(size, 6)]
    grid[: len(specials)] = specials  # the clip and width/2 boundaries, exactly representable in every dtype
    return tf.cast(tf.constant(grid.reshape(shape)), dtype)


def _grad(op: Any, x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    return tape.gradient(y, x, output_gradients=dy)


def _grad_fn(op: Any, mode: str) -> Any:
    """``(x, dy) -> dy·op'(x)`` run in ``mode`` (the op is bound by closure, not as a default argument)."""
    return _run(lambda x, dy: _grad(op, x, dy), mode)


def _bits(t: tf.Tensor) -> np.ndarray:
    return np.asarray(tf.bitcast(t, {2: tf.uint16, 4: tf.uint32, 8: tf.uint64}[t.dtype.size]))


def lean_equals_plain(op: Any, dtype: tf.DType, mode: str, name: str) -> list[tuple[Any, Any, Any]]:
    """``(x, dy, gradient)`` at :func:`_values` of every shape of ``SIZES``, asserting the gradient with bit masks on
    is bit for bit the one with them off (the op keeps its float input). All the shapes go through one function per
    setting: one trace (one XLA compilation) instead of one per shape."""
    xs = [_values(shape, dtype) for shape in SIZES]
    dys = [tf.cast(tf.constant(np.linspace(-3.0, 3.0, x.shape.num_elements()).reshape(x.shape)), dtype) for x in xs]

    def gradients(xs: list[tf.Tensor], dys: list[tf.Tensor]) -> list[tf.Tensor]:
        return [_grad(op, x, dy) for x, dy in zip(xs, dys)]

    with ste.bit_masks(True):
        lean = _run(gradients, mode)(xs, dys)
    with ste.bit_masks(False):
        plain = _run(gradients, mode)(xs, dys)
    for shape, lean_one, plain_one in zip(SIZES, lean, plain):
        assert lean_one.dtype == dtype
        np.testing.assert_array_equal(_bits(lean_one), _bits(plain_one), err_msg=f"{name} {shape}")
    return list(zip(xs, dys, lean))


def test_packing_matches_numpy_packbits_for_every_byte_and_odd_sizes() -> None:
    patterns = np.array(list(itertools.product([False, True], repeat=8)))
    np.testing.assert_array_equal(pack_bits(tf.constant(patterns)).numpy(), np.packbits(patterns, axis=None))
    rng = np.random.default_rng(3)
    for mode in MODES:
        roundtrip = _run(lambda m: (pack_bits(m), unpack_bits(pack_bits(m), tf.shape(m))), mode)
        for shape in ((0,), (1,), (9,), (3, 5), (4, 0, 2), (2, 3, 11)):
            mask = rng.random(shape) > 0.5
            packed, back = roundtrip(tf.constant(mask))
            np.testing.assert_array_equal(packed.numpy(), np.packbits(mask, axis=None))
            np.testing.assert_array_equal(back.numpy(), mask)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_mask_only_surrogates_give_bit_identical_gradients(dtype: tf.DType, mode: str) -> None:
    cases = {
        "straight_through": (ste.registry.get("straight_through"), lambda x: (np.abs(x) <= 1.0).astype(np.float64)),
        "straight_through(clip=0.5)": (
            ste.registry.get("straight_through", clip=0.5),
            lambda x: (np.abs(x) <= 0.5).astype(np.float64),
        ),
        "boxcar(width=2)": (ste.registry.get("boxcar", width=2.0), lambda x: (np.abs(x) < 1.0) / 2.0),
    }
    for name, (surrogate, formula) in cases.items():
        assert surrogate.mask_only, name
        op = ste.forward(tf.sign).backward(surrogate)
        for x, dy, lean in lean_equals_plain(op, dtype, mode, name):
            expected = np.asarray(tf.cast(dy, tf.float64)) * formula(np.asarray(tf.cast(x, tf.float64)))
            # values (XLA may turn dy·0 = −0 into +0: in the plain path alike, compared bit for bit above)
            np.testing.assert_array_equal(
                np.asarray(tf.cast(lean, tf.float64)), np.asarray(tf.cast(tf.cast(expected, dtype), tf.float64))
            )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_special_upstream_gradients_stay_bit_identical(dtype: tf.DType, mode: str) -> None:
    """dy = ±0, ±1, ±inf, NaN and tiny values, each where the mask is 1 and where it is 0: the unpacked mask multiplies
    dy exactly as the plain path's cast mask does (dy·0 is −0 for negative dy and NaN for ±inf and NaN; a select would
    give +0), for the rule unpacked straight into the dtype (straight_through), one that derives from the boolean mask
    (boxcar) and a ste.mask_rule quantizer (Uniform); 23 elements, not a multiple of 8."""
    specials = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 3.0, -2.0])
    dy = tf.cast(tf.constant(np.concatenate([specials, specials, [-5.0]])), dtype)
    x = tf.cast(tf.constant([0.5] * 11 + [3.0] * 11 + [-0.25]), dtype)  # inside the mask, then outside
    inside = np.array([True] * 11 + [False] * 11 + [True])
    ops = {
        "straight_through": ste.forward(tf.sign).backward("straight_through"),
        "boxcar(width=2)": ste.forward(tf.sign).backward("boxcar(width=2.0)"),
        "Uniform(bits=2)": ste.quantizers.Uniform(bits=2, min=-1.0, max=1.0),
    }
    for name, op in ops.items():
        with ste.bit_masks(True):
            lean = _grad_fn(op, mode)(x, dy)
        with ste.bit_masks(False):
            plain = _grad_fn(op, mode)(x, dy)
        np.testing.assert_array_equal(_bits(lean), _bits(plain), err_msg=name)
        scale = 0.5 if name.startswith("boxcar") else 1.0
        dy64 = np.asarray(tf.cast(dy, tf.float64))
        expected = np.where(inside, dy64 * scale, dy64 * 0.0)  # numpy: −0 for negative dy, NaN for inf and NaN
        got = np.asarray(tf.cast(lean, tf.float64))
        if mode == "xla":  # XLA may turn dy·mask into a select (+0, also for inf), in the plain path alike (above)
            got, expected = got[inside], expected[inside]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=name)
        number = ~np.isnan(expected)
        np.testing.assert_array_equal(got[number], expected[number], err_msg=name)
        np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(expected[number]), err_msg=name)


def test_the_forward_reads_its_input_once_the_mask_is_packed() -> None:
    """In a graph the forward function receives its input through an identity that waits for the packed mask, so
    that a chain of ops cannot run ahead of its packing and keep every input alive (docs/performance.md)."""
    waits: list[bool] = []

    def sign(x: tf.Tensor) -> tf.Tensor:
        waits.append(bool(x.op.control_inputs))
        return tf.where(x >= 0, tf.constant(1, x.dtype), tf.constant(-1, x.dtype))

    op = ste.forward(sign).backward("straight_through")
    x, dy = tf.constant([0.5, -2.0, 0.0]), tf.constant([1.0, 2.0, 3.0])
    for enabled in (True, False):
        with ste.bit_masks(enabled):
            got = _grad_fn(op, "function")(x, dy)
        np.testing.assert_array_equal(got.numpy(), [1.0, 0.0, 3.0])
    assert waits == [True, False]


def test_value_surrogates_are_not_mask_only_and_a_user_surrogate_can_declare_it() -> None:
    assert not ste.registry.get("approx_sign").mask_only
    assert not ste.registry.get("sigmoid_surrogate").mask_only

    class Window(ste.registry.Surrogate, ste.registry.MaskOnly):
        """d(x) = 3 where -1 < x <= 2, else 0 (a user's mask-only surrogate)."""

        def mask(self, x: tf.Tensor) -> tf.Tensor:
            return tf.logical_and(x > -1, x <= 2)

        def derivative_from_mask(self, mask: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
            return tf.cast(mask, dtype) * 3

        def derivative(self, x: tf.Tensor) -> tf.Tensor:
            return self.derivative_from_mask(self.mask(x), x.dtype)

    window = Window()
    assert window.mask_only
    op = ste.forward(tf.sign).backward(window)
    x = tf.constant([-2.0, -1.0, -0.5, 0.0, 2.0, 2.5, 7.0])
    dy = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    for mode in MODES:
        got = _grad_fn(op, mode)(x, dy)
        np.testing.assert_array_equal(got.numpy(), dy.numpy() * 3 * ((x.numpy() > -1) & (x.numpy() <= 2)))


def test_quantizers_keep_bits_and_match_the_plain_path() -> None:
    x = _values((4, 9), tf.float32) * 0.9
    dy = tf.reshape(tf.range(36, dtype=tf.float32) - 17.0, (4, 9))
    for quantizer in (ste.quantizers.Sign(), ste.quantizers.Heaviside(), ste.quantizers.Ternary()):
        for mode in MODES:
            with ste.bit_masks(True):
                lean = _grad_fn(quantizer, mode)(x, dy)
            with ste.bit_masks(False):
                plain = _grad_fn(quantizer, mode)(x, dy)
            np.testing.assert_array_equal(lean.numpy(), plain.numpy())
            np.testing.assert_array_equal(lean.numpy(), dy.numpy() * (np.abs(x.numpy()) <= 1))


def _layer_gradients(layer: keras.layers.Layer, x: tf.Tensor, dy: tf.Tensor, mode: str) -> list[np.ndarray]:
    def step(x: tf.Tensor, dy: tf.Tensor) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
        return [y, *tape.gradient(y, [x, *layer.trainable_variables], output_gradients=tf.cast(dy, y.dtype))]

    return [np.asarray(t) for t in _run(step, mode)(x, dy)]


@pytest.mark.parametrize("mode", MODES)
def test_binary_layers_keep_bits_with_bit_identical_gradients(mode: str) -> None:
    rng = np.random.default_rng(5)
    x = tf.constant(rng.uniform(-1.6, 1.6, (2, 7, 5, 3)).astype(np.float32))
    layers = [
        ste.layers.QuantConv2D(
            4, 3, padding="same", input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip"
        ),
        ste.layers.QuantConv2D(
            4,
            3,
            padding="same",
            pad_values=1.0,
            input_quantizer="sign",
            kernel_quantizer="sign",
            kernel_constraint="weight_clip",
        ),
        ste.layers.QuantConv2D(4, 2, strides=2, input_quantizer="heaviside", kernel_constraint="weight_clip"),
        ste.layers.QuantDense(6, input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip"),
    ]
    for layer in layers:
        layer(x)
        dy = tf.constant(rng.normal(size=layer.compute_output_shape(x.shape)).astype(np.float32))
        with ste.bit_masks(True):
            lean = _layer_gradients(layer, x, dy, mode)
        with ste.bit_masks(False):
            plain = _layer_gradients(layer, x, dy, mode)
        for a, b in zip(lean, plain):
            np.testing.assert_array_equal(a, b)
        # independent reference: autodiff of the same layer with the quantizer written as its STE by hand
        q = layer.input_quantizer
        high, low = q.binary_values[1], q.binary_values[0]
        with tf.GradientTape() as tape:
            tape.watch(x)
            xq = tf.where(x >= 0 if low < 0 else x > 0, high, low)
            xq = tf.stop_gradient(xq) + (x - tf.stop_gradient(x)) * tf.cast(tf.abs(x) <= 1, x.dtype)
            layer.input_quantizer = None
            try:
                y = layer(xq)
            finally:
                layer.input_quantizer = q
        gx = tape.gradient(y, x, output_gradients=dy)
        np.testing.assert_allclose(lean[1], gx.numpy(), rtol=1e-5, atol=1e-5)  # XLA may sum in another order


def test_binary_layer_under_mixed_precision() -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        layer = ste.layers.QuantConv2D(
            3, 3, input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip"
        )
        x = tf.constant(np.random.default_rng(2).uniform(-2, 2, (2, 6, 6, 2)).astype(np.float32))
        layer(x)
        dy = tf.ones((2, 4, 4, 3))
        for mode in ("eager", "function"):
            with ste.bit_masks(True):
                lean = _layer_gradients(layer, x, dy, mode)
            with ste.bit_masks(False):
                plain = _layer_gradients(layer, x, dy, mode)
            assert lean[0].dtype == np.float16
            for a, b in zip(lean, plain):
                np.testing.assert_array_equal(a, b)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_the_switch() -> None:
    assert ste._core._bitmask.bit_masks_enabled()
    with ste.bit_masks(False):
        assert not ste._core._bitmask.bit_masks_enabled()
    assert ste._core._bitmask.bit_masks_enabled()
    with pytest.raises(ste.errors.ParameterError):
        ste.set_bit_masks(0)  # type: ignore[arg-type]
    with pytest.raises(ste.errors.ParameterError):
        with ste.bit_masks("no"):  # type: ignore[arg-type]
            pass
    ste.set_bit_masks(False)
    try:
        assert not ste._core._bitmask.bit_masks_enabled()
    finally:
        ste.set_bit_masks(None)
    read = ste._core._bitmask._from_environment  # STE_BIT_MASKS at import
    assert [read(v) for v in ("0", "off", "1", "True", "", "auto")] == [False, False, True, True, None, None]
    for word in ("2", "maybe", "disabled", "0.5"):  # a typo must not silently mean the default
        with pytest.raises(ste.errors.ParameterError, match=f"STE_BIT_MASKS='{word}'.*expected 0"):
            read(word)


def test_replica_threads_follow_the_block_of_the_thread_that_runs_them() -> None:
    """MirroredStrategy.run traces the replica function in threads of its own: ``with ste.bit_masks(False)`` around
    it must reach them, as ``ste.set_bit_masks(False)`` does (issue 22, A3)."""
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by conftest.py")
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    rule = make_rule("straight_through", {})
    kept: list[bool] = []

    def replica(x: tf.Tensor) -> tf.Tensor:
        kept.append(isinstance(rule.saved_for_backward([x], {}), PackedMask))
        return x

    for setting, expected in ((False, False), (True, True), (None, True)):
        kept.clear()
        step = tf.function(lambda: strategy.run(replica, (tf.zeros([16]),)))
        with ste.bit_masks(setting):
            step()
        assert kept == [expected] * len(devices), setting
    ste.set_bit_masks(False)
    try:
        kept.clear()
        with ste.bit_masks(True):  # the block wins over the global setting, in the replica threads too
            tf.function(lambda: strategy.run(replica, (tf.zeros([16]),)))()
        assert kept == [True] * len(devices)
    finally:
        ste.set_bit_masks(None)


def test_binary_conv_net_trains_identically_under_mirrored_strategy() -> None:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by conftest.py")
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (8, 6, 6, 2)).astype(np.float32)
    y = rng.normal(size=(8, 3)).astype(np.float32)
    weights = []
    for on in (True, False):
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        keras.utils.set_random_seed(4)
        with ste.bit_masks(on), strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((6, 6, 2)),
                    keras.layers.Conv2D(4, 3, padding="same"),
                    ste.layers.QuantConv2D(
                        4,
                        3,
                        padding="same",
                        input_quantizer="sign",
                        kernel_quantizer="sign",
                        kernel_constraint="weight_clip",
                    ),
                    keras.layers.Flatten(),
                    ste.layers.QuantDense(
                        3, input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip"
                    ),
                ]
            )
            model.compile(keras.optimizers.SGD(0.1), "mse")
            initial = [w.numpy() for w in model.weights]
            model.fit(x, y, epochs=2, batch_size=8, verbose=0, shuffle=False)
        weights.append([w.numpy() for w in model.weights])
    assert any(np.any(a != b) for a, b in zip(weights[1], initial))  # training changed the weights
    for lean, plain in zip(*weights):
        np.testing.assert_array_equal(lean, plain)


def test_a_subclass_that_changes_the_forward_is_not_kept_as_bits() -> None:
    class HalfSign(ste.quantizers.Sign):
        """±0.5: not the binary values of Sign, so a layer must keep the float tensor."""

        forward_fn = staticmethod(lambda x: tf.where(x >= 0, 0.5, -0.5))

    assert ste.quantizers.Sign().binary_values == (-1.0, 1.0)
    assert ste.quantizers.Heaviside().binary_values == (0.0, 1.0)
    assert HalfSign().binary_values is None
    layer = ste.layers.QuantDense(2, input_quantizer=HalfSign(), kernel_constraint="weight_clip", use_bias=False)
    x = tf.constant([[0.3, -0.7, 1.5]])
    layer(x)
    with tf.GradientTape() as tape:
        y = layer(x)
    (gw,) = tape.gradient(y, layer.trainable_variables)
    np.testing.assert_array_equal(gw.numpy(), np.repeat([[0.5], [-0.5], [0.5]], 2, axis=1))


def _keeps_bits(dtype: tf.DType, mode: str, setting: bool | None) -> bool:
    """Whether a straight_through op traced in ``mode`` under ``ste.bit_masks(setting)`` keeps a packed mask."""
    rule = make_rule("straight_through", {})
    kept: list[bool] = []

    def trace(x: tf.Tensor) -> tf.Tensor:
        inner = -x  # an op's output, not the function's own input (see the next test)
        kept.append(isinstance(rule.saved_for_backward([inner], {}), PackedMask))
        return inner

    with ste.bit_masks(setting):
        _run(trace, mode)(tf.zeros([16], dtype))
    return kept[0]


def test_the_default_keeps_float_inputs_only_for_bfloat16_under_xla() -> None:
    """As set_bit_masks' docstring and docs/performance.md say: by default (None) every mask-only op keeps bits,
    except bfloat16 traced under XLA (the unpacking costs ~3× the op there); True keeps bits there too, False
    nowhere; the gradients are bit-identical whichever is kept (for bfloat16 under XLA also with specials, above)."""
    for dtype in DTYPES:
        for mode in ("function", "xla"):
            slow = dtype == tf.bfloat16 and mode == "xla"
            assert _keeps_bits(dtype, mode, None) is not slow, (dtype, mode)
            assert _keeps_bits(dtype, mode, True) and not _keeps_bits(dtype, mode, False), (dtype, mode)
    op = ste.forward(tf.sign).backward("straight_through")
    x, dy = _values((5, 7), tf.bfloat16), tf.cast(tf.linspace(-3.0, 3.0, 35), tf.bfloat16)
    dy = tf.reshape(dy, (5, 7))
    grads = {}
    for setting in (None, True, False):
        with ste.bit_masks(setting):
            grads[setting] = _bits(_grad_fn(op, "xla")(x, dy))
    np.testing.assert_array_equal(grads[None], grads[True])
    np.testing.assert_array_equal(grads[None], grads[False])
    expected = np.asarray(tf.cast(dy, tf.float64)) * (np.abs(np.asarray(tf.cast(x, tf.float64))) <= 1.0)
    np.testing.assert_array_equal(np.asarray(tf.cast(tf.bitcast(grads[None], tf.bfloat16), tf.float64)), expected)


# -- higher-order gradients (issue 22, A1) ----------------------------------------------------------------------

HIGHER_MODES = ("eager", "function", "xla", "forward in a tf.function")


def _gradient_of_gradient(loss: Any, x: tf.Tensor, mode: str, sources: Any = None) -> Any:
    """d/dx of ‖∂loss/∂(sources or x)‖², by nested tapes in ``mode``."""
    forward = tf.function(loss) if mode == "forward in a tf.function" else loss

    def outer(x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape2:
            tape2.watch(x)
            with tf.GradientTape() as tape1:
                tape1.watch(x)
                value = forward(x)
            first = tape1.gradient(value, sources() if sources else [x])
            norm = tf.add_n([tf.reduce_sum(g**2) for g in first])
        return tape2.gradient(norm, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)

    return _run(outer, "eager" if mode == "forward in a tf.function" else mode)(x)


@pytest.mark.parametrize("mode", HIGHER_MODES)
def test_second_order_through_a_mask_equals_the_plain_path_and_the_formula(mode: str) -> None:
    """A mask-only rule keeps no input dependence the plain path has (a mask has no derivative), so higher orders
    through its packed product are exact: L = Σ sign(x)·x², ∂L/∂x = x²·1[|x|≤1] + 2x·sign(x), and
    d/dx ‖∂L/∂x‖² = 2·∂L/∂x·(4x·1[|x|≤1] + 2·sign(x)) (the op's own straight-through derivative again in the
    second term), sign(0) = 0 for tf.sign."""
    op = ste.forward(tf.sign).backward("straight_through")
    x = tf.constant(np.linspace(-1.7, 1.9, 4096), tf.float32)
    results = {}
    for on in (True, False):
        with ste.bit_masks(on):
            results[on] = _gradient_of_gradient(lambda x: tf.reduce_sum(op(x) * x * x), x, mode)
    np.testing.assert_array_equal(_bits(results[True]), _bits(results[False]))
    v = x.numpy().astype(np.float64)
    inside = (np.abs(v) <= 1.0).astype(np.float64)
    first = v**2 * inside + 2 * v * np.sign(v)
    np.testing.assert_allclose(results[True].numpy(), 2 * first * (4 * v * inside + 2 * np.sign(v)), rtol=1e-5)


def _binary_layer(kind: str) -> Any:
    keras.utils.set_random_seed(3)
    options = dict(input_quantizer="ste_sign", kernel_quantizer="ste_sign", kernel_constraint="weight_clip")
    if kind == "QuantDense":
        return ste.layers.QuantDense(3, use_bias=False, **options)
    return ste.layers.QuantConv2D(3, 2, use_bias=False, **options)


def _layer_input(kind: str) -> tf.Tensor:
    shape = (6, 5) if kind == "QuantDense" else (2, 4, 4, 2)
    return tf.constant(np.random.default_rng(7).uniform(-0.9, 0.9, shape), tf.float32)  # inside the clip


def _straight_through(x: tf.Tensor) -> tf.Tensor:
    """sign(x) with the clipped straight-through gradient, from differentiable primitives (|x| < 1 here)."""
    clipped = tf.clip_by_value(x, -1.0, 1.0)
    return clipped + tf.stop_gradient(tf.where(x >= 0, 1.0, -1.0) - clipped)


@pytest.mark.parametrize("kind", ["QuantDense", "QuantConv2D"])
def test_binary_input_layers_refuse_second_order_with_bits_and_are_exact_without(kind: str) -> None:
    """The rebuilt ±1 input of a binary-input layer is a constant to the tape: with bits, d/dx ‖∂L/∂W‖² raises
    (it was 64 instead of 320); with bits off it equals autodiff of the same layer written with
    differentiable primitives."""
    layer, x = _binary_layer(kind), _layer_input(kind)
    layer.build(x.shape)
    layer.kernel.assign(np.random.default_rng(8).uniform(-0.9, 0.9, layer.kernel.shape))

    def loss(x: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(layer(x) ** 2)

    for mode in HIGHER_MODES:
        with ste.bit_masks(True), pytest.raises(ste.errors.HigherOrderError, match="ste.bit_masks\\(False\\)"):
            _gradient_of_gradient(loss, x, mode, lambda: [layer.kernel])
    with ste.bit_masks(False):
        plain = _gradient_of_gradient(loss, x, "function", lambda: [layer.kernel])

    kernel = tf.Variable(layer.kernel.numpy())

    def reference(x: tf.Tensor) -> tf.Tensor:
        xq, wq = _straight_through(x), _straight_through(kernel)
        y = tf.matmul(xq, wq) if kind == "QuantDense" else tf.nn.conv2d(xq, wq, 1, "VALID")
        return tf.reduce_sum(y**2)

    expected = _gradient_of_gradient(reference, x, "eager", lambda: [kernel])
    assert float(tf.reduce_max(tf.abs(expected))) > 0  # the path the bits would miss carries a gradient
    np.testing.assert_allclose(plain.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_mask_rules_with_kept_tensors_refuse_second_order_with_bits() -> None:
    """MagnitudeAwareSign's rule keeps α = mean|x| from the stopped input when packed: a gradient through its
    gradient would miss dα/dx, so it raises; with bits off it is the same in eager and tf.function, and first-order
    gradients with bits stay those of the plain path."""
    quantizer = ste.quantizers.MagnitudeAwareSign()
    x = tf.constant(np.random.default_rng(9).uniform(-1.5, 1.5, (16, 8)), tf.float32)

    def loss(x: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(quantizer(x) * x)

    for mode in HIGHER_MODES:
        with ste.bit_masks(True), pytest.raises(ste.errors.HigherOrderError, match="predicate mask_and_scale keeps"):
            _gradient_of_gradient(loss, x, mode)
    with ste.bit_masks(False):
        eager, function = (_gradient_of_gradient(loss, x, mode) for mode in ("eager", "function"))
    assert float(tf.reduce_max(tf.abs(eager))) > 0
    np.testing.assert_allclose(eager.numpy(), function.numpy(), rtol=1e-6, atol=1e-6)
    first = {}
    for on in (True, False):
        with ste.bit_masks(on):
            first[on] = _grad_fn(quantizer, "function")(x, tf.ones_like(x))
    np.testing.assert_array_equal(_bits(first[True]), _bits(first[False]))


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_the_default_keeps_float_inputs_for_the_functions_own_inputs(mode: str) -> None:
    """In a graph an input of the traced function is held by its caller for the whole call: bits would save nothing
    and cost time (1.35× a hand-written op in tf.function, 2.5× under XLA), so by default such an op keeps its input
    (also through identities); ``ste.bit_masks(True)`` packs it anyway. Eagerly there is no caller to hold it: bits
    from 65,536 elements. Gradients are bit-identical either way."""
    rule = make_rule("straight_through", {})
    kept: dict[Any, list[bool]] = {}

    def trace(x: tf.Tensor) -> tf.Tensor:
        for name, t in (("input", x), ("identity", tf.identity(x)), ("computed", x * 2.0)):
            kept.setdefault((name, setting), []).append(isinstance(rule.saved_for_backward([t], {}), PackedMask))
        return x

    for setting in (None, True):
        with ste.bit_masks(setting):
            _run(trace, mode)(tf.zeros([16]))
    assert kept == {
        ("input", None): [False],
        ("identity", None): [False],
        ("computed", None): [True],
        ("input", True): [True],
        ("identity", True): [True],
        ("computed", True): [True],
    }
    op = ste.forward(tf.sign).backward("straight_through")
    x, dy = _values((5, 7), tf.float32), tf.reshape(tf.linspace(-3.0, 3.0, 35), (5, 7))
    grads = {}
    for setting in (None, True):
        with ste.bit_masks(setting):
            grads[setting] = _bits(_grad_fn(op, mode)(x, dy))
    np.testing.assert_array_equal(grads[None], grads[True])


def test_a_kept_function_input_is_read_by_the_backward_pass_only_after_the_upstream_gradient() -> None:
    """Where the default keeps the function's own input (its caller holds it), the backward pass reads it through an
    identity that waits for the upstream gradient: otherwise TensorFlow's executor computes the mask from forward
    tensors during the forward pass and keeps it (a float tensor per op). With bit masks off it reads it directly,
    as ste 0.1 did."""
    op = ste.forward(tf.sign).backward("straight_through")

    def waits(setting: bool | None) -> list[str]:
        def step(x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = op(x)
            return tape.gradient(y, x, output_gradients=dy)

        with ste.bit_masks(setting):
            graph = tf.function(step).get_concrete_function(tf.TensorSpec([64]), tf.TensorSpec([64])).graph
        x_op, dy_op = graph.inputs[0].op, graph.inputs[1].op

        def source(o: Any) -> Any:
            while o.type == "Identity" and o.inputs:
                o = o.inputs[0].op
            return o

        return [
            o.name
            for o in graph.get_operations()
            if o.type == "Identity"
            and o.inputs
            and o.inputs[0].op is x_op
            and any(source(c) is dy_op for c in o.control_inputs)
        ]

    assert len(waits(None)) == 1
    assert waits(False) == []


@pytest.mark.parametrize("quantizer", ["sign", "heaviside"])
def test_a_binary_layer_packs_the_condition_that_computed_its_input(quantizer: str) -> None:
    """The input quantizer's select computed ``where(c, high, low)``: the layer packs ``c`` itself instead of
    comparing the floats with ``high`` again (no ``Equal`` in the traced step), with the gradients of the plain
    path bit for bit; a tensor that is not such a select (here an input that is already binary) is compared."""
    layer = ste.layers.QuantConv2D(3, 2, use_bias=False, input_quantizer=quantizer, kernel_quantizer="sign")
    x = tf.constant(np.random.default_rng(5).uniform(-1.5, 1.5, (2, 5, 5, 2)), tf.float32)
    layer(x)

    def step(x: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * tf.range(1.0, 4.0))
        return tape.gradient(loss, [x, layer.kernel])

    types = {}
    grads = {}
    for on in (True, False):
        with ste.bit_masks(on):
            function = tf.function(step)
            types[on] = [op.type for op in function.get_concrete_function(x).graph.get_operations()]
            grads[on] = function(x)
    assert "Equal" not in types[True] and "GatherV2" in types[True]  # packed, from the select's condition
    for packed, plain in zip(grads[True], grads[False]):
        np.testing.assert_array_equal(_bits(packed), _bits(plain))
    from ste.layers._binary_condition import is_high as _is_high

    graph = tf.Graph()
    with graph.as_default():
        already = tf.compat.v1.placeholder(tf.float32, [4])
        assert _is_high(already, -1.0, 1.0).op.type == "Equal"
        selected = tf.where(already > 0, tf.constant(1.0), tf.constant(-1.0))
        assert _is_high(selected, -1.0, 1.0).op.type == "Greater"
        assert _is_high(selected, 1.0, -1.0).op.type == "Equal"  # other constants: compared
        cast = tf.cast(already > 0, tf.float32)
        assert _is_high(cast, 0.0, 1.0).op.type == "Greater"
        assert _is_high(cast, -1.0, 1.0).op.type == "Equal"


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_the_default_keeps_small_computed_tensors_as_floats(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """By default a tensor computed in a graph keeps bits from ``MIN_ELEMENTS`` elements (65,536: a float32 mask of
    256 KiB); a smaller one keeps its float input, and one whose size is unknown while tracing keeps bits.
    ``ste.bit_masks(True)`` packs every size. The gradients are bit-identical either way (against the formula)."""
    monkeypatch.setattr(ste._core._bitmask, "MIN_ELEMENTS", 65536)  # the library's value (the fixture sets 0)
    rule = make_rule("straight_through", {})
    kept: dict[Any, bool] = {}

    def tracer(size: int, setting: bool | None) -> Any:
        def trace(x: tf.Tensor) -> tf.Tensor:
            kept[(size, setting)] = isinstance(rule.saved_for_backward([x * 2.0], {}), PackedMask)
            return x

        return trace

    for size in (65535, 65536):
        for setting in (None, True):
            with ste.bit_masks(setting):
                _run(tracer(size, setting), mode)(tf.zeros([size]))
    assert kept == {(65535, None): False, (65535, True): True, (65536, None): True, (65536, True): True}
    unknown = tf.function(tracer(-1, None), input_signature=[tf.TensorSpec([None])], jit_compile=mode == "xla")
    unknown.get_concrete_function()
    assert kept[(-1, None)] is True

    op = ste.forward(tf.sign).backward("straight_through")
    x = tf.linspace(-3.0, 3.0, 4096)
    dy = tf.cos(tf.range(4096, dtype=tf.float32))

    def grad(x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x * 1.0)
        return tape.gradient(y, x, output_gradients=dy)

    grads = {}
    for setting in (None, True, False):
        with ste.bit_masks(setting):
            grads[setting] = _bits(_run(grad, mode)(x, dy))
    np.testing.assert_array_equal(grads[None], grads[True])
    np.testing.assert_array_equal(grads[None], grads[False])
    np.testing.assert_array_equal(
        np.asarray(tf.bitcast(grads[None], tf.float32)), np.asarray(dy) * (np.abs(np.asarray(x)) <= 1.0)
    )
