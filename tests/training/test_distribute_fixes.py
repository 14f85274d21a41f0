"""ste's fixes to Keras's ``fit`` under MultiWorkerMirroredStrategy and fresh collective keys for every
MirroredStrategy (both in ste/_patches.py), and the saved training state a resumed run needs
(FlipRatio's state, ste.callbacks.BackupAndRestore). The multi-worker runs themselves are in
tests/reliability/test_processes.py; here: what holds in one process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste import _patches

from . import _models


def test_the_fixes_are_installed_on_this_keras() -> None:
    ste.forward(tf.sign).backward("straight_through")(tf.ones([1]))  # the first op call installs the patches
    assert _patches.CHECKED_KERAS[0] <= _patches._keras_version() <= _patches.CHECKED_KERAS[1]
    assert _patches.installed() == {
        "save_check": True,
        "multi_worker_fit": True,
        "fresh_collective_keys": True,
        "fake_quant_gradient_ops": True,
        "snapshot_gradient": True,
    }
    assert _patches._install_fit_fixes()  # idempotent: installing again wraps nothing twice
    from keras.src.backend.tensorflow import trainer

    assert not hasattr(trainer.reduce_per_replica.__wrapped__, "__wrapped__")


def test_an_unchecked_keras_runs_its_own_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keras, "__version__", "3.99.0")
    assert not _patches._install_fit_fixes()
    monkeypatch.setattr(keras, "__version__", "3.5.0")  # before _maybe_symbolic_build existed
    assert not _patches._install_fit_fixes()


def test_one_worker_is_keras_unchanged() -> None:
    """Without workers (MirroredStrategy over two devices, the default strategy) the fixed reduction is Keras's:
    the mean of the replicas' values, computed here with numpy."""
    from keras.src.backend.tensorflow import trainer

    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert not _patches.multi_worker(strategy) and not _patches.multi_worker(tf.distribute.get_strategy())
    values = strategy.run(lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32))
    logs = trainer.reduce_per_replica({"loss": values}, strategy, "auto")
    assert float(logs["loss"]) == np.mean([0.0, 1.0])
    # one process, no strategy: the symbolic build is Keras's (nothing to do)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    model.fit(np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32), verbose=0)


def test_a_single_worker_multi_worker_strategy_is_not_multi_worker() -> None:
    """MultiWorkerMirroredStrategy without TF_CONFIG is one local worker: Keras's code runs."""
    assert not _patches.multi_worker(tf.distribute.MultiWorkerMirroredStrategy())


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


# -- a damaged backup: ste.errors.BackupError naming the file and what to delete, before any weight changes ---------


def _small(units: int = 2, seed: int = 0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3), keras.layers.Dense(units)])
    model.compile(keras.optimizers.Adam(0.05), "mse")
    return model


_X = np.random.default_rng(1).normal(size=(16, 6)).astype(np.float32)
_Y = np.random.default_rng(2).normal(size=(16, 2)).astype(np.float32)


class _StopAfter(keras.callbacks.Callback):  # type: ignore[misc]
    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch: int, logs: object = None) -> None:
        if epoch + 1 == self.epochs:
            self.model.stop_training = True


def _backup(tmp_path: Path, epochs: int = 2, double_checkpoint: bool = False) -> Path:
    """The backup of a run stopped after ``epochs`` epochs (kept: delete_checkpoint=False)."""
    backup = tmp_path / "backup"
    callback = ste.callbacks.BackupAndRestore(str(backup), double_checkpoint=double_checkpoint, delete_checkpoint=False)
    _small().fit(_X, _Y, batch_size=8, epochs=5, verbose=0, callbacks=[callback, _StopAfter(epochs)])
    return backup


def _damage_weights(path: Path) -> None:
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + b"not an HDF5 file" * 8)


DAMAGES = {
    "garbage-weights": ("latest.weights.h5", _damage_weights),
    "truncated-weights": ("latest.weights.h5", lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
    "broken-json": ("training_metadata.json", lambda p: p.write_text('{"epoch": 2, "batch"')),
    "string-epoch": ("training_metadata.json", lambda p: p.write_text('{"epoch": "2", "batch": 0}')),
    "negative-epoch": ("training_metadata.json", lambda p: p.write_text('{"epoch": -1, "batch": 0}')),
    "no-epoch": ("training_metadata.json", lambda p: p.write_text('{"batch": 0}')),
    "not-an-object": ("training_metadata.json", lambda p: p.write_text("[2, 0]")),
    "weights-missing": ("training_metadata.json", lambda p: (p.parent / "latest.weights.h5").unlink()),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_backup_is_refused_before_any_weight_changes(tmp_path: Path, damage: str) -> None:
    backup = _backup(tmp_path)
    name, make = DAMAGES[damage]
    make(backup / name)
    files = {p.name: p.read_bytes() for p in backup.iterdir()}
    model = _small(seed=3)
    before = [w.numpy() for w in model.weights]
    with pytest.raises(ste.errors.BackupError) as caught:
        model.fit(_X, _Y, batch_size=8, epochs=5, verbose=0, callbacks=[ste.callbacks.BackupAndRestore(str(backup))])
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    for part in (repr(str(backup / name)), f"Fix: delete {str(backup)!r} to start training afresh"):
        assert part in message
    for got, want in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
    assert int(model.optimizer.iterations.numpy()) == 0
    assert {p.name: p.read_bytes() for p in backup.iterdir()} == files  # the backup is left as it was


def test_a_backup_of_another_model_is_refused_and_every_weight_put_back(tmp_path: Path) -> None:
    # the first layer fits and is loaded; the second does not, and Keras raises only after loading the first
    backup = _backup(tmp_path)
    model = _small(units=5, seed=3)
    before = [w.numpy() for w in model.weights]
    callback = ste.callbacks.BackupAndRestore(str(backup))
    with pytest.raises(ste.errors.BackupError) as caught:
        model.fit(_X, np.zeros((16, 5), np.float32), batch_size=8, epochs=5, verbose=0, callbacks=[callback])
    assert "another model wrote it" in str(caught.value) and repr(str(backup / "latest.weights.h5")) in str(
        caught.value
    )
    for got, want in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
    loaded = _small(units=5, seed=3)  # Keras's own load changes the first layer before it fails
    with pytest.raises(ValueError):
        loaded.load_weights(backup / "latest.weights.h5")
    assert not np.array_equal(loaded.weights[0].numpy(), before[0])


def test_an_unreadable_backup_falls_back_to_the_previous_one_as_keras_does(tmp_path: Path) -> None:
    backup = _backup(tmp_path, epochs=3, double_checkpoint=True)
    _damage_weights(backup / "latest.weights.h5")
    keras_copy = tmp_path / "keras_copy"
    keras_copy.mkdir()
    for path in backup.iterdir():
        (keras_copy / path.name).write_bytes(path.read_bytes())
    runs = {}
    for callback in (
        ste.callbacks.BackupAndRestore(str(backup), double_checkpoint=True),
        keras.callbacks.BackupAndRestore(str(keras_copy), double_checkpoint=True),
    ):
        model = _small(seed=3)
        history = model.fit(_X, _Y, batch_size=8, epochs=5, verbose=0, callbacks=[callback])
        runs[type(callback).__module__] = (len(history.history["loss"]), [w.numpy() for w in model.weights])
    (ste_epochs, ste_weights), (keras_epochs, keras_weights) = runs.values()
    assert ste_epochs == keras_epochs == 3  # resumed at the previous backup's epoch 2
    for a, b in zip(ste_weights, keras_weights, strict=True):
        np.testing.assert_array_equal(a, b)
    backup = _backup(tmp_path / "again", epochs=3, double_checkpoint=True)
    _damage_weights(backup / "latest.weights.h5")
    _damage_weights(backup / "latest.weights.h5.bkp")
    callback = ste.callbacks.BackupAndRestore(str(backup), double_checkpoint=True)
    with pytest.raises(ste.errors.BackupError, match="latest.weights.h5"):
        _small().fit(_X, _Y, batch_size=8, epochs=5, verbose=0, callbacks=[callback])


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
    ste.forward(tf.sign).backward("straight_through")(tf.ones([1]))  # the first op call installs the patches
    assert _patches._fresh_keys_installed() and _patches._install_fresh_keys()  # idempotent
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


_STRATEGIES_BEFORE_STE = """
import numpy as np, tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)
import keras, ste
from ste import _patches

devices = ["/cpu:0", "/cpu:1"]
x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
y = np.random.default_rng(1).normal(size=(8, 2)).astype("float32")
first = tf.distribute.MirroredStrategy(devices)  # a float model's strategy: no ste layer yet in this process
first.run(tf.function(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.ones((3,)))))
second = tf.distribute.MirroredStrategy(devices)  # built before ste's first layer, as in `with strategy.scope():`
assert not _patches.installed()["fresh_collective_keys"]


def model():
    keras.utils.set_random_seed(3)
    net = keras.Sequential([keras.Input((4,)), ste.layers.QuantDense(2, kernel_quantizer="sign")])
    net.compile(keras.optimizers.SGD(0.1), "mse")
    return net


with second.scope():
    distributed = model()
distributed.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
single = model()
single.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
assert first.extended._collective_key_base == 0  # it had launched a collective: its keys are left as they were
print("DIFF", max(float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(single.weights, distributed.weights)))
"""


def test_a_strategy_built_before_stes_first_layer_gets_fresh_keys_in_its_scope() -> None:
    """A process runs a collective under one MirroredStrategy, builds a second, and creates ste's first layer in the
    second's scope (the patch is installed then, after both were built). Without fresh keys for the second, its
    first collective meets the first one's record ("Shape mismatch in the collective instance 100"). Reference: the
    same model fit on one device, whose step on the same global batch the two replicas' step equals."""
    done = subprocess.run(
        [sys.executable, "-c", _STRATEGIES_BEFORE_STE],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("DIFF")]
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    assert float(lines[0].split()[1]) <= 1e-6
