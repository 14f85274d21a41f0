"""A pruned model saved and loaded keeps training where it stopped: ``.keras`` (schedules in TFMOT's config format
round-trip) and legacy ``.h5`` (``model.save("x.h5")`` / ``keras.models.load_model``), whose loader Keras 3 builds the
optimizer without the model's variables ("Unknown variable" at the first step). The masks after the reload follow
the schedule's formula at the continued step (numpy counts)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import ste

from .test_masks import numpy_kept

S = ste.sparsity
L = keras.layers


def polynomial(step: int) -> float:
    """PolynomialDecay(0.0, 0.8, begin_step=0, end_step=12, power=1): TFMOT's formula."""
    return 0.8 * min(step / 12, 1.0)


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(32, 8)).astype(np.float32), rng.normal(size=(32, 3)).astype(np.float32)


def pruned_and_trained(steps: int) -> keras.Model:
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), L.Dense(16, activation="relu"), L.Dense(3)])
    pruned = S.prune_low_magnitude(model, S.PolynomialDecay(0.0, 0.8, begin_step=0, end_step=12, power=1, frequency=1))
    pruned.compile(keras.optimizers.SGD(0.01, momentum=0.9), keras.losses.MeanSquaredError())
    x, y = data()
    pruned.fit(x[: 8 * steps], y[: 8 * steps], batch_size=8, verbose=0, callbacks=[S.UpdatePruningStep()])
    return pruned


def assert_at_step(model: keras.Model, step: int) -> None:
    for layer in model.layers:
        assert int(layer.pruning_step.numpy()) == step
        mask = layer.pruning_vars[0][1].numpy().astype(bool)
        assert (~mask).sum() == mask.size - numpy_kept(mask.size, polynomial(step))
        assert np.all(layer.layer.kernel.numpy()[~mask] == 0)


@pytest.mark.parametrize("suffix", ["keras", "h5"])
def test_a_reloaded_pruned_model_keeps_training_where_it_stopped(tmp_path, suffix: str) -> None:
    pruned = pruned_and_trained(steps=3)
    assert_at_step(pruned, 3)
    path = str(tmp_path / f"pruned.{suffix}")
    pruned.save(path)
    loaded = keras.models.load_model(path)
    x, y = data()
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), pruned.predict(x, verbose=0))
    for old, new in zip(pruned.layers, loaded.layers):
        assert new.pruning_schedule == old.pruning_schedule
        np.testing.assert_array_equal(new.pruning_vars[0][1].numpy(), old.pruning_vars[0][1].numpy())
    if suffix == "h5":
        with pytest.warns(UserWarning, match=r"legacy \.h5 file.*continues from step 3.*Fix: save to \.keras"):
            loaded.fit(x[:16], y[:16], batch_size=8, verbose=0, callbacks=[S.UpdatePruningStep()])
    else:
        loaded.fit(x[:16], y[:16], batch_size=8, verbose=0, callbacks=[S.UpdatePruningStep()])
    assert_at_step(loaded, 5)  # two more steps on the schedule, not a restart at step 1
    assert int(loaded.optimizer.iterations.numpy()) == 5
