"""Flip ratio: ``metrics=["flip_ratio"]`` on quantized layers, against a numpy count of changed signs per step."""

from __future__ import annotations

import itertools
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

from . import _models


def test_flip_ratio_metric_on_its_own():
    metric = ste.metrics.FlipRatio()
    sequence = [np.array([1.0, -1.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0, -1.0]), np.array([1.0, 1.0, 1.0, -1.0])]
    for values in sequence:
        metric.update_state(values)
    expected = np.mean([np.mean(a != b) for a, b in itertools.pairwise(sequence)])  # (0.5 + 0) / 2
    assert float(metric.result()) == pytest.approx(expected)
    metric.reset_state()
    metric.update_state(np.array([-1.0, 1.0, 1.0, -1.0]))  # compared with the values kept across the reset
    assert float(metric.result()) == pytest.approx(0.25)
    levels = ste.metrics.FlipRatio()  # multi-bit levels are compared exactly (larq's int8 cast would not)
    levels.update_state([0.0, 1 / 3, 2 / 3])
    levels.update_state([0.0, 2 / 3, 2 / 3])
    assert float(levels.result()) == pytest.approx(1 / 3)


class _RecordSigns(keras.callbacks.Callback):
    def __init__(self, layer_name):
        super().__init__()
        self.layer_name, self.signs, self.epoch_ends = layer_name, [], []

    def _record(self):
        kernel = self.model.get_layer(self.layer_name).kernel.numpy()
        self.signs.append(np.where(kernel >= 0, 1.0, -1.0))

    def on_train_begin(self, logs=None):
        self._record()

    def on_train_batch_end(self, batch, logs=None):
        self._record()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_ends.append(len(self.signs) - 1)


@pytest.mark.parametrize("optimizer", ["bop", "adam"])
def test_fit_logs_the_mean_fraction_of_flipped_kernel_signs_under_the_layer_name(optimizer):
    x, _, y, _ = _models.digits()
    model = _models.binarized_mlp(hidden=16, metrics=["flip_ratio"])
    chosen = _models.bop_adam(gamma=1e-2) if optimizer == "bop" else keras.optimizers.Adam(0.05)
    model.compile(chosen, "sparse_categorical_crossentropy")
    recorder = _RecordSigns("binary_1")
    history = model.fit(x[:192], y[:192], batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[recorder])
    assert "flip_ratio/binary_1" in history.history and "flip_ratio/binary_2" not in history.history
    signs, ends = recorder.signs, recorder.epoch_ends  # signs[t]: the kernel after step t (signs[0]: initial)
    flips = [np.mean(signs[j] != signs[j - 1]) for j in range(1, len(signs))]
    # The forward pass of step t quantizes signs[t − 1]; it is compared with step t − 1's, from step 2 on.
    expected = [np.mean(flips[0 : ends[0] - 1]), np.mean(flips[ends[0] - 1 : ends[1] - 1])]
    np.testing.assert_allclose(history.history["flip_ratio/binary_1"], expected, rtol=1e-6)
    assert max(expected) > 0


def test_flip_ratio_is_off_by_default_and_validated():
    model = _models.binarized_mlp(hidden=8)
    assert not [m for m in model.metrics if m.name.startswith("flip_ratio")]
    for bad in (["accuracy"], "flip_ratio", [3]):
        with pytest.raises(ste.errors.ParameterError, match="metrics"):
            ste.layers.QuantDense(4, kernel_quantizer="ste_sign", metrics=bad)


def test_flip_ratio_not_updated_outside_training_and_named_per_kernel():
    layer = ste.layers.QuantSeparableConv2D(
        4,
        3,
        depthwise_quantizer="ste_sign",
        pointwise_quantizer="ste_sign",
        metrics=["flip_ratio"],
        depthwise_constraint="weight_clip",
        pointwise_constraint="weight_clip",
        name="sep",
    )
    x = tf.random.normal((2, 6, 6, 3))
    layer(x)
    layer(x, training=False)
    _ = layer.quantized_kernels
    names = sorted(m.name for m in layer.metrics)
    assert names == ["flip_ratio/sep/depthwise_kernel", "flip_ratio/sep/pointwise_kernel"]
    assert all(float(m._count.numpy()) == 0 and float(m._has_previous.numpy()) == 0 for m in layer.metrics)
    layer(x, training=True)
    layer(x, training=True)
    assert all(float(m._count.numpy()) == 1 and float(m.result()) == 0 for m in layer.metrics)


def test_flip_ratio_layer_saves_and_loads(tmp_path):
    model = _models.binarized_mlp(hidden=8, metrics=["flip_ratio"])
    assert model.get_layer("binary_1").get_config()["metrics"] == ["flip_ratio"]
    assert "metrics" not in model.get_layer("binary_2").get_config()
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert [m.name for m in loaded.get_layer("binary_1").metrics] == ["flip_ratio/binary_1"]


def test_flip_ratio_reaches_tensorboard(tmp_path):
    pytest.importorskip("tensorboard", reason="keras.callbacks.TensorBoard needs the tensorboard package (test extra)")
    x, _, y, _ = _models.digits()
    model = _models.binarized_mlp(hidden=8, metrics=["flip_ratio"])
    model.compile(keras.optimizers.Adam(0.05), "sparse_categorical_crossentropy")
    model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0, callbacks=[keras.callbacks.TensorBoard(tmp_path)])
    tags = set()
    for event_file in Path(tmp_path, "train").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            tags.update(value.tag for value in event.summary.value)
    assert "epoch_flip_ratio/binary_1" in tags
