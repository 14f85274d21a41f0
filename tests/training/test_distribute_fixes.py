"""ste's fixes to Keras's ``fit`` under MultiWorkerMirroredStrategy (ste/_distribute.py), fresh collective keys
for every MirroredStrategy (ste/_collective_keys.py), and the saved training state a resumed run needs (FlipRatio's
state, ste.callbacks.BackupAndRestore). The multi-worker runs themselves are in tests/reliability/test_processes.py;
here: what holds in one process."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste import _distribute

from . import _models


def test_the_fixes_are_installed_on_this_keras() -> None:
    assert _distribute.CHECKED_KERAS[0] <= _distribute._keras_version() <= _distribute.CHECKED_KERAS[1]
    assert _distribute.installed()
    assert _distribute.install()  # idempotent: installing again wraps nothing twice
    from keras.src.backend.tensorflow import trainer

    assert not hasattr(trainer.reduce_per_replica.__wrapped__, "__wrapped__")


def test_an_unchecked_keras_runs_its_own_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keras, "__version__", "3.99.0")
    assert not _distribute.install()
    monkeypatch.setattr(keras, "__version__", "3.5.0")  # before _maybe_symbolic_build existed
    assert not _distribute.install()


def test_one_worker_is_keras_unchanged() -> None:
    """Without workers (MirroredStrategy over two devices, the default strategy) the fixed reduction is Keras's:
    the mean of the replicas' values, computed here with numpy."""
    from keras.src.backend.tensorflow import trainer

    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert not _distribute.multi_worker(strategy) and not _distribute.multi_worker(tf.distribute.get_strategy())
    values = strategy.run(lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))
    logs = trainer.reduce_per_replica({"loss": values}, strategy, "auto")
    assert float(logs["loss"]) == np.mean([0.0, 1.0])
    # one process, no strategy: the symbolic build is Keras's (nothing to do)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    model.fit(np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32), verbose=0)


def test_a_single_worker_multi_worker_strategy_is_not_multi_worker() -> None:
    """MultiWorkerMirroredStrategy without TF_CONFIG is one local worker: Keras's code runs."""
    assert not _distribute.multi_worker(tf.distribute.MultiWorkerMirroredStrategy())


def _net(metrics: list[str] | None) -> keras.Model:
    keras.utils.set_random_seed(2)
    layer = ste.layers.QuantDense(
        4, kernel_quantizer="ste_sign", kernel_constraint="weight_clip", metrics=metrics, name="q"
    )
    model = keras.Sequential([keras.Input((6,)), layer])
    model.compile("sgd", "mse")
    return model


def _flip_state(model: keras.Model) -> list[np.ndarray]:
    return [v.numpy() for v in model.layers[0]._flip_ratios["kernel"].variables]


def test_flip_ratio_state_is_saved_and_restored(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(32, 6)).astype(np.float32)
    y = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    model = _net(["flip_ratio"])
    model.fit(x, y, batch_size=8, verbose=0)
    saved = _flip_state(model)
    assert saved[1] == 1.0 and saved[3] == 3.0  # compared 3 of the 4 steps (the first only records)
    model.save_weights(tmp_path / "a.weights.h5")
    restored = _net(["flip_ratio"])
    restored.load_weights(tmp_path / "a.weights.h5")
    for got, want in zip(_flip_state(restored), saved, strict=True):
        np.testing.assert_array_equal(got, want)
    # the quantized kernel recorded is the sign of the saved latent kernel: an independent check of what was saved
    np.testing.assert_array_equal(saved[0], np.where(model.layers[0].kernel.numpy() >= 0, 1.0, -1.0))


def test_weights_saved_without_flip_ratio_state_still_load(tmp_path: Path) -> None:
    old = _net(None)
    old.save_weights(tmp_path / "old.weights.h5")
    new = _net(["flip_ratio"])
    new.load_weights(tmp_path / "old.weights.h5")
    np.testing.assert_array_equal(new.layers[0].kernel.numpy(), old.layers[0].kernel.numpy())
    assert _flip_state(new)[1] == 0.0  # nothing recorded yet


def test_backup_and_restore_in_one_process_is_keras_s(tmp_path: Path) -> None:
    """One process: the chief's directory is backup_dir, resumed at the epoch boundary as Keras does."""

    class Stop(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, epoch: int, logs: object = None) -> None:
            if epoch == 2:
                raise RuntimeError("interrupted")

    x = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
    y = np.zeros((16, 4), np.float32)
    backup = str(tmp_path / "backup")
    model = _net(["flip_ratio"])
    with pytest.raises(RuntimeError, match="interrupted"):
        model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[ste.callbacks.BackupAndRestore(backup), Stop()])
    assert json.loads((tmp_path / "backup" / "training_metadata.json").read_text())["epoch"] == 2
    resumed = _net(["flip_ratio"])
    history = resumed.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[ste.callbacks.BackupAndRestore(backup)])
    assert len(history.history["loss"]) == 2  # epochs 2 and 3 only
    straight = _net(["flip_ratio"])
    expected = straight.fit(x, y, batch_size=8, epochs=4, verbose=0)
    np.testing.assert_allclose(resumed.layers[0].kernel.numpy(), straight.layers[0].kernel.numpy(), rtol=1e-6)
    np.testing.assert_allclose(history.history["flip_ratio/q"], expected.history["flip_ratio/q"][2:], rtol=1e-6)
    assert not (tmp_path / "backup").exists()


def _qat_digits_model() -> keras.Model:
    keras.utils.set_random_seed(5)
    i = keras.Input((64,))
    model = keras.Model(i, keras.layers.Dense(10)(keras.layers.Dense(16, activation="relu")(i)))
    q = ste.quantize_model(model, strict=True)
    q.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return q


def test_a_second_mirrored_strategy_with_collective_ops_fits_after_a_first() -> None:
    """Two MirroredStrategy objects with TensorFlow's default collective ops in one process: a flip-ratio model
    fits under the first, then a QAT model (whose activation ranges are gathered across replicas) under the second.
    Each strategy numbered its collectives from the same keys, and the second one's first collective failed against
    the first one's record; with its own keys it runs, and one step on two replicas equals one step on one device."""
    from ste import _collective_keys

    assert _collective_keys.installed() and _collective_keys.install()  # idempotent
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    x, _, y, _ = _models.digits()
    with tf.distribute.MirroredStrategy(devices).scope():  # no cross_device_ops: collective all-reduce
        first = _models.binarized_mlp(hidden=16, metrics=["flip_ratio"])
        first.compile("adam", "sparse_categorical_crossentropy")
    first.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)
    single = _qat_digits_model()
    single.fit(x[:32], y[:32], batch_size=32, epochs=1, shuffle=False, verbose=0)
    with tf.distribute.MirroredStrategy(devices).scope():
        second = _qat_digits_model()
    second.fit(x[:32], y[:32], batch_size=32, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(single.weights, second.weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.path)
