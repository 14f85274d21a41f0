"""``ste.layers.BatchNormalization``: Keras's batch norm on TensorFlow's fused kernel, checked against a numpy formula
(outputs in training and inference, moving statistics after a step), against autodiff of Keras's own layer
(gradients), in the four float dtypes (float64 takes Keras's path), eagerly, in ``tf.function``, under XLA, under
``MirroredStrategy``, and through a ``.keras`` round trip."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

# layer dtype policy -> (input dtype, output tolerance); the mixed policies keep float32 variables
POLICIES = {
    "mixed_float16": (np.float16, 1e-2),
    "mixed_bfloat16": (np.float32, 4e-2),  # Keras casts the input to bfloat16 (the layer's compute dtype)
    "float32": (np.float32, 1e-5),
    "float64": (np.float64, 1e-12),
}
MODES = ("eager", "function", "xla")
EPSILON, MOMENTUM = 1e-3, 0.9


def _run(fn: Any, mode: str) -> Any:
    return fn if mode == "eager" else tf.function(fn, jit_compile=mode == "xla", reduce_retracing=True)


def _layers(policy: str, axis: int = -1, **kwargs: Any) -> tuple[keras.layers.Layer, keras.layers.Layer]:
    """An ste layer and a Keras layer with the same random weights and moving statistics."""
    made = []
    for cls in (ste.layers.BatchNormalization, keras.layers.BatchNormalization):
        layer = cls(axis=axis, momentum=MOMENTUM, epsilon=EPSILON, dtype=policy, **kwargs)
        layer.build((4, 3, 5, 6) if axis == -1 else (4, 6, 3, 5))
        made.append(layer)
    rng = np.random.default_rng(3)
    for weight in made[1].weights:
        value = rng.uniform(0.5, 2.0, weight.shape) if "variance" in weight.path else rng.normal(size=weight.shape)
        weight.assign(value.astype(weight.dtype))
    made[0].set_weights(made[1].get_weights())
    return made[0], made[1]


def _inputs(dtype: Any, axis: int = -1) -> np.ndarray:
    rng = np.random.default_rng(7)
    shape = (4, 3, 5, 6) if axis == -1 else (4, 6, 3, 5)
    return (rng.normal(size=shape) * 3.0 + 1.5).astype(dtype)


def _reference(x: np.ndarray, layer: keras.layers.Layer, axis: int, training: bool) -> tuple[np.ndarray, ...]:
    """Batch norm in float64 numpy: the output, then the moving mean and variance after the step."""
    x = x.astype(np.float64)
    gamma, beta, moving_mean, moving_variance = (np.asarray(w, np.float64) for w in layer.get_weights())
    axes = tuple(i for i in range(4) if i != axis % 4)
    shape = [1, 1, 1, 1]
    shape[axis % 4] = -1
    if training:
        mean, variance = x.mean(axis=axes), x.var(axis=axes)  # biased, as Keras normalizes
    else:
        mean, variance = moving_mean, moving_variance
    out = (x - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + EPSILON) * gamma.reshape(shape)
    out = out + beta.reshape(shape)
    if not training:
        return out, moving_mean, moving_variance
    return out, moving_mean * MOMENTUM + mean * (1 - MOMENTUM), moving_variance * MOMENTUM + variance * (1 - MOMENTUM)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("policy", POLICIES)
def test_training_step_matches_numpy_and_keras_gradients(policy: str, mode: str) -> None:
    dtype, tol = POLICIES[policy]
    layer, keras_layer = _layers(policy)
    x = _inputs(dtype)
    expected, moving_mean, moving_variance = _reference(x, layer, -1, training=True)
    dy = tf.constant(np.random.default_rng(2).normal(size=x.shape).astype(np.float32))

    def step(lay: keras.layers.Layer, x: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = lay(x, training=True)
        return [y, *tape.gradient(y, [x, lay.gamma, lay.beta], output_gradients=tf.cast(dy, y.dtype))]

    got = _run(step, mode)(layer, tf.constant(x))
    want = _run(step, mode)(keras_layer, tf.constant(x))
    np.testing.assert_allclose(np.asarray(got[0], np.float64), expected, rtol=tol, atol=tol)
    assert got[0].dtype == want[0].dtype
    np.testing.assert_allclose(layer.moving_mean.numpy(), moving_mean, rtol=max(tol, 1e-6), atol=max(tol, 1e-6))
    np.testing.assert_allclose(layer.moving_variance.numpy(), moving_variance, rtol=max(tol, 1e-5), atol=tol)
    for a, b in zip(got[1:], want[1:]):  # gradients against autodiff of Keras's own layer
        scale = np.abs(np.asarray(b, np.float64)).max()
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=4 * tol * scale)


@pytest.mark.parametrize("policy", POLICIES)
def test_inference_and_a_frozen_layer_are_keras_own_path(policy: str) -> None:
    dtype, tol = POLICIES[policy]
    layer, keras_layer = _layers(policy)
    x = _inputs(dtype)
    expected, _, _ = _reference(x, layer, -1, training=False)
    np.testing.assert_allclose(np.asarray(layer(x, training=False), np.float64), expected, rtol=tol, atol=tol)
    np.testing.assert_array_equal(layer(x, training=False), keras_layer(x, training=False))
    layer.trainable = keras_layer.trainable = False  # a frozen layer normalizes with its moving statistics
    np.testing.assert_array_equal(layer(x, training=True), keras_layer(x, training=True))
    np.testing.assert_array_equal(layer.moving_mean.numpy(), keras_layer.moving_mean.numpy())


def test_channels_first_and_the_fallbacks() -> None:
    layer, _ = _layers("float32", axis=1)
    x = _inputs(np.float32, axis=1)
    expected, moving_mean, _ = _reference(x, layer, 1, training=True)
    np.testing.assert_allclose(layer(x, training=True), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.moving_mean.numpy(), moving_mean, rtol=1e-6, atol=1e-6)
    # 3-D inputs, masks, renorm (Keras 3.14 and later have it): Keras's code, so the same output as Keras's layer
    rng = np.random.default_rng(0)
    x3 = rng.normal(size=(4, 5, 6)).astype(np.float32)
    mask = rng.uniform(size=(4, 5)) > 0.3
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [({}, {}), ({}, {"mask": mask})]
    if "renorm" in inspect.signature(keras.layers.BatchNormalization).parameters:
        cases.append(({"renorm": True}, {}))
    for kwargs, call in cases:
        ours, theirs = ste.layers.BatchNormalization(**kwargs), keras.layers.BatchNormalization(**kwargs)
        np.testing.assert_array_equal(ours(x3, training=True, **call), theirs(x3, training=True, **call))


def test_the_fused_kernel_is_used_where_it_applies() -> None:
    def op_types(layer: keras.layers.Layer, x: np.ndarray, jit_compile: bool = False) -> set[str]:
        function = tf.function(lambda x: layer(x, training=True), jit_compile=jit_compile)
        graph = function.get_concrete_function(tf.constant(x)).graph
        return {op.type for op in graph.get_operations()}

    assert "FusedBatchNormV3" in op_types(_layers("float32")[0], _inputs(np.float32))
    assert "FusedBatchNormV3" in op_types(_layers("mixed_float16")[0], _inputs(np.float16))
    assert "FusedBatchNormV3" not in op_types(_layers("float64")[0], _inputs(np.float64))
    assert "FusedBatchNormV3" not in op_types(_layers("float32")[0], _inputs(np.float32), jit_compile=True)


def test_mirrored_strategy_trains_like_keras_batch_norm() -> None:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by conftest.py")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 4, 4, 2)).astype(np.float32)
    y = rng.normal(size=(8, 3)).astype(np.float32)
    weights = []
    for norm in (ste.layers.BatchNormalization, keras.layers.BatchNormalization):
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        keras.utils.set_random_seed(4)
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((4, 4, 2)),
                    keras.layers.Conv2D(4, 3, padding="same"),
                    norm(),
                    keras.layers.Flatten(),
                    keras.layers.Dense(3),
                ]
            )
            model.compile(keras.optimizers.SGD(0.1), "mse")
            model.fit(x, y, epochs=2, batch_size=8, verbose=0, shuffle=False)
        weights.append([w.numpy() for w in model.weights])
    for ours, theirs in zip(*weights):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_keras_file_round_trip(tmp_path: Any) -> None:
    inputs = keras.Input((3, 5, 6))
    model = keras.Model(inputs, ste.layers.BatchNormalization(momentum=0.8, epsilon=1e-4, name="bn")(inputs))
    model.compile(keras.optimizers.SGD(0.1), "mse")
    x = _inputs(np.float32)
    model.fit(x, x * 2.0, epochs=1, batch_size=4, verbose=0)
    path = str(tmp_path / "bn.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    layer = loaded.get_layer("bn")
    assert type(layer) is ste.layers.BatchNormalization
    assert layer.get_config() == model.get_layer("bn").get_config()
    for a, b in zip(layer.get_weights(), model.get_layer("bn").get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded(x, training=False), model(x, training=False))
    np.testing.assert_array_equal(loaded(x, training=True), model(x, training=True))


def _hints(norm: Any, shape: tuple[int, ...], layer: Any, train: bool = True) -> list[str]:
    """The fused-batch-norm hints given while a model ``layer -> norm()`` is trained one step (or only predicts)."""
    model = keras.Sequential([keras.Input(shape), layer, norm()])
    x = np.zeros((2, *shape), "float32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if train:
            model.compile("sgd", "mse")
            model.fit(x, np.zeros((2, *model.output_shape[1:]), "float32"), verbose=0)
        else:
            model.predict(x, verbose=0)
    return [str(w.message) for w in caught if "ste.layers.BatchNormalization" in str(w.message)]


def _binary_conv() -> Any:
    return ste.layers.QuantConv2D(
        4, 3, input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip"
    )


def test_keras_batch_norm_after_a_quantized_layer_hints_at_the_fused_one() -> None:
    hints = _hints(keras.layers.BatchNormalization, (8, 8, 3), _binary_conv())
    assert len(hints) == 1 and "fused kernel" in hints[0]
    # no hint where ste's layer is used, where nothing is trained, or where the fused kernel would not apply (2-D)
    assert _hints(ste.layers.BatchNormalization, (8, 8, 3), _binary_conv()) == []
    assert _hints(keras.layers.BatchNormalization, (8, 8, 3), _binary_conv(), train=False) == []
    dense = ste.layers.QuantDense(4, kernel_quantizer="sign", kernel_constraint="weight_clip")
    assert _hints(keras.layers.BatchNormalization, (6,), dense) == []
    assert _hints(keras.layers.BatchNormalization, (8, 8, 3), keras.layers.Conv2D(4, 3)) == []  # not quantized


def test_the_hint_is_given_once_per_model_whatever_the_warning_filter() -> None:
    def blocks(norm: Any) -> keras.Model:
        inputs = keras.Input((8, 8, 4))
        h = inputs
        for _ in range(3):
            conv = ste.layers.QuantConv2D(
                4, 3, padding="same", input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip"
            )
            h = keras.layers.Add()([h, norm()(conv(h))])
        model = keras.Model(inputs, h)
        model.compile("sgd", "mse")
        return model

    x = np.random.default_rng(0).normal(size=(6, 8, 8, 4)).astype("float32")
    for run_eagerly in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = blocks(keras.layers.BatchNormalization)
            model.run_eagerly = run_eagerly
            model.fit(x, x, epochs=2, batch_size=4, verbose=0)  # two traces (batches of 4 and 2), two epochs
            model.fit(x, x, epochs=1, batch_size=4, verbose=0)
            fused = blocks(ste.layers.BatchNormalization)
            fused.run_eagerly = run_eagerly
            fused.fit(x, x, epochs=1, batch_size=4, verbose=0)
        hints = [str(w.message) for w in caught if "ste.layers.BatchNormalization" in str(w.message)]
        assert len(hints) <= 1  # eagerly, the process's graph may have had its hint already
        assert hints or run_eagerly
        assert all("use ste.layers.BatchNormalization" in hint for hint in hints)
