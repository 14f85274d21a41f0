"""Ops save and load through Keras (.keras, to_json, clone_model), fail at save time when they cannot, copy and pickle.

References are numpy formulas (forward values, derivatives) and TensorFlow autodiff of linear layers; loaded models
are never compared only with the model that was saved.
"""

from __future__ import annotations

import copy
import json
import operator
import os
import pickle
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.helpers import run_python


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no exp overflow


# -- functions with importable names -----------------------------------------------------------------------------


def hard_step(x):
    return tf.cast(x > 0, x.dtype)


def clipped_identity_rule(dy, x, *, limit):
    return dy * tf.cast(tf.abs(x) <= limit, dy.dtype)


def softsign_like(x):
    return x / (1.0 + tf.abs(x))


@keras.saving.register_keras_serializable(package="ste_tests")
def cube(x):
    return x * x * x


# op, numpy forward, numpy derivative used by the backward pass
OPS = {
    "tf_function_registry_name": (
        ste.forward(tf.sigmoid).backward("identity"),
        _sigmoid,
        lambda x: np.ones_like(x),
    ),
    "tf_nn_backward_like_tf": (
        ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid),
        lambda x: np.maximum(x, 0.0),
        lambda x: _sigmoid(x) * (1.0 - _sigmoid(x)),
    ),
    "module_function_spec_string": (
        ste.forward(hard_step).backward("sigmoid_surrogate(beta=4.0)"),
        lambda x: (x > 0).astype(x.dtype),
        lambda x: 4.0 * _sigmoid(4.0 * x) * (1.0 - _sigmoid(4.0 * x)),
    ),
    "registered_function_function_rule_with_params": (
        ste.forward(cube).backward(clipped_identity_rule, limit=0.5),
        lambda x: x**3,
        lambda x: (np.abs(x) <= 0.5).astype(x.dtype),
    ),
    "surrogate_instance": (
        ste.forward(hard_step).backward(ste.registry.get("sigmoid_surrogate", beta=2.0)),
        lambda x: (x > 0).astype(x.dtype),
        lambda x: 2.0 * _sigmoid(2.0 * x) * (1.0 - _sigmoid(2.0 * x)),
    ),
    "keras_function_backward_like_module_function": (
        ste.forward(keras.activations.relu).backward_like(softsign_like),
        lambda x: np.maximum(x, 0.0),
        lambda x: 1.0 / (1.0 + np.abs(x)) ** 2,
    ),
}

X = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
UPSTREAM = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)


def _output_and_input_gradient(model, x, upstream):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = model(xt)
    return y.numpy(), tape.gradient(y, xt, output_gradients=tf.constant(upstream)).numpy()


def _check_dense(model, f, d):
    """The model is Dense(4, activation=op): compare with numpy on its (loaded) weights."""
    kernel, bias = (w.numpy() for w in model.layers[-1].weights)
    h = X @ kernel + bias
    y, grad = _output_and_input_gradient(model, X, UPSTREAM)
    np.testing.assert_allclose(y, f(h), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, (UPSTREAM * d(h)) @ kernel.T, rtol=1e-4, atol=1e-5)


def _dense_model(op):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation=op)])


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_in_dense_round_trips_through_keras_file_with_safe_mode(name, tmp_path):
    op, f, d = OPS[name]
    model = _dense_model(op)
    _check_dense(model, f, d)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)  # safe_mode=True, no custom_objects
    assert isinstance(loaded.layers[-1].activation, ste.STEFunction)
    _check_dense(loaded, f, d)


_FRESH_X = np.linspace(-3.0, 3.0, 8, dtype=np.float32).reshape(2, 4)


def test_keras_file_loads_in_a_fresh_process_after_import_ste(tmp_path):
    """Nothing of this process (registrations, caches) helps: a new interpreter imports ste and loads the file."""
    op = ste.forward(keras.activations.relu).backward("sigmoid_surrogate(beta=2.0)")
    inputs = keras.Input((4,))
    keras.Model(inputs, keras.layers.Activation(op)(inputs)).save(tmp_path / "fresh.keras")
    script = (
        "import numpy as np, keras, tensorflow as tf, ste\n"
        "m = keras.models.load_model('fresh.keras')\n"
        f"x = tf.constant(np.array({_FRESH_X.tolist()!r}, dtype=np.float32))\n"
        "with tf.GradientTape() as tape:\n"
        "    tape.watch(x)\n"
        "    y = m(x)\n"
        "np.save('y.npy', y.numpy())\n"
        "np.save('g.npy', tape.gradient(y, x).numpy())\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = run_python(["-c", script], tmp_path, env=env, timeout=300)
    x = _FRESH_X
    np.testing.assert_allclose(np.load(done.directory / "y.npy"), np.maximum(x, 0.0), rtol=1e-6)
    sig = _sigmoid(2.0 * x)
    np.testing.assert_allclose(np.load(done.directory / "g.npy"), 2.0 * sig * (1.0 - sig), rtol=1e-5, atol=1e-7)


def test_saved_config_names_functions_and_holds_no_code(tmp_path):
    op = ste.forward(tf.sigmoid).backward(clipped_identity_rule, limit=0.5)
    config = op.get_config()
    assert config == {
        "forward": {"public": "tf.math.sigmoid"},
        "rule": {
            "function": {"module": __name__, "qualname": "clipped_identity_rule"},
            "params": {"limit": 0.5},
        },
    }
    assert ste.forward(cube).backward("identity").get_config()["forward"] == {"registered": "ste_tests>cube"}
    json.dumps(config)


@pytest.mark.parametrize("name", ["module_function_spec_string", "registered_function_function_rule_with_params"])
def test_op_round_trips_wherever_keras_takes_a_callable(name, tmp_path):
    op, f, d = OPS[name]
    # keras.layers.Activation in a functional model (the KerasTensor hint), to_json / model_from_json, clone_model
    inputs = keras.Input((4,))
    outputs = keras.layers.Activation(op)(inputs)
    model = keras.Model(inputs, outputs)
    model.save(tmp_path / "activation.keras")
    x = X @ np.ones((3, 4), np.float32) - 1.0
    for rebuilt in (
        keras.models.load_model(tmp_path / "activation.keras"),
        keras.models.model_from_json(model.to_json()),
        keras.models.clone_model(model),
    ):
        y, grad = _output_and_input_gradient(rebuilt, x, UPSTREAM)
        np.testing.assert_allclose(y, f(x), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grad, UPSTREAM * d(x), rtol=1e-4, atol=1e-6)

    dense = _dense_model(op)
    _check_dense(keras.models.model_from_json(dense.to_json()), f, d)  # fresh weights: checked against themselves
    clone = keras.models.clone_model(dense)
    _check_dense(clone, f, d)


def test_op_in_conv2d_round_trips(tmp_path):
    op, f, d = OPS["tf_nn_backward_like_tf"]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5, 5, 2)), keras.layers.Conv2D(3, 3, activation=op)])
    model.save(tmp_path / "conv.keras")
    loaded = keras.models.load_model(tmp_path / "conv.keras")
    conv = loaded.layers[-1]
    linear = keras.layers.Conv2D(3, 3)  # the same convolution without activation: the autodiff reference
    linear.build((None, 5, 5, 2))
    linear.set_weights(conv.get_weights())
    x = tf.constant(np.random.default_rng(2).normal(size=(2, 5, 5, 2)).astype(np.float32))
    upstream = np.random.default_rng(3).normal(size=(2, 3, 3, 3)).astype(np.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        h = linear(x)
        y = loaded(x)
    hn = h.numpy()
    np.testing.assert_allclose(y.numpy(), f(hn), rtol=1e-5, atol=1e-6)
    expected = tape.gradient(h, x, output_gradients=tf.constant(upstream * d(hn)))
    np.testing.assert_allclose(tape.gradient(y, x, output_gradients=upstream), expected, rtol=1e-4, atol=1e-5)


@keras.saving.register_keras_serializable(package="ste_tests")
class ScaledOp(keras.layers.Layer):
    """A custom layer whose config holds an op (the Keras pattern: serialize in get_config, deserialize in init)."""

    def __init__(self, op, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.op = keras.saving.deserialize_keras_object(op) if isinstance(op, dict) else op
        self.scale = scale

    def call(self, x):
        return self.op(x) * self.scale

    def get_config(self):
        return {**super().get_config(), "op": keras.saving.serialize_keras_object(self.op), "scale": self.scale}


def test_op_in_a_custom_layer_config_round_trips(tmp_path):
    op, f, d = OPS["surrogate_instance"]
    inputs = keras.Input((4,))
    model = keras.Model(inputs, ScaledOp(op, scale=3.0)(inputs))
    model.save(tmp_path / "custom.keras")
    loaded = keras.models.load_model(tmp_path / "custom.keras")
    x = X @ np.ones((3, 4), np.float32)
    y, grad = _output_and_input_gradient(loaded, x, UPSTREAM)
    np.testing.assert_allclose(y, 3.0 * f(x), rtol=1e-6)
    np.testing.assert_allclose(grad, 3.0 * UPSTREAM * d(x), rtol=1e-5, atol=1e-6)


# -- what cannot be saved fails at save time ------------------------------------------------------------------------


def _local_op():
    def local_forward(x):
        return tf.sign(x)

    return ste.forward(local_forward).backward("identity")


def _closure_rule_op():
    scale = 2.0

    def rule(dy, x):
        return dy * scale

    return ste.forward(tf.sign).backward(rule)


UNSAVEABLE = {
    "lambda_forward": (ste.forward(lambda x: tf.sign(x)).backward("identity"), "lambda"),
    "local_forward": (_local_op(), "local function or closure (defined inside _local_op())"),
    "closure_rule": (_closure_rule_op(), "local function or closure (defined inside _closure_rule_op())"),
    "lambda_g": (ste.forward(tf.sign).backward_like(lambda x: tf.tanh(x)), "lambda"),
}


@pytest.mark.parametrize("name", sorted(UNSAVEABLE))
def test_unsaveable_op_fails_at_save_and_leaves_no_file(name, tmp_path):
    op, why = UNSAVEABLE[name]
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation=op)])
    path = tmp_path / "model.keras"
    with pytest.raises(ste.errors.SerializationError) as info:
        model.save(path)
    message = str(info.value)
    assert repr(op) in message and why in message
    assert "module-level `def`" in message and "@keras.saving.register_keras_serializable()" in message
    assert not path.exists()

    path.write_bytes(b"an earlier model")
    with pytest.raises(ste.errors.SerializationError):
        keras.saving.save_model(model, path)
    assert path.read_bytes() == b"an earlier model"  # not truncated
    with pytest.raises(ste.errors.SerializationError):
        model.to_json()
    legacy = tmp_path / "model.h5"  # Keras's legacy HDF5 saver opens its file first too
    with pytest.raises(ste.errors.SerializationError):
        model.save(legacy)
    assert not legacy.exists()


def test_standard_library_function_is_refused_at_save_but_pickles(tmp_path):
    op = ste.forward(operator.neg).backward("identity")  # saved files name no os.system-like function
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation=op)])
    with pytest.raises(ste.errors.SerializationError, match="operator.neg") as info:
        model.save(tmp_path / "neg.keras")
    assert "Wrap it in a function of your own" in str(info.value)
    assert not (tmp_path / "neg.keras").exists()
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = pickle.loads(pickle.dumps(op))(x)
    np.testing.assert_array_equal(y.numpy(), -X)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), np.ones_like(X))


def test_loading_needs_the_module_imported_under_safe_mode():
    config = {"forward": {"module": "ste_tests_not_imported_module", "qualname": "f"}, "rule": {"like": {}}}
    with pytest.raises(ste.errors.SerializationError, match="is not imported"):
        ste.STEFunction.from_config(config)
    forbidden_names = (
        {"module": "os", "qualname": "system"},
        {"module": "tensorflow.python.ops.script_ops", "qualname": "eager_py_func"},
        {"public": "tf.py_function"},
        {"module": __name__, "qualname": "os.system"},  # re-exported names do not count
    )
    for forbidden in forbidden_names:
        with pytest.raises(ste.errors.SerializationError):
            ste.STEFunction.from_config({"forward": forbidden, "rule": {"surrogate": {"name": "identity"}}})


def test_keras_tensor_hint_points_to_a_layer_that_saves(tmp_path):
    op, f, d = OPS["tf_function_registry_name"]
    inputs = keras.Input((4,))
    with pytest.raises(ste.errors.InputError) as info:
        op(inputs)
    assert "keras.layers.Activation(op)" in str(info.value) and "Lambda" not in str(info.value)
    model = keras.Model(inputs, keras.layers.Activation(op)(inputs))
    model.save(tmp_path / "hint.keras")
    x = X @ np.ones((3, 4), np.float32)
    y, grad = _output_and_input_gradient(keras.models.load_model(tmp_path / "hint.keras"), x, UPSTREAM)
    np.testing.assert_allclose(y, f(x), rtol=1e-6)
    np.testing.assert_allclose(grad, UPSTREAM * d(x), rtol=1e-6)


# -- copying and pickling ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_copy_deepcopy_and_pickle(name):
    op, f, d = OPS[name]
    x = tf.constant(X)
    for copied in (copy.copy(op), copy.deepcopy(op), pickle.loads(pickle.dumps(op))):
        assert repr(copied) == repr(op)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = copied(x)
        np.testing.assert_allclose(y.numpy(), f(X), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), d(X), rtol=1e-5, atol=1e-6)


def triangle_derivative(x, width=1.0):
    """A user surrogate registered from a function: max(0, 1 − |x|/width)/width."""
    return tf.nn.relu(1.0 - tf.abs(x) / width) / width


@pytest.fixture
def user_surrogate():
    ste.registry.register("ste_tests_triangle", triangle_derivative)  # only inside the test: the gallery lists names
    try:
        yield
    finally:
        ste.registry.unregister("ste_tests_triangle")


def test_op_with_user_registered_surrogate_saves_and_pickles(user_surrogate, tmp_path):
    op = ste.forward(tf.sign).backward("ste_tests_triangle", width=2.0)
    model = _dense_model(op)
    model.save(tmp_path / "user.keras")
    f, d = np.sign, lambda x: np.maximum(0.0, 1.0 - np.abs(x) / 2.0) / 2.0
    _check_dense(keras.models.load_model(tmp_path / "user.keras"), f, d)
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = pickle.loads(pickle.dumps(op))(x)
    np.testing.assert_array_equal(y.numpy(), np.sign(X))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), d(X), rtol=1e-6)


class DoubledSigmoid(type(ste.registry.get("sigmoid_surrogate"))):
    """An unregistered subclass with another derivative: pickled by its class, not by its parent's name."""

    def derivative(self, x):
        return 2.0 * super().derivative(x)


def test_op_with_unregistered_surrogate_subclass_pickles_by_class():
    op = ste.forward(tf.sign).backward(DoubledSigmoid(beta=1.0))
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = pickle.loads(pickle.dumps(op))(x)
    np.testing.assert_array_equal(y.numpy(), np.sign(X))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 2.0 * _sigmoid(X) * (1.0 - _sigmoid(X)), rtol=1e-5)


@pytest.mark.parametrize("name", sorted(UNSAVEABLE))
def test_unpicklable_op_says_why(name):
    op, why = UNSAVEABLE[name]
    with pytest.raises(ste.errors.SerializationError, match="cannot be pickled") as info:
        pickle.dumps(op)
    assert why in str(info.value)
    assert copy.deepcopy(op) is op  # immutable, like a function: copies are the op itself


def _value_and_gradients(layer, x):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = layer(xt, training=False)
        weights = tf.reshape(tf.cast(tf.range(1, tf.size(y) + 1), y.dtype), tf.shape(y))
        loss = tf.reduce_sum(y * weights) / tf.cast(tf.size(y), y.dtype)
    grads = tape.gradient(loss, [xt, *layer.trainable_variables])
    return y.numpy(), [g.numpy() for g in grads]


def _assert_same(layer, copied, x):
    y0, g0 = _value_and_gradients(layer, x)
    y1, g1 = _value_and_gradients(copied, x)
    np.testing.assert_array_equal(y1, y0)
    assert len(g0) == len(g1)
    for a, b in zip(g0, g1):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)


def _copies(obj):
    return {"copy": copy.copy(obj), "deepcopy": copy.deepcopy(obj), "pickle": pickle.loads(pickle.dumps(obj))}


@pytest.mark.parametrize("name", ste.quantizers.names())
def test_every_quantizer_copies_and_pickles(name):
    quantizer = ste.quantizers.get(name)
    x = np.linspace(-2.0, 2.0, 24, dtype=np.float32).reshape(4, 6)
    quantizer(x, training=True)
    for variable in quantizer.trainable_variables:  # learned state that a fresh quantizer would not have
        variable.assign(variable * 0.75)
    for how, copied in _copies(quantizer).items():
        assert type(copied) is type(quantizer), how
        assert [v.numpy() for v in copied.weights] == [v.numpy() for v in quantizer.weights], how
        _assert_same(quantizer, copied, x)


# Constructor arguments and an input shape for each Keras parent of an ste layer.
PARENTS = {
    "Dense": ((3,), (2, 6)),
    "Conv1D": ((2, 3), (2, 6, 3)),
    "Conv2D": ((2, 3), (2, 5, 5, 2)),
    "Conv3D": ((2, 2), (1, 4, 4, 4, 2)),
    "Conv1DTranspose": ((2, 3), (2, 6, 3)),
    "Conv2DTranspose": ((2, 3), (2, 5, 5, 2)),
    "Conv3DTranspose": ((2, 2), (1, 4, 4, 4, 2)),
    "DepthwiseConv1D": ((3,), (2, 6, 3)),
    "DepthwiseConv2D": ((3,), (2, 5, 5, 2)),
    "SeparableConv1D": ((2, 3), (2, 6, 3)),
    "SeparableConv2D": ((2, 3), (2, 5, 5, 2)),
}
LAYERS = sorted(
    name
    for name in ste.layers.__all__
    if isinstance(getattr(ste.layers, name), type)
    and issubclass(getattr(ste.layers, name), keras.layers.Layer)
    and issubclass(getattr(ste.layers, name), ste.layers.QuantLayerMixin)
)


def _make_layer(cls):
    """The layer with an input quantizer, LSQ (which has a variable) on its first kernel and ste_sign on the others."""
    parent = next(k.__name__ for k in cls.__mro__ if k.__module__.startswith("keras.") and k.__name__ in PARENTS)
    args, shape = PARENTS[parent]
    quantizers = {slot.quantizer: "ste_sign" for slot in cls.slots}
    quantizers[cls.slots[0].quantizer] = "lsq(bits=3)"
    constraints = {slot.constraint: "weight_clip" for slot in cls.slots}
    return cls(*args, input_quantizer="ste_sign", **quantizers, **constraints), shape


@pytest.mark.parametrize("name", LAYERS)
def test_every_layer_copies_and_pickles(name):
    layer, shape = _make_layer(getattr(ste.layers, name))
    x = np.random.default_rng(4).normal(size=shape).astype(np.float32)
    layer(x)
    for how, copied in _copies(layer).items():
        assert type(copied) is type(layer), how
        _assert_same(layer, copied, x)


def test_the_batch_normalization_layer_copies_and_pickles():
    layer = ste.layers.BatchNormalization(momentum=0.8)
    x = np.random.default_rng(4).normal(size=(2, 5, 5, 2)).astype(np.float32)
    layer(x, training=True)  # moving statistics a fresh layer would not have
    for how, copied in _copies(layer).items():
        assert type(copied) is type(layer), how
        for a, b in zip(layer.weights, copied.weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        _assert_same(layer, copied, x)


# -- shared stateful quantizers -------------------------------------------------------------------------------------


def test_a_quantizer_with_variables_belongs_to_one_layer():
    lsq = ste.quantizers.LSQ(bits=4)
    inputs = keras.Input((4,))
    hidden = ste.layers.QuantDense(4, kernel_quantizer=lsq, name="first")(inputs)
    second = ste.layers.QuantDense(2, kernel_quantizer=lsq, name="second")
    with pytest.raises(ste.errors.ParameterError) as info:
        second(hidden)  # built here: before any training step or save
    message = str(info.value)
    assert "'first'" in message and "'second'" in message and "kernel_quantizer" in message
    assert "lsq(bits=4)" in message or "LSQ(" in message


def test_a_stateless_quantizer_can_be_shared_and_saves(tmp_path):
    sign = ste.quantizers.Sign()
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    hidden = ste.layers.QuantDense(4, kernel_quantizer=sign, kernel_constraint="weight_clip", name="a")(inputs)
    outputs = ste.layers.QuantDense(2, kernel_quantizer=sign, kernel_constraint="weight_clip", name="b")(hidden)
    model = keras.Model(inputs, outputs)
    model.save(tmp_path / "shared.keras")
    loaded = keras.models.load_model(tmp_path / "shared.keras")
    x = np.random.default_rng(5).normal(size=(3, 4)).astype(np.float32)
    a, b = (loaded.get_layer(n).kernel.numpy() for n in "ab")
    ba, bb = (loaded.get_layer(n).bias.numpy() for n in "ab")
    sign_np = lambda w: np.where(w >= 0, 1.0, -1.0).astype(np.float32)  # noqa: E731
    expected = (x @ sign_np(a) + ba) @ sign_np(b) + bb
    np.testing.assert_allclose(loaded(x).numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("name", ["module_function_spec_string", "registered_function_function_rule_with_params"])
def test_rebuilt_op_computes_in_every_float_dtype(name, dtype):
    op, f, d = OPS[name]
    rebuilt = ste.STEFunction.from_config(json.loads(json.dumps(op.get_config())))
    grid = np.linspace(-2.0, 2.0, 17)
    x = tf.cast(tf.constant(grid), dtype)
    exact = tf.cast(x, tf.float64).numpy()  # the grid as the dtype holds it
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = rebuilt(x)
    grad = tape.gradient(y, x)
    assert y.dtype == grad.dtype == tf.as_dtype(dtype)
    tolerance = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-6, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(tf.cast(y, tf.float64).numpy(), f(exact), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(tf.cast(grad, tf.float64).numpy(), d(exact), rtol=4 * tolerance, atol=4 * tolerance)


def test_unregistered_surrogate_subclass_fails_at_save_and_leaves_no_file(tmp_path):
    """Surrogate.get_config refuses it (a config naming the parent would reload the parent's derivative)."""
    model = _dense_model(ste.forward(tf.sign).backward(DoubledSigmoid(beta=1.0)))
    with pytest.raises(ste.STEError, match="DoubledSigmoid"):
        model.save(tmp_path / "subclass.keras")
    assert not (tmp_path / "subclass.keras").exists()
