"""The ``training`` flag of a pruned layer: a Python bool, a numpy bool or a boolean scalar tensor (TFMOT's wrapper
takes a tensor through ``smart_cond``), eagerly, in tf.function (a symbolic flag too) and under XLA; anything else is
refused. A True flag advances the step and updates the mask (numpy reference), a False one changes nothing."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .test_masks import numpy_mask

S = ste.sparsity
X = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)


def prepared():
    keras.utils.set_random_seed(1)
    layer = S.prune_low_magnitude(keras.layers.Dense(6), S.ConstantSparsity(0.5, 0, frequency=1))
    model = keras.Sequential([keras.Input((8,)), layer])
    callback = S.UpdatePruningStep()
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(0)
    return model, layer, layer.layer.kernel.numpy().copy()


def pruned_state(layer) -> tuple[int, np.ndarray]:
    return int(layer.pruning_step.numpy()), layer.pruning_vars[0][1].numpy().astype(bool)


def check(layer, kernel: np.ndarray, trained: bool) -> None:
    step, mask = pruned_state(layer)
    if trained:
        assert step == 1
        np.testing.assert_array_equal(mask, numpy_mask(kernel, 0.5))
    else:
        assert step == 0 and mask.all()


FLAGS = [
    (True, True),
    (np.bool_(True), True),
    (tf.constant(True), True),
    (False, False),
    (np.bool_(False), False),
    (tf.constant(False), False),
    (None, False),
]


@pytest.mark.parametrize("flag,trained", FLAGS, ids=repr)
def test_eager_flags(flag, trained: bool) -> None:
    model, layer, kernel = prepared()
    model(X, training=flag)
    check(layer, kernel, trained)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("value", [True, False])
def test_a_symbolic_flag_in_tf_function_and_xla(jit_compile: bool, value: bool) -> None:
    model, layer, kernel = prepared()
    step = tf.function(lambda x, training: model(x, training=training), jit_compile=jit_compile)
    out = step(X, tf.constant(value))  # the flag is an argument of the function: its value is known when it runs
    check(layer, kernel, value)
    masked = kernel * layer.pruning_vars[0][1].numpy()
    np.testing.assert_allclose(out.numpy(), X @ masked + layer.layer.bias.numpy(), rtol=1e-5, atol=1e-6)


def test_a_constant_flag_inside_tf_function() -> None:
    model, layer, kernel = prepared()
    tf.function(lambda x: model(x, training=tf.constant(True)))(X)
    check(layer, kernel, True)


def test_a_symbolic_flag_without_the_callback_is_refused_when_traced() -> None:
    layer = S.prune_low_magnitude(keras.layers.Dense(6))
    model = keras.Sequential([keras.Input((8,)), layer])
    with pytest.raises(S.MissingCallbackError, match="UpdatePruningStep"):
        tf.function(lambda x, training: model(x, training=training))(X, tf.constant(False))


@pytest.mark.parametrize("flag", [1, 0, "True", tf.constant(1), tf.constant([True, False]), 1.0], ids=repr)
def test_other_flags_are_refused(flag) -> None:
    model, layer, _ = prepared()
    with pytest.raises(ste.errors.ParameterTypeError) as info:
        model(X, training=flag)
    message = str(info.value)
    assert "training must be True, False, None or a boolean scalar tensor" in message and "Fix:" in message
    assert pruned_state(layer)[0] == 0  # refused before the step moved
