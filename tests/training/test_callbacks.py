"""ste.callbacks.HyperparameterScheduler (larq's callback on Keras 3), on Bop inside a CaseOptimizer and on Adam."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import ste
from ste.callbacks import HyperparameterScheduler

from . import _models


class _Record(keras.callbacks.Callback):
    def __init__(self, read):
        super().__init__()
        self.read, self.values = read, []

    def on_train_batch_end(self, batch, logs=None):
        self.values.append(self.read())


def _fit(model, optimizer, callbacks, epochs=3, n=96):
    x, _, y, _ = _models.digits()
    model.compile(optimizer, "sparse_categorical_crossentropy")
    return model.fit(x[:n], y[:n], batch_size=32, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)


def test_epoch_schedule_sets_bop_gamma_inside_a_case_optimizer_and_logs_it():
    optimizer = _models.bop_adam(gamma=1e-2)
    bop = optimizer.optimizers[0]
    schedule = [0.05, 0.01, 0.0, 0.0]  # gamma 0 freezes Bop's momentum, so the kernels stop flipping
    scheduler = HyperparameterScheduler(lambda epoch: schedule[epoch], "gamma", bop, log_name="bop_gamma")
    record = _Record(lambda: float(bop.gamma.numpy()))
    model = _models.binarized_mlp(hidden=16, metrics=["flip_ratio"])
    history = _fit(model, optimizer, [scheduler, record], epochs=4)
    np.testing.assert_allclose(history.history["bop_gamma"], schedule, rtol=1e-6)
    np.testing.assert_allclose(record.values, np.repeat(schedule, 3), rtol=1e-6)  # 3 steps per epoch
    flips = history.history["flip_ratio/binary_1"]
    # The first step of epoch 2 still sees the last flips of epoch 1 (gamma 0.01); from then on nothing flips.
    assert flips[0] > 0 and flips[3] == 0.0


def test_step_schedule_with_the_current_value_on_the_default_optimizer_learning_rate():
    optimizer = _models.bop_adam(lr=0.01)
    adam = optimizer.optimizers[1]

    def halve(step, current):
        return 0.01 if step == 0 else current / 2

    record = _Record(lambda: float(adam.learning_rate.numpy()))
    scheduler = HyperparameterScheduler(halve, "learning_rate", adam, update_freq="step")
    _fit(_models.binarized_mlp(hidden=8), optimizer, [scheduler, record], epochs=2)
    np.testing.assert_allclose(record.values, [0.01 / 2**k for k in range(6)], rtol=1e-6)
    assert float(optimizer.learning_rate.numpy()) == pytest.approx(0.01 / 2**5)  # the default optimizer's


def test_default_optimizer_is_the_models_and_bad_hyperparameters_fail_when_training_starts():
    scheduler = HyperparameterScheduler(lambda epoch: 0.1 / (epoch + 1), "learning_rate")
    history = _fit(_models.binarized_mlp(hidden=8), keras.optimizers.SGD(0.5), [scheduler], epochs=2)
    np.testing.assert_allclose(history.history["learning_rate"], [0.1, 0.05], rtol=1e-6)
    for hyperparameter, optimizer in [
        ("beta_1", keras.optimizers.Adam()),  # a Python float, baked into the traced step
        ("gamma", keras.optimizers.Adam()),  # absent
        ("gamma", ste.optimizers.Bop(gamma=keras.optimizers.schedules.ExponentialDecay(1e-3, 10, 0.5))),
    ]:
        model = _models.binarized_mlp(hidden=8)
        with pytest.raises(ste.errors.ParameterError, match=hyperparameter):
            _fit(model, optimizer, [HyperparameterScheduler(lambda epoch: 0.1, hyperparameter)], epochs=1)
    with pytest.raises(ste.errors.ParameterError, match="update_freq"):
        HyperparameterScheduler(lambda epoch: 0.1, "gamma", update_freq="batch")
