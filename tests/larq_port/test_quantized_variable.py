"""larq 0.14's larq/quantized_variable_test.py under ``import ste.larq as lq``.

The one change: larq wraps a ``tf.compat.v1.Variable``; Keras 3 layers hold ``keras.Variable`` objects, so
``get_var`` makes one of those. The graph-mode halves (TF1 sessions) and the tf.Variable-only methods
(``sparse_read``, ``gather_nd``, ``scatter_*``, ``load``, ``eval``, ``initializer``, ``op``) are listed in
docs/larq.md; everything else is larq's expectations, eagerly and inside ``tf.function``, with and without a
MirroredStrategy.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from numpy.testing import assert_almost_equal, assert_array_equal
from tensorflow.python.distribute.values import DistributedVariable

import ste.larq as lq
from ste.larq import context
from ste.larq.quantized_variable import QuantizedVariable


def get_var(val, dtype=None, name=None):
    return keras.Variable(val, dtype=dtype, name=name)


def evaluate(x):  # larq's testing_utils.evaluate, eagerly
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def test_inheritance(distribute_scope):
    variable = get_var(3.0)
    quantized_variable = QuantizedVariable.from_variable(variable)
    assert isinstance(quantized_variable, QuantizedVariable)
    assert isinstance(quantized_variable, keras.Variable)  # larq: tf.Variable (Keras 3 layers hold keras.Variable)
    assert isinstance(quantized_variable.latent_variable, DistributedVariable) is distribute_scope


@pytest.mark.usefixtures("distribute_scope")
def test_read():
    x = QuantizedVariable.from_variable(get_var(3.5), quantizer=lambda x: 2 * x)
    assert evaluate(x) == 3.5
    assert evaluate(x.numpy()) == 3.5
    assert evaluate(tf.identity(x)) == 3.5
    with context.quantized_scope(True):
        assert evaluate(x) == 7
        assert evaluate(x.numpy()) == 7
        assert evaluate(tf.identity(x)) == 7
        assert evaluate(x.latent_variable) == 3.5
        assert np.asarray(x) == 7


@pytest.mark.usefixtures("distribute_scope")
def test_read_nested_scopes():
    x = QuantizedVariable.from_variable(get_var(3.5), quantizer=lambda x: 2 * x)
    with context.quantized_scope(True):
        assert evaluate(x) == 7
        with context.quantized_scope(False):
            assert evaluate(x) == 3.5
        assert evaluate(x) == 7
    assert not context.should_quantize()


def test_method_delegations(distribute_scope):
    x = QuantizedVariable.from_variable(get_var(3.5), quantizer=lambda x: 2 * x)
    with context.quantized_scope(True):
        assert evaluate(x) == 7
        assert x.trainable
        assert x.synchronization == "auto"  # Keras 3 names it; larq compared with the tf.Variable's enum
        assert x.aggregation == "none"
        if not distribute_scope:
            assert x.constraint is None

        def apply_and_read(x, fn, args):
            fn(*args)
            return evaluate(x)

        assert apply_and_read(x, x.assign, [4]) == 8
        assert apply_and_read(x, x.assign_add, [1]) == 10
        assert apply_and_read(x, x.assign_sub, [1.5]) == 7
        assert x.name == get_var(1.0, name=x.name).name
        assert x.shape == ()


@pytest.mark.usefixtures("distribute_scope")
def test_overloads(quantized):
    if quantized:
        x = QuantizedVariable.from_variable(get_var(3.5), quantizer=lambda x: 2 * x)
    else:
        x = QuantizedVariable.from_variable(get_var(7.0))
    assert_almost_equal(8, evaluate(x + 1))
    assert_almost_equal(10, evaluate(3 + x))
    assert_almost_equal(14, evaluate(x + x))
    assert_almost_equal(5, evaluate(x - 2))
    assert_almost_equal(6, evaluate(13 - x))
    assert_almost_equal(0, evaluate(x - x))
    assert_almost_equal(14, evaluate(x * 2))
    assert_almost_equal(21, evaluate(3 * x))
    assert_almost_equal(49, evaluate(x * x))
    assert_almost_equal(3.5, evaluate(x / 2))
    assert_almost_equal(1.5, evaluate(10.5 / x))
    assert_almost_equal(3, evaluate(x // 2))
    assert_almost_equal(2, evaluate(15 // x))
    assert_almost_equal(1, evaluate(x % 2))
    assert_almost_equal(2, evaluate(16 % x))
    assert evaluate(x < 12)
    assert evaluate(x <= 12)
    assert not evaluate(x > 12)
    assert not evaluate(x >= 12)
    assert not evaluate(12 < x)
    assert not evaluate(12 <= x)
    assert evaluate(12 > x)
    assert evaluate(12 >= x)
    assert_almost_equal(343, evaluate(pow(x, 3)))
    assert_almost_equal(128, evaluate(pow(2, x)))
    assert_almost_equal(-7, evaluate(-x))
    assert_almost_equal(7, evaluate(abs(x)))


def test_tensor_equality(quantized):
    if quantized:
        x = QuantizedVariable.from_variable(get_var([3.5, 4.0, 4.5]), quantizer=lambda x: 2 * x)
    else:
        x = QuantizedVariable.from_variable(get_var([7.0, 8.0, 9.0]))
    assert_array_equal(evaluate(x), [7.0, 8.0, 9.0])
    assert_array_equal(x == [7.0, 8.0, 10.0], [True, True, False])
    assert_array_equal(x != [7.0, 8.0, 10.0], [False, False, True])


def test_assign(quantized, distribute_scope):
    x = QuantizedVariable.from_variable(get_var(0.0, "float64"), quantizer=lambda x: 2 * x)
    latent_value = 3.14
    value = latent_value * 2 if quantized else latent_value

    lv = tf.constant(latent_value, dtype=tf.float64)
    assert_almost_equal(evaluate(x.assign(lv)), value)
    assert_almost_equal(evaluate(x.assign_add(lv)), value * 2)
    assert_almost_equal(evaluate(x.assign_sub(lv)), value)
    # Python floats
    assert_almost_equal(evaluate(x.assign(0.0)), 0.0)
    assert_almost_equal(evaluate(x.assign(latent_value)), value)
    assert_almost_equal(evaluate(x.assign_add(latent_value)), value * 2)
    assert_almost_equal(evaluate(x.assign_sub(latent_value)), value)
    # assign multiple times
    assign = x.assign(0.0)
    assert_almost_equal(evaluate(assign), 0.0)
    assert_almost_equal(evaluate(assign.assign(latent_value)), value)
    assert_almost_equal(evaluate(x.assign_add(latent_value).assign_add(latent_value)), value * 3)
    assert_almost_equal(evaluate(x), value * 3)
    assert_almost_equal(evaluate(x.assign_sub(latent_value).assign_sub(latent_value)), value)
    assert_almost_equal(evaluate(x), value)
    # read_value=False
    assert_almost_equal(evaluate(x.assign(0.0)), 0.0)
    assert x.assign(latent_value, read_value=False) is None
    assert_almost_equal(evaluate(x), value)
    assert x.assign_add(latent_value, read_value=False) is None
    assert_almost_equal(evaluate(x), 2 * value)
    assert x.assign_sub(latent_value, read_value=False) is None
    assert_almost_equal(evaluate(x), value)


@pytest.mark.usefixtures("distribute_scope")
def test_assign_tf_function(quantized):
    x = QuantizedVariable.from_variable(get_var(0.0), quantizer=lambda x: 2 * x)

    @tf.function
    def run_assign():
        return x.assign(1.0).assign_add(3.0).assign_add(3.0).assign_sub(2.0)

    assert_almost_equal(evaluate(run_assign()), 10.0 if quantized else 5.0)


@pytest.mark.usefixtures("distribute_scope")
def test_tf_function_control_dependencies(quantized):
    x = QuantizedVariable.from_variable(get_var(0.0), quantizer=lambda x: 2 * x)

    @tf.function
    def func():
        x.assign_add(1.0)
        x.assign_add(1.0)

    func()
    assert_almost_equal(evaluate(x), 4.0 if quantized else 2.0)


def test_tf_function_with_variable_and_quantized_variable():
    variable = get_var(tf.ones((2, 2)))
    quantized_variable = QuantizedVariable.from_variable(variable)

    @tf.function
    def f(x):
        return x + 1

    assert_array_equal(f(variable), f(quantized_variable))


def test_checkpoint(tmp_path):
    x = QuantizedVariable.from_variable(get_var(0.0), quantizer=lambda x: 2 * x)
    x.assign(123.0)
    checkpoint = tf.train.Checkpoint(x=x)
    save_path = checkpoint.save(tmp_path / "ckpt")
    x.assign(234.0)
    checkpoint.restore(save_path).assert_consumed()
    assert isinstance(x, QuantizedVariable)
    assert evaluate(x) == 123.0
    with context.quantized_scope(True):
        assert evaluate(x) == 123.0 * 2


@pytest.mark.usefixtures("distribute_scope")
def test_invalid_wrapped_usage():
    with pytest.raises(ValueError, match="`variable` must be of type"):
        QuantizedVariable.from_variable(tf.constant([1.0]))
    with pytest.raises(ValueError, match="`quantizer` must be `callable` or `None`"):
        QuantizedVariable.from_variable(get_var([1.0]), 1)
    with pytest.raises(ValueError, match="`precision` must be of type `int` or `None`"):
        QuantizedVariable.from_variable(get_var([1.0]), precision=1.0)


def test_repr():
    x = get_var(0.0, name="x")

    class Quantizer:
        def __call__(self, x):
            return x

    assert "quantizer=<lambda>" in repr(QuantizedVariable.from_variable(x, quantizer=lambda x: 2 * x))
    assert "quantizer=Quantizer" in repr(QuantizedVariable.from_variable(x, quantizer=Quantizer()))
    assert "precision=1" in repr(QuantizedVariable.from_variable(x, precision=1))
    with context.quantized_scope(True):  # larq shows the value read in the scope
        assert "value=2.0" in repr(QuantizedVariable.from_variable(get_var(1.0), quantizer=lambda x: 2 * x))


@pytest.mark.parametrize("should_quantize", [True, False])
def test_optimizer(should_quantize):
    """larq minimizes x + 1 with SGD(1.0) where x reads as -x in the scope; Keras 3 has no ``minimize``, so the
    same step is GradientTape + apply_gradients."""
    x = QuantizedVariable.from_variable(get_var(1.0), quantizer=lambda x: -x)
    opt = keras.optimizers.SGD(1.0)

    @tf.function
    def f():
        with tf.GradientTape() as tape:
            with context.quantized_scope(should_quantize):
                loss = x + 1.0
        opt.apply_gradients(zip(tape.gradient(loss, [x]), [x]))

    f()
    if should_quantize:
        assert evaluate(x) == 2.0
        with context.quantized_scope(should_quantize):
            assert evaluate(x) == -2.0
    else:
        assert evaluate(x) == 0.0


def test_saved_model(tmp_path):
    """larq's SavedModel round trip is Keras 3's .keras file: same predictions and weights after loading."""
    x = np.random.default_rng(0).normal(size=(4, 32)).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((32,)),
            lq.layers.QuantDense(16, kernel_quantizer="ste_sign", kernel_constraint="weight_clip", use_bias=False),
            keras.layers.BatchNormalization(),
            lq.layers.QuantDense(
                10, input_quantizer="ste_sign", kernel_quantizer="ste_sign", kernel_constraint="weight_clip"
            ),
        ]
    )
    weights = model.get_weights()
    model.save(tmp_path / "model.keras")
    reloaded = keras.models.load_model(tmp_path / "model.keras")
    assert_almost_equal(reloaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert len(reloaded.get_weights()) == len(weights)
    for reloaded_weight, weight in zip(reloaded.get_weights(), weights):
        assert_almost_equal(reloaded_weight, weight)
    assert isinstance(reloaded.layers[0].kernel, QuantizedVariable)
