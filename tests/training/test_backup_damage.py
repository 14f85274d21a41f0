"""``ste.callbacks.BackupAndRestore`` with a damaged backup: an ``ste.errors.BackupError`` naming the file, weights
unchanged (docs/distributed.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

import ste
from tests.helpers import expect_ste_error


def _fitted_backup(tmp_path: Path) -> tuple[keras.Model, Path, Any]:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    x, y = np.ones((8, 4), "float32"), np.ones((8, 2), "float32")
    backup = tmp_path / "backup"
    model.fit(
        x, y, epochs=1, verbose=0, callbacks=[ste.callbacks.BackupAndRestore(str(backup), delete_checkpoint=False)]
    )
    return model, backup, (x, y)


def _resume(model: keras.Model, backup: Path, data: Any) -> None:
    model.fit(*data, epochs=2, verbose=0, callbacks=[ste.callbacks.BackupAndRestore(str(backup))])


@pytest.mark.parametrize(
    "damage", ["garbage_weights", "broken_json", "string_epoch", "negative_epoch", "missing_weights"]
)
def test_backup_damaged_is_a_backup_error_naming_the_file(tmp_path: Path, damage: str) -> None:
    model, backup, data = _fitted_backup(tmp_path)
    files = sorted(p.name for p in backup.iterdir())
    weights = next(backup / f for f in files if f.endswith(".h5"))
    meta = next(backup / f for f in files if f.endswith(".json"))
    before = [np.asarray(v).copy() for v in model.weights]
    if damage == "garbage_weights":
        weights.write_bytes(b"\x00garbage" * 50)
    elif damage == "broken_json":
        meta.write_text("{not json")
    elif damage == "string_epoch":
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "epoch": "3"}))
    elif damage == "negative_epoch":
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "epoch": -2}))
    else:
        weights.unlink()
    error = expect_ste_error(lambda: _resume(model, backup, data), str(backup))
    assert isinstance(error, ste.errors.BackupError)
    for a, b in zip(before, model.weights):
        np.testing.assert_array_equal(a, np.asarray(b))
