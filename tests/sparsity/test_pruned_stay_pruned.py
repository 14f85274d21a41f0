"""With gradient="masked", a pruned weight stays pruned and exactly zero: the docs' promise (docs/sparsity.md,
"Gradients") checked step by step with optimizers whose state keeps moving a weight after its gradient stops (SGD
with momentum, Adam), in every float dtype, in a custom loop and in fit.

The reference is numpy: at each update the mask keeps the k = max(round(n·(1 − s)), 1) largest |w · previous mask|,
a weight the previous mask pruned ranking below every kept one (stable order: the earlier index first on ties)."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .test_masks import numpy_kept

S = ste.sparsity
DTYPES = ["float16", "bfloat16", "float32", "float64"]


def numpy_update(w: np.ndarray, previous: np.ndarray, sparsity: float) -> np.ndarray:
    """The documented rule, written from the docs: re-zero with the previous mask, pruned weights rank last."""
    scores = np.where(previous, np.abs(w.astype(np.float64)), -1.0).ravel()
    keep = np.zeros(scores.size, bool)
    keep[np.argsort(-scores, kind="stable")[: numpy_kept(scores.size, sparsity)]] = True
    return keep.reshape(w.shape)


def model_of(dtype: str, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    layers = keras.layers
    return keras.Sequential(
        [keras.Input((8,)), layers.Dense(24, activation="tanh", dtype=dtype), layers.Dense(3, dtype=dtype)]
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adam"])
def test_a_pruned_weight_never_comes_back_and_each_update_follows_the_rule(dtype: str, optimizer: str) -> None:
    # Dense warm-up (steps 1-5) builds optimizer state; then the sparsity rises every step and every 3rd step.
    schedule = S.PolynomialDecay(0.2, 0.8, begin_step=6, end_step=40, power=1, frequency=1)
    pruned = S.prune_low_magnitude(model_of(dtype), schedule)
    wrapper = pruned.layers[0]
    opt = keras.optimizers.SGD(0.05, momentum=0.9) if optimizer == "sgd_momentum" else keras.optimizers.Adam(0.02)
    callback = S.UpdatePruningStep()
    callback.set_model(pruned)
    callback.on_train_begin()
    rng = np.random.default_rng(1)
    target = rng.normal(size=(8, 3))
    previous = np.ones(wrapper.layer.kernel.shape, bool)
    moved = 0
    for batch in range(48):
        x = rng.normal(size=(16, 8)).astype(np.float32)
        before = tf.cast(wrapper.layer.kernel, tf.float64).numpy()
        moved += int(np.count_nonzero(before[~previous]))  # latent pruned weights the optimizer moved off zero
        callback.on_train_batch_begin(batch)
        with tf.GradientTape() as tape:
            out = tf.cast(pruned(tf.constant(x, dtype), training=True), tf.float32)
            loss = tf.reduce_mean(tf.square(out - x @ target.astype(np.float32)))
        opt.apply(tape.gradient(loss, pruned.trainable_variables), pruned.trainable_variables)
        mask = wrapper.pruning_vars[0][1].numpy().astype(bool)
        should, sparsity = schedule(tf.constant(batch + 1))
        if bool(should):
            np.testing.assert_array_equal(mask, numpy_update(before, previous, float(sparsity)))
            assert (~mask).sum() == mask.size - numpy_kept(mask.size, float(sparsity))
        assert not np.any(mask & ~previous), f"step {batch + 1}: a pruned weight came back"
        previous = mask
    if (dtype, optimizer) != ("bfloat16", "adam"):  # Keras's Adam leaves a bfloat16 weight without gradient at 0
        assert moved > 0  # the optimizer moved pruned latent weights: the rule, not a still optimizer, kept them out
    callback.on_epoch_end(batch=0)
    kernel = tf.cast(wrapper.layer.kernel, tf.float64).numpy()
    assert np.all(kernel[~previous] == 0) and (~previous).sum() == previous.size - numpy_kept(previous.size, 0.8)


def test_in_fit_with_momentum_no_pruned_weight_comes_back() -> None:
    """A user's case: fit, SGD with momentum, masks recomputed at every step after a dense start."""
    pruned = S.prune_low_magnitude(model_of("float32", seed=3), S.ConstantSparsity(0.5, begin_step=5, frequency=1))
    pruned.compile(keras.optimizers.SGD(0.05, momentum=0.9), "mse")
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(64, 8)).astype(np.float32), rng.normal(size=(64, 3)).astype(np.float32)
    history: list[np.ndarray] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            history.append(pruned.layers[0].pruning_vars[0][1].numpy().astype(bool).copy())

    pruned.fit(x, y, batch_size=8, epochs=8, verbose=0, callbacks=[S.UpdatePruningStep(), Record()])
    assert len(history) == 64
    first = history[4]  # step 5: the first update
    assert (~first).sum() == first.size - numpy_kept(first.size, 0.5)
    for step, (earlier, later) in enumerate(itertools.pairwise(history), start=2):
        assert not np.any(later & ~earlier), f"step {step}: {int(np.sum(later & ~earlier))} pruned weights came back"
    stripped = S.strip_pruning(pruned)
    np.testing.assert_array_equal(stripped.layers[0].kernel.numpy() == 0, ~history[-1])


def test_a_falling_sparsity_lets_weights_back_at_zero() -> None:
    """The promise holds while the scheduled sparsity does not fall: when it falls, the weights let back are the
    earliest pruned ones (ties at rank −1, earlier index first) and start from 0."""

    class Falling(S.ConstantSparsity):
        def __call__(self, step):
            return tf.constant(True), tf.where(tf.cast(step, tf.int64) <= 1, 0.75, 0.25)

    layer = S.prune_low_magnitude(keras.layers.Dense(4), Falling(0.5, 0, frequency=1))
    layer.build((None, 4))
    w = layer.layer.kernel.numpy()
    callback = S.UpdatePruningStep()
    callback.set_model(keras.Sequential([keras.Input((4,)), layer]))
    callback.on_train_begin()
    callback.on_train_batch_begin(0)
    layer(np.ones((1, 4), np.float32), training=True)
    first = layer.pruning_vars[0][1].numpy().astype(bool)
    np.testing.assert_array_equal(first, numpy_update(w, np.ones_like(first), 0.75))
    callback.on_train_batch_begin(1)
    layer(np.ones((1, 4), np.float32), training=True)
    second = layer.pruning_vars[0][1].numpy().astype(bool)
    np.testing.assert_array_equal(second, numpy_update(w * first, first, 0.25))
    assert np.all(first <= second) and np.all(layer.layer.kernel.numpy()[second & ~first] == 0)
