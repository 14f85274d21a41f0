"""Keras's own lookups find ste's names (issue 10 item 3): ``keras.activations.get("ste_sign")``,
``Dense(activation=...)``, ``keras.layers.Activation(...)`` for every weightless quantizer name (larq's aliases
included), ``keras.constraints.get("weight_clip")`` and every constraint argument of every ste layer; models using
them save and load with ``safe_mode=True``; Keras's built-in names keep their Keras meaning.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

RNG = np.random.default_rng(7)
X = np.concatenate([RNG.normal(size=(6, 4)), np.zeros((1, 4)), np.full((1, 4), 1.5)]).astype("float32")


def _weightless(name: str) -> bool:
    """Whether the quantizer keeps no weights once built (a stateful one is a layer, not an activation function)."""
    quantizer = ste.quantizers.get(name)
    assert isinstance(quantizer, ste.quantizers.Quantizer)
    quantizer.build((8, 4))
    return not quantizer.weights


ACTIVATION_NAMES = [name for name in ste.quantizers.names() if _weightless(name)]
STATEFUL_NAMES = [name for name in ste.quantizers.names() if name not in ACTIVATION_NAMES]


def _values_and_gradients(fn: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
    upstream = tf.constant(np.random.default_rng(3).normal(size=y.shape).astype("float32"))  # the same each call
    return np.asarray(y), np.asarray(tape.gradient(y, xt, output_gradients=upstream))


def test_larq_names_are_activations() -> None:
    assert {"ste_sign", "approx_sign", "swish_sign", "ste_heaviside", "ste_tern", "magnitude_aware_sign"} <= set(
        ACTIVATION_NAMES
    )
    assert {"lsq", "pact"} <= set(STATEFUL_NAMES)


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_keras_activation_lookup_applies_the_quantizer(name: str) -> None:
    activation = keras.activations.get(name)
    got = _values_and_gradients(activation, X)
    want = _values_and_gradients(ste.quantizers.get(name), X)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_dense_and_activation_layer_by_name_save_and_load_in_safe_mode(name: str, tmp_path: Any) -> None:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation=name), keras.layers.Activation(name)])
    before = _values_and_gradients(model, X)
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    after = _values_and_gradients(loaded, X)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    clone = keras.models.model_from_json(model.to_json())
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(np.asarray(clone(X)), before[0])


@pytest.mark.parametrize("name", STATEFUL_NAMES)
def test_a_quantizer_with_weights_is_not_an_activation_function(name: str) -> None:
    with pytest.raises(ValueError, match="Could not interpret"):
        keras.activations.get(name)


def _keras_functions(module: Any) -> dict[str, Any]:
    skip = {"get", "serialize", "deserialize"}
    return {n: f for n, f in vars(module).items() if inspect.isfunction(f) and not n.startswith("_") and n not in skip}


def test_keras_builtin_names_keep_their_meaning() -> None:
    builtins = _keras_functions(keras.activations)
    assert {"relu", "sigmoid", "softsign", "hard_tanh"} <= set(builtins)
    for name, fn in builtins.items():
        assert keras.activations.get(name) is fn, name
    for cls_name in ("MaxNorm", "NonNeg", "UnitNorm", "MinMaxNorm"):
        assert type(keras.constraints.get(cls_name)) is getattr(keras.constraints, cls_name)


class _Halve(ste.quantizers.Quantizer):
    def call(self, inputs: Any) -> tf.Tensor:
        return tf.convert_to_tensor(inputs) / 2


class _Negate(keras.constraints.Constraint):  # type: ignore[misc]
    def __call__(self, w: Any) -> Any:
        return -w


class _Scaled(ste.quantizers.Quantizer):
    """A user's quantizer with a trainable scale, declared."""

    has_weights = True

    def build(self, input_shape: Any) -> None:
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones")

    def call(self, inputs: Any) -> tf.Tensor:
        return tf.convert_to_tensor(inputs) * tf.cast(self.scale, inputs.dtype)


class _Undeclared(_Scaled):
    """The same quantizer without the declaration."""

    has_weights = False


class _HalveBuilt(_Halve):
    """A quantizer with a build of its own that adds no weights: an activation function like any other."""

    def build(self, input_shape: Any) -> None:
        self.half = 0.5

    def call(self, inputs: Any) -> tf.Tensor:
        return tf.convert_to_tensor(inputs) * self.half


def test_the_weights_declaration_decides_whether_a_quantizer_is_an_activation() -> None:
    ste.quantizers.register("scaled_test")(_Scaled)
    ste.quantizers.register("halve_built_test")(_HalveBuilt)
    try:
        with pytest.raises(ValueError, match="Could not interpret"):
            keras.activations.get("scaled_test")
        np.testing.assert_array_equal(np.asarray(keras.activations.get("halve_built_test")(tf.constant([3.0]))), [1.5])
    finally:
        ste.quantizers.unregister("scaled_test")
        ste.quantizers.unregister("halve_built_test")


def test_an_activation_that_creates_weights_without_declaring_them_is_refused() -> None:
    ste.quantizers.register("undeclared_test")(_Undeclared)
    try:
        activation = keras.activations.get("undeclared_test")
        with pytest.raises(ste.errors.RegistrationError, match=r"created weights.*Fix: declare has_weights = True"):
            activation(tf.constant([3.0]))
    finally:
        ste.quantizers.unregister("undeclared_test")


def test_registering_a_keras_name_leaves_keras_meaning_and_unregister_cleans_up() -> None:
    relu, non_neg = keras.activations.get("relu"), type(keras.constraints.get("non_neg"))
    ste.quantizers.register("relu")(_Halve)
    ste.constraints.register("non_neg")(_Negate)
    try:
        assert keras.activations.get("relu") is relu and type(keras.constraints.get("non_neg")) is non_neg
        assert isinstance(ste.quantizers.get("relu"), _Halve)  # ste's own lookup finds the ste entry
    finally:
        ste.quantizers.unregister("relu")
        ste.constraints.unregister("non_neg")
    assert keras.activations.get("relu") is relu and type(keras.constraints.get("non_neg")) is non_neg


def test_user_registered_names_are_found_by_keras_until_unregistered() -> None:
    ste.quantizers.register("halve_test")(_Halve)
    ste.constraints.register("negate_test")(_Negate)
    try:
        np.testing.assert_allclose(np.asarray(keras.activations.get("halve_test")(tf.constant([3.0]))), [1.5])
        np.testing.assert_allclose(np.asarray(keras.constraints.get("negate_test")(tf.constant([3.0]))), [-3.0])
    finally:
        ste.quantizers.unregister("halve_test")
        ste.constraints.unregister("negate_test")
    with pytest.raises(ValueError):
        keras.activations.get("halve_test")
    with pytest.raises(ValueError):
        keras.constraints.get("negate_test")


def test_classes_registered_by_ste_name_only_load_again_in_safe_mode(tmp_path: Any) -> None:
    """A quantizer or constraint registered with ste's register only (no Keras decorator) saves and loads."""
    ste.quantizers.register("halve_saved")(_Halve)
    ste.constraints.register("negate_saved")(_Negate)
    try:
        layer = ste.layers.QuantDense(
            3, input_quantizer=_Halve(), kernel_quantizer="halve_saved", kernel_constraint="negate_saved"
        )
        model = keras.Sequential([keras.Input((4,)), layer])
        path = os.path.join(tmp_path, "m.keras")
        model.save(path)
        loaded = keras.models.load_model(path, safe_mode=True)
    finally:
        ste.quantizers.unregister("halve_saved")
        ste.constraints.unregister("negate_saved")
    kernel, bias = loaded.get_weights()
    np.testing.assert_allclose(np.asarray(loaded(X)), (X / 2) @ (kernel / 2) + bias, rtol=1e-6, atol=1e-6)
    assert isinstance(loaded.layers[0].kernel_constraint, _Negate)


def test_keras_constraint_lookup_finds_weight_clip() -> None:
    constraint = keras.constraints.get("weight_clip")
    assert isinstance(constraint, ste.constraints.WeightClip) and constraint.clip_value == 1.0
    w = tf.constant(np.linspace(-3.0, 3.0, 13), tf.float32)
    np.testing.assert_array_equal(np.asarray(constraint(w)), np.clip(w.numpy(), -1.0, 1.0))


LAYERS: dict[str, tuple[tuple[Any, ...], tuple[int, ...]]] = {
    "QuantDense": ((3,), (2, 5)),
    "QuantConv1D": ((2, 3), (2, 8, 3)),
    "QuantConv2D": ((2, 3), (2, 6, 6, 3)),
    "QuantDepthwiseConv2D": ((3,), (2, 6, 6, 3)),
    "QuantSeparableConv2D": ((2, 3), (2, 6, 6, 3)),
    "QuantConv1DTranspose": ((2, 3), (2, 8, 3)),
    "QuantConv2DTranspose": ((2, 3), (2, 6, 6, 3)),
    "QuantConv3D": ((2, 3), (2, 6, 6, 6, 3)),
    "QuantConv3DTranspose": ((2, 3), (2, 4, 4, 4, 3)),
    "QuantSeparableConv1D": ((2, 3), (2, 8, 3)),
}


def _constraint_arguments(cls: type) -> list[str]:
    parent = next(k for k in cls.__mro__ if k.__module__.startswith("keras."))
    return [p for p in inspect.signature(vars(parent)["__init__"]).parameters if p.endswith("_constraint")]


def _layer_cases() -> list[tuple[str, str]]:
    names = [
        n
        for n in ste.layers.__all__
        if isinstance(getattr(ste.layers, n), type)
        and issubclass(getattr(ste.layers, n), keras.layers.Layer)
        and issubclass(getattr(ste.layers, n), ste.layers.QuantLayerMixin)
        and n.startswith("Quant")
    ]
    missing = sorted(set(names) - set(LAYERS))
    assert not missing, f"add build arguments for {missing} to LAYERS"
    return [(n, arg) for n in names for arg in _constraint_arguments(getattr(ste.layers, n))]


@pytest.mark.parametrize(("spec", "clip"), [("weight_clip", 1.0), ("weight_clip(clip_value=0.5)", 0.5)])
@pytest.mark.parametrize(("layer", "argument"), _layer_cases())
def test_every_constraint_argument_of_every_ste_layer_takes_weight_clip(
    layer: str, argument: str, spec: str, clip: float
) -> None:
    args, shape = LAYERS[layer]
    made = getattr(ste.layers, layer)(*args, **{argument: spec})
    made(np.zeros(shape, "float32"))
    constraint = getattr(made, argument)
    w = np.linspace(-2.0, 2.0, 9).astype("float32")
    assert isinstance(constraint, ste.constraints.WeightClip)
    np.testing.assert_array_equal(np.asarray(constraint(w)), np.clip(w, -clip, clip))
    config = made.get_config()
    rebuilt = type(made).from_config(config)
    np.testing.assert_array_equal(np.asarray(getattr(rebuilt, argument)(w)), np.clip(w, -clip, clip))


def test_constraints_by_name_apply_after_save_and_load(tmp_path: Any) -> None:
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, kernel_constraint="weight_clip", bias_constraint="weight_clip")]
    )
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    loaded.compile(optimizer=keras.optimizers.SGD(learning_rate=100.0), loss="mse")
    loaded.fit(X, np.full((len(X), 3), 50.0, "float32"), epochs=1, batch_size=len(X), verbose=0)
    kernel, bias = loaded.get_weights()
    assert np.max(np.abs(kernel)) == 1.0 and np.max(np.abs(bias)) == 1.0  # pushed far out, clipped back to 1
