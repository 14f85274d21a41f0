"""TFMOT's pruning API as TFMOT users write it (tensorflow_model_optimization 0.8.1, ``sparsity/keras``):
``get_prunable_weights``, lists of layers, the schedules' ``get_config`` format, the callbacks' hooks and the custom
training loop of TFMOT's comprehensive guide, verbatim but for the names. Expected values are TFMOT's (quoted from
its source) or numpy counts."""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .test_masks import numpy_kept, numpy_mask

S = ste.sparsity
L = keras.layers


def test_get_prunable_weights_gives_the_pruned_variables_themselves() -> None:
    """TFMOT's ``layer.get_prunable_weights()`` (``prune_registry.make_prunable``) and the wrapper's
    ``prunable_weights`` (``pruning_wrapper.build``): the variables, not copies."""
    dense = S.prune_low_magnitude(L.Dense(3))
    with pytest.raises(ste.errors.NotBuiltError, match=r"get_prunable_weights\(\).*Fix:"):
        dense.get_prunable_weights()
    dense.build((None, 4))
    assert dense.get_prunable_weights() == [dense.layer.kernel] and dense.prunable_weights[0] is dense.layer.kernel
    assert [weight for weight, _, _ in dense.pruning_vars] == dense.get_prunable_weights()
    mha = S.prune_low_magnitude(L.MultiHeadAttention(2, 4))
    mha(np.ones((1, 3, 8), np.float32), np.ones((1, 3, 8), np.float32))
    inner = mha.layer
    expected = [
        inner._query_dense.kernel,
        inner._key_dense.kernel,
        inner._value_dense.kernel,
        inner._output_dense.kernel,
    ]
    assert all(a is b for a, b in zip(mha.get_prunable_weights(), expected, strict=True))
    conv = S.prune_low_magnitude(L.SeparableConv2D(4, 3))
    conv.build((None, 8, 8, 2))
    # both kernels (TFMOT prunes the pointwise one only); with N:M the pointwise one, which sums over input channels
    assert conv.get_prunable_weights() == [conv.layer.depthwise_kernel, conv.layer.pointwise_kernel]
    conv = S.prune_low_magnitude(L.SeparableConv2D(4, 3), sparsity_m_by_n=(2, 4))
    conv.build((None, 8, 8, 4))
    assert conv.get_prunable_weights() == [conv.layer.pointwise_kernel]


def test_a_list_of_layers_gives_a_list_of_wrappers_as_tfmot() -> None:
    """TFMOT's ``_prune_list``: each layer wrapped with the same settings, a wrapper kept as it is, an InputLayer
    copied."""
    schedule = S.ConstantSparsity(0.75, 0, frequency=1)
    already = S.prune_low_magnitude(L.Dense(2))
    entry = L.InputLayer(shape=(8,))
    layers = S.prune_low_magnitude([entry, L.Dense(6, name="a"), L.Dense(2, name="b"), already], schedule)
    assert isinstance(layers, list) and len(layers) == 4
    assert type(layers[0]) is L.InputLayer and layers[0] is not entry and layers[0].batch_shape == (None, 8)
    assert [type(layer) for layer in layers[1:3]] == [S.PruneLowMagnitude] * 2 and layers[3] is already
    assert all(layer.pruning_schedule is schedule for layer in layers[1:3])
    model = keras.Sequential(layers[:3])
    kernels = [layer.layer.kernel.numpy().copy() for layer in layers[1:3]]
    callback = S.UpdatePruningStep()
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(0)
    model(np.ones((1, 8), np.float32), training=True)
    for layer, kernel in zip(layers[1:3], kernels):
        np.testing.assert_array_equal(layer.pruning_vars[0][1].numpy().astype(bool), numpy_mask(kernel, 0.75))


def test_a_list_is_checked_whole_before_anything_is_wrapped() -> None:
    with pytest.raises(ste.errors.ParameterTypeError, match=r"must hold Keras 3 layers.*Fix:"):
        S.prune_low_magnitude([L.Dense(2), "dense"])
    with pytest.raises(ste.errors.UnsupportedLayerError, match="'flatten'"):
        S.prune_low_magnitude([L.Dense(2), L.Flatten(name="flatten")])


def test_schedules_get_config_is_tfmots_format() -> None:
    """``pruning_schedule.py``: ``{'class_name': self.__class__.__name__, 'config': {...}}``, keys in TFMOT's order."""
    constant = S.ConstantSparsity(0.5, 10, 200, 20).get_config()
    assert constant == {
        "class_name": "ConstantSparsity",
        "config": {"target_sparsity": 0.5, "begin_step": 10, "end_step": 200, "frequency": 20},
    }
    polynomial = S.PolynomialDecay(0.1, 0.9, 0, 100, 2, 5).get_config()
    assert polynomial == {
        "class_name": "PolynomialDecay",
        "config": {
            "initial_sparsity": 0.1, "final_sparsity": 0.9, "power": 2, "begin_step": 0, "end_step": 100,
            "frequency": 5,
        },
    }  # fmt: skip
    assert list(polynomial["config"]) == ["initial_sparsity", "final_sparsity", "power", "begin_step", "end_step",
                                          "frequency"]  # fmt: skip
    for schedule in (S.ConstantSparsity(0.5, 10, 200, 20), S.PolynomialDecay(0.1, 0.9, 0, 100, 2, 5)):
        assert type(schedule).from_config(schedule.get_config()) == schedule
        again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
        assert again == schedule and again is not schedule


def test_a_wrapper_config_with_tfmots_schedule_dict_loads() -> None:
    """TFMOT's ``PruneLowMagnitude.get_config`` stores ``pruning_schedule.get_config()`` itself (no module)."""
    config = S.prune_low_magnitude(L.Dense(3)).get_config()
    config["pruning_schedule"] = S.PolynomialDecay(0.0, 0.5, 0, 10, frequency=2).get_config()
    wrapper = S.PruneLowMagnitude.from_config(config)
    assert wrapper.pruning_schedule == S.PolynomialDecay(0.0, 0.5, 0, 10, frequency=2)


def test_the_callback_hooks_take_tfmots_arguments() -> None:
    """TFMOT: ``UpdatePruningStep.on_train_begin(self, logs=None)``, ``on_epoch_end(self, batch, logs=None)``;
    ``PruningSummaries.on_epoch_begin(self, epoch, logs=None)``."""
    end = inspect.signature(S.UpdatePruningStep.on_epoch_end).parameters
    assert "batch" in end and "logs" in end and "epoch" in end  # TFMOT's keyword, and Keras's positional epoch
    assert list(inspect.signature(S.UpdatePruningStep.on_train_begin).parameters) == ["self", "logs"]
    assert list(inspect.signature(S.PruningSummaries.on_epoch_begin).parameters)[:3] == ["self", "epoch", "logs"]
    layer = S.prune_low_magnitude(L.Dense(4), S.ConstantSparsity(0.5, 0, frequency=1))
    model = keras.Sequential([keras.Input((8,)), layer])
    callback = S.UpdatePruningStep()
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_train_batch_begin(batch=-1)
    model(np.ones((1, 8), np.float32), training=True)
    layer.layer.kernel.assign(layer.layer.kernel + 1.0)  # an optimizer's step moved every latent weight
    callback.on_epoch_end(batch=-1)  # TFMOT's call
    mask = layer.pruning_vars[0][1].numpy().astype(bool)
    assert np.all(layer.layer.kernel.numpy()[~mask] == 0) and np.all(layer.layer.kernel.numpy()[mask] != 0)
    callback.on_epoch_end(0, {})  # Keras's call


def test_tfmots_guide_custom_training_loop_runs_as_written(tmp_path) -> None:
    """The custom loop of TFMOT's comprehensive guide (``step_callback`` / ``log_callback``, ``unused_arg = -1``)."""
    keras.utils.set_random_seed(0)
    base_model = keras.Sequential([keras.Input((8,)), L.Dense(16, activation="relu"), L.Dense(4)])
    model_for_pruning = S.prune_low_magnitude(base_model, S.ConstantSparsity(0.5, 0, frequency=1))
    rng = np.random.default_rng(1)
    x_train = rng.normal(size=(16, 8)).astype(np.float32)
    y_train = keras.utils.to_categorical(rng.integers(0, 4, 16), 4)
    loss = keras.losses.categorical_crossentropy
    optimizer = keras.optimizers.Adam()
    log_dir = str(tmp_path)
    unused_arg = -1
    epochs = 2
    batches = 1

    model_for_pruning.optimizer = optimizer
    step_callback = S.UpdatePruningStep()
    step_callback.set_model(model_for_pruning)
    log_callback = S.PruningSummaries(log_dir=log_dir)
    log_callback.set_model(model_for_pruning)

    step_callback.on_train_begin()
    for _ in range(epochs):
        log_callback.on_epoch_begin(epoch=unused_arg)
        for _ in range(batches):
            step_callback.on_train_batch_begin(batch=unused_arg)
            with tf.GradientTape() as tape:
                logits = model_for_pruning(x_train, training=True)
                loss_value = loss(y_train, logits)
                grads = tape.gradient(loss_value, model_for_pruning.trainable_variables)
                optimizer.apply_gradients(zip(grads, model_for_pruning.trainable_variables))
        step_callback.on_epoch_end(batch=unused_arg)

    for layer in model_for_pruning.layers:
        assert int(layer.pruning_step.numpy()) == epochs * batches
        mask = layer.pruning_vars[0][1].numpy()
        assert (mask == 0).sum() == mask.size - numpy_kept(mask.size, 0.5)
    logged = {}
    for path in (tmp_path / "train").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag.endswith("/sparsity"):
                    logged.setdefault(value.tag, []).append((event.step, float(tf.make_ndarray(value.tensor))))
    assert len(logged) == 2  # one mask a layer, written at each epoch's start (TFMOT's hook)
    for values in logged.values():
        assert values == [(0, 0.0), (1, pytest.approx(0.5))]  # before any step; after the first
