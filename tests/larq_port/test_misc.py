"""larq 0.14's metrics_test, activations_test, utils_test, version_test, constraints_test, math_test and the
CaseOptimizer type checks of optimizers_test, under ``import ste.larq as lq`` (``tf.keras`` -> ``keras``; larq's
placeholders and TF1 sessions become calls on values). larq's training runs of Bop, CaseOptimizer and
HyperparameterScheduler need datasets downloaded at run time; tests/training covers those optimizers and callbacks."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste.larq as lq
from ste.larq import metrics, utils

RNG = np.random.default_rng(2)


def generate_real_values_with_zeros(low=-2, high=2, shape=(4, 10)):
    return np.insert(RNG.uniform(low, high, shape), 1, 0, axis=1)


# --- larq/metrics_test.py ---------------------------------------------------------------------------------------
def test_config():
    mcv = metrics.FlipRatio(values_dtype="int16", name="mcv", dtype=tf.float16)
    assert mcv.name == "mcv"
    assert mcv.stateful
    assert mcv.dtype == tf.float16
    assert mcv.values_dtype == tf.int16
    mcv2 = metrics.FlipRatio.from_config(mcv.get_config())
    assert mcv2.name == "mcv"
    assert mcv2.stateful
    assert mcv2.dtype == tf.float16
    assert mcv2.values_dtype == tf.int16


def _check_three_updates(mcv):
    mcv.update_state(np.array([1, 1]))
    assert all([1, 1] == mcv._previous_values.numpy())
    assert 0 == mcv.total.numpy() and 1 == mcv.count.numpy() and 0 == mcv.result().numpy()
    mcv.update_state(np.array([2, 2]))
    assert all([2, 2] == mcv._previous_values.numpy())
    assert 1 == mcv.total.numpy() and 2 == mcv.count.numpy() and 1 == mcv.result().numpy()
    mcv.update_state(np.array([1, 2]))
    assert all([1, 2] == mcv._previous_values.numpy())
    assert 1.5 == mcv.total.numpy() and 3 == mcv.count.numpy() and 1.5 / 2 == mcv.result().numpy()


def test_metric():
    mcv = metrics.FlipRatio()
    mcv.build((2,))
    assert 0 == mcv.result().numpy() and 0 == mcv.total.numpy() and 0 == mcv.count.numpy()
    _check_three_updates(mcv)


def test_metric_implicit_build():
    _check_three_updates(metrics.FlipRatio())


def test_metric_in_tf_function():  # larq's test_metric_in_graph_mode, in a tf.function instead of a TF1 session
    mcv = metrics.FlipRatio()
    mcv.build((2,))
    update = tf.function(mcv.update_state)
    for values in ([1.0, 1.0], [2.0, 2.0], [1.0, 2.0]):
        update(tf.constant(values))
    assert all([1, 2] == mcv._previous_values.numpy())
    assert 1.5 == mcv.total.numpy() and 3 == mcv.count.numpy() and 1.5 / 2 == mcv.result().numpy()


def test_metric_wrong_shape():
    mcv = metrics.FlipRatio()
    mcv.build((3,))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        mcv.update_state(np.array([1, 1]))


def test_values_dtype_counts_as_larq():  # larq casts to int8 by default: 0.25 and 0.5 are then both 0
    larqs, exact = metrics.FlipRatio(values_dtype="int8"), metrics.FlipRatio()
    for values in ([0.25, 1.0], [0.5, 1.0]):
        larqs.update_state(np.array(values, "float32"))
        exact.update_state(np.array(values, "float32"))
    assert larqs.result().numpy() == 0.0 and exact.result().numpy() == 0.5


# --- larq/activations_test.py -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["hard_tanh", "leaky_tanh"])
def test_activation_serialization(name):
    ref_fn = getattr(lq.activations, name)
    fn = keras.activations.get(name)
    if name == "hard_tanh":  # Keras 3 has its own hard_tanh under this name: the same values (docs/larq.md)
        x = generate_real_values_with_zeros().astype("float32")
        np.testing.assert_array_equal(fn(x), ref_fn(x))
        assert lq.layers.QuantDense(2, activation=name).activation is ref_fn  # larq's in ste's layers
        fn = ref_fn
    assert fn == ref_fn
    fn = keras.activations.deserialize(keras.activations.serialize(fn))
    assert fn == ref_fn


def test_hard_tanh():
    real_values = generate_real_values_with_zeros()
    np.testing.assert_allclose(lq.activations.hard_tanh(real_values), np.clip(real_values, -1, 1))


def test_leaky_tanh():
    @np.vectorize
    def leaky_tanh(x, alpha):
        if x <= -1:
            return -1 + alpha * (x + 1)
        elif x <= 1:
            return x
        else:
            return 1 + alpha * (x - 1)

    real_values = generate_real_values_with_zeros()
    np.testing.assert_allclose(lq.activations.leaky_tanh(real_values), leaky_tanh(real_values, alpha=0.2), rtol=1e-6)


# --- larq/utils_test.py, larq/version_test.py -------------------------------------------------------------------
def test_memory_as_readable_str():
    units = ["B", "KiB", "MiB", "GiB"]
    correct = [f"{2**i / 8:.2f} B" for i in range(3)]  # 0.12 B, 0.25 B, 0.50 B (larq's strings)
    correct += [f"{2 ** (i % 10):.2f} {units[i // 10]}" for i in range(40)]  # 1.00 B ... 512.00 GiB
    correct += ["1,024.00 GiB"]
    assert correct[0] == "0.12 B" and correct[13] == "1.00 KiB" and correct[-2] == "512.00 GiB"
    for i, correct_string in enumerate(correct):
        assert utils.memory_as_readable_str(2**i) == correct_string


def test_set_precision():
    @utils.set_precision(8)
    def toy_quantizer(x):
        return x

    assert toy_quantizer.precision == 8


def test_version():
    assert hasattr(lq, "__version__") and "." in lq.__version__
    assert lq.__version__.startswith("0.14.")  # the larq release ste.larq matches


# --- larq/constraints_test.py, larq/math_test.py ----------------------------------------------------------------
def test_constraint_serialization():
    fn = lq.constraints.get("weight_clip")
    ref_fn = lq.constraints.weight_clip()
    assert fn.__class__ == ref_fn.__class__
    fn = keras.constraints.deserialize(keras.constraints.serialize(fn))
    assert fn.__class__ == ref_fn.__class__


def test_clip():
    real_values = generate_real_values_with_zeros()
    result = lq.constraints.weight_clip(clip_value=0.75)(keras.Variable(real_values))
    np.testing.assert_allclose(result, np.clip(real_values, -0.75, 0.75))


def test_sign():
    binarized_values = RNG.choice([-1, 1], size=(2, 5)).astype(np.float32)
    np.testing.assert_allclose(lq.math.sign(binarized_values), binarized_values)
    real_values = generate_real_values_with_zeros()
    result = np.asarray(lq.math.sign(real_values))
    assert not np.any(result == 0)
    assert np.all(result[real_values < 0] == -1) and np.all(result[real_values >= 0] == 1)
    assert np.all(np.asarray(lq.math.sign(np.zeros((2, 5)))) == 1)


def test_heaviside():
    binarized_values = RNG.choice([0, 1], size=(2, 5)).astype(np.float32)
    np.testing.assert_allclose(lq.math.heaviside(binarized_values), binarized_values)
    real_values = generate_real_values_with_zeros()
    result = np.asarray(lq.math.heaviside(real_values))
    assert np.all(result[real_values <= 0] == 0) and np.all(result[real_values > 0] == 1)


# --- larq/optimizers_test.py: CaseOptimizer's type checks ------------------------------------------------------
def test_type_check_predicate():
    with pytest.raises(TypeError):
        lq.optimizers.CaseOptimizer((False, lq.optimizers.Bop()))


def test_type_check_optimizer():
    with pytest.raises(TypeError):
        lq.optimizers.CaseOptimizer((lq.optimizers.Bop.is_binary_variable, False))


def test_type_check_default():
    with pytest.raises(TypeError):
        lq.optimizers.CaseOptimizer(
            (lq.optimizers.Bop.is_binary_variable, lq.optimizers.Bop()), default_optimizer=False
        )


def test_type_checks_are_ste_errors_too():
    import ste

    with pytest.raises(ste.errors.ParameterError):
        lq.optimizers.CaseOptimizer((False, lq.optimizers.Bop()))
