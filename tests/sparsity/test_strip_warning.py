"""strip_pruning names every pruned layer whose masks hold fewer zeros than its schedule targets (one warning;
strict=True raises ste.errors.PruningTargetError), with the zeros reached, the target and the cause; a layer that
reached its target strips silently. Targets are counted with numpy: n − max(round(n·(1 − s)), 1) zeros of n weights
(blocks), s from the schedule's formula written out here (TFMOT's pruning_schedule.py)."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from .test_masks import numpy_kept

S = ste.sparsity
DTYPES = ["float16", "bfloat16", "float32", "float64"]


def zeros_for(size: int, sparsity: float) -> int:
    return size - numpy_kept(size, sparsity)


def polynomial(step: int, initial: float, final: float, begin: int, end: int, power: float) -> float:
    p = min(max((step - begin) / (end - begin), 0.0), 1.0)
    return final + (initial - final) * (1 - p) ** power


def model_of(dtype: str = "float32") -> keras.Model:
    keras.utils.set_random_seed(0)
    dense = keras.layers.Dense
    return keras.Sequential(
        [keras.Input((8,)), dense(12, dtype=dtype, name="first"), dense(4, dtype=dtype, name="second")]
    )


def trained(schedule: S.PruningSchedule, steps: int, dtype: str = "float32", **settings) -> keras.Model:
    pruned = S.prune_low_magnitude(model_of(dtype), schedule, **settings)
    pruned.compile(keras.optimizers.SGD(0.01), "mse")
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(8 * steps, 8)).astype(np.float32), rng.normal(size=(8 * steps, 4)).astype(np.float32)
    pruned.fit(x, y, batch_size=8, verbose=0, callbacks=[S.UpdatePruningStep()])
    assert int(pruned.layers[0].pruning_step.numpy()) == steps
    return pruned


def strip_quietly(model):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        return S.strip_pruning(model)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_default_frequency_with_a_short_run_warns_naming_every_layer_and_strict_raises(dtype: str) -> None:
    pruned = trained(S.ConstantSparsity(0.5, begin_step=0), steps=20, dtype=dtype)  # frequency=100 by default
    with pytest.warns(UserWarning) as caught:
        stripped = S.strip_pruning(pruned)
    messages = [str(w.message) for w in caught if "strip_pruning" in str(w.message)]
    assert len(messages) == 1  # one warning for the model
    (text,) = messages
    for name, size in (("prune_low_magnitude_first", 96), ("prune_low_magnitude_second", 48)):
        assert (
            f"'{name}' (Dense) kernel: 0 of {size} weights zero (0.0 %), target {zeros_for(size, 0.5)} (50.0 %)" in text
        )
    assert "trained 20 step(s)" in text and "first update is at step 100" in text and "frequency=100" in text
    assert "Fix:" in text and "frequency" in text.split("Fix:")[1]
    assert all(np.count_nonzero(layer.kernel.numpy() == 0) == 0 for layer in stripped.layers)  # stripped as it is
    with pytest.raises(S.PruningTargetError, match="strict=True") as error:
        S.strip_pruning(pruned, strict=True)
    assert isinstance(error.value, ste.STEError) and isinstance(error.value, ValueError)
    assert "prune_low_magnitude_first" in str(error.value) and "Fix:" in str(error.value)


def test_a_layer_that_reached_its_target_strips_silently() -> None:
    pruned = trained(S.ConstantSparsity(0.5, 0, frequency=1), steps=3)
    stripped = strip_quietly(pruned)
    assert np.count_nonzero(stripped.layers[0].kernel.numpy() == 0) == zeros_for(96, 0.5)


def test_a_finished_polynomial_schedule_is_held_to_its_last_update() -> None:
    """end_step − begin_step = 10 is not a multiple of frequency = 4: the last update is at step 8, a little below
    final_sparsity (TFMOT's tutorial schedules end so); the layer reached what its schedule set, so no warning."""
    pruned = trained(S.PolynomialDecay(0.2, 0.8, begin_step=0, end_step=10, power=3, frequency=4), steps=10)
    last = polynomial(8, 0.2, 0.8, 0, 10, 3)
    assert zeros_for(96, last) < zeros_for(96, 0.8)  # the case is the one described
    stripped = strip_quietly(pruned)
    assert np.count_nonzero(stripped.layers[0].kernel.numpy() == 0) == zeros_for(96, last)


def test_a_polynomial_schedule_stopped_before_end_step_is_held_to_its_final_sparsity() -> None:
    pruned = trained(S.PolynomialDecay(0.0, 0.8, begin_step=0, end_step=100, power=3, frequency=2), steps=10)
    reached = zeros_for(96, polynomial(10, 0.0, 0.8, 0, 100, 3))
    assert np.count_nonzero(pruned.layers[0].pruning_vars[0][1].numpy() == 0) == reached
    with pytest.warns(UserWarning, match="before end_step=100") as caught:
        S.strip_pruning(pruned)
    text = str(caught[0].message)
    assert f"kernel: {reached} of 96 weights zero" in text and f"target {zeros_for(96, 0.8)} (80.0 %)" in text
    assert "train until end_step" in text


def test_mask_updates_that_did_not_run_are_named() -> None:
    """A custom loop that advances the step but calls the model without training=True: the schedule updated the
    masks (on paper) at every step, and they hold no zero."""
    pruned = S.prune_low_magnitude(model_of(), S.ConstantSparsity(0.5, 0, frequency=1))
    callback = S.UpdatePruningStep()
    callback.set_model(pruned)
    callback.on_train_begin()
    for batch in range(5):
        callback.on_train_batch_begin(batch)
        pruned(np.ones((2, 8), np.float32), training=False)
    with pytest.raises(S.PruningTargetError, match="the updates did not run") as error:
        S.strip_pruning(pruned, strict=True)
    assert "training=True" in str(error.value).split("Fix:")[1]


def test_n_by_m_is_held_to_m_zeros_in_every_n() -> None:
    pruned = trained(S.ConstantSparsity(0.5, 0), steps=6, sparsity_m_by_n=(2, 4))
    with pytest.warns(UserWarning, match=r"sparsity_m_by_n=\(2, 4\)") as caught:
        S.strip_pruning(pruned)
    assert "kernel: 0 of 96 weights zero (0.0 %), target 48 (50.0 %)" in str(caught[0].message)
    strip_quietly(trained(S.ConstantSparsity(0.5, 0, frequency=1), steps=2, sparsity_m_by_n=(2, 4)))


def test_blocks_are_counted_as_blocks() -> None:
    pruned = trained(S.ConstantSparsity(0.5, 0, frequency=50), steps=4, block_size=(2, 2))
    with pytest.warns(UserWarning) as caught:
        S.strip_pruning(pruned)
    text = str(caught[0].message)
    assert (
        f"'prune_low_magnitude_first' (Dense) kernel: 0 of 24 blocks zero (0.0 %), target {zeros_for(24, 0.5)}" in text
    )
    reached = trained(S.ConstantSparsity(0.5, 0, frequency=1), steps=1, block_size=(2, 2))
    stripped = strip_quietly(reached)
    assert np.count_nonzero(stripped.layers[0].kernel.numpy() == 0) == 4 * zeros_for(24, 0.5)


def test_a_schedule_that_never_updates_is_named() -> None:
    pruned = trained(S.ConstantSparsity(0.5, 0, end_step=30, frequency=100), steps=40)
    with pytest.warns(UserWarning, match=r"never updates the masks: its first update step 100 .* after end_step=30"):
        S.strip_pruning(pruned)


def test_nothing_is_checked_before_the_schedule_begins() -> None:
    strip_quietly(S.prune_low_magnitude(model_of(), S.ConstantSparsity(0.5, 0)))  # never trained
    strip_quietly(trained(S.ConstantSparsity(0.5, begin_step=50, frequency=1), steps=10))  # before begin_step


def test_a_single_wrapper_is_checked_too() -> None:
    layer = S.prune_low_magnitude(keras.layers.Dense(4, name="alone"), S.ConstantSparsity(0.75, 0))
    layer.build((None, 8))
    layer.pruning_step.assign(7)  # seven training steps ran; the first update is at step 100
    with pytest.warns(UserWarning, match=r"'prune_low_magnitude_alone' \(Dense\) kernel: 0 of 32 weights zero"):
        plain = S.strip_pruning(layer)
    assert type(plain) is keras.layers.Dense


def test_a_schedule_class_of_your_own_is_not_checked() -> None:
    class Mine(S.ConstantSparsity):
        def __call__(self, step):
            return tf.constant(False), tf.constant(0.9)

    strip_quietly(trained(Mine(0.9, 0, frequency=1), steps=3))


def test_strict_must_be_a_bool() -> None:
    with pytest.raises(ste.errors.ParameterError, match="strict must be True or False"):
        S.strip_pruning(model_of(), strict="yes")
