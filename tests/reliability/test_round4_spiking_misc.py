"""Round-4 outsider review: fused spiking stacks with masks, NIR bad input, damaged backups, CLI arguments
(docs/spiking.md, docs/distributed.md, docs/tools.md). The unfused Keras layers are the reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest

import ste

from .test_round4_tfmot_users import expect_ste_error

ROOT = Path(__file__).resolve().parents[2]


def _pair_models() -> tuple[keras.Model, keras.Model]:
    keras.utils.set_random_seed(3)
    unfused = keras.Sequential(
        [
            keras.Input((12, 6)),
            keras.layers.Masking(0.0),
            keras.layers.Dense(5),
            ste.spiking.LIF(beta=0.8),
            keras.layers.Dense(3),
            ste.spiking.LIF(beta=0.8),
        ]
    )
    for layer in unfused.layers:
        if isinstance(layer, keras.layers.Dense):
            layer.kernel.assign(np.full(layer.kernel.shape, 0.4, "float32"))
    fused = ste.spiking.fuse(unfused)
    return unfused, fused


def test_fused_honours_a_keras_mask_as_the_unfused_layers() -> None:
    unfused, fused = _pair_models()
    assert any(isinstance(layer, ste.spiking.Fused) for layer in fused.layers), [type(x).__name__ for x in fused.layers]
    x = np.random.default_rng(0).uniform(0, 3, (4, 12, 6)).astype("float32")
    x[:, 8:] = 0.0  # padded steps
    x[1, 3] = 0.0  # a masked step in the middle
    want, got = np.asarray(unfused(x)), np.asarray(fused(x))
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.all(got[:, 8:] == 0) and np.all(got[1, 3] == 0)
    assert want[:, :8].sum() > 0  # the test has spikes to compare


def test_fused_refuses_input_without_time_axis() -> None:
    layer = ste.spiking.Fused([ste.spiking.SpikingDense(4, ste.spiking.LIFCell(beta=0.9))])
    expect_ste_error(lambda: layer(np.zeros((3, 6), "float32")))


def test_fused_refuses_a_feature_map_mask() -> None:
    model = keras.Sequential(
        [
            keras.Input((5, 4, 4, 1)),
            keras.layers.Masking(0.0),
            ste.spiking.Fused([ste.spiking.SpikingConv2D(2, 3, ste.spiking.LIFCell(beta=0.9), padding="same")]),
        ]
    )
    expect_ste_error(lambda: model(np.ones((2, 5, 4, 4, 1), "float32")))


nir = pytest.importorskip("nir")


def _lif_graph(**overrides: Any) -> Any:
    params = {
        "tau": np.array([2e-3, 2e-3]),
        "r": np.array([1.0, 1.0]),
        "v_leak": np.zeros(2),
        "v_threshold": np.ones(2),
        "v_reset": np.zeros(2),
    }
    params.update(overrides)
    nodes = {
        "input": nir.Input(input_type=np.array([3])),
        "affine": nir.Affine(weight=np.ones((2, 3)), bias=np.zeros(2)),
        "lif": nir.LIF(**params),
        "output": nir.Output(output_type=np.array([2])),
    }
    edges = [("input", "affine"), ("affine", "lif"), ("lif", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges)


def test_from_nir_reads_integer_parameters() -> None:
    graph = _lif_graph(
        tau=np.array([4, 4]),
        v_threshold=np.array([1, 1]),
        r=np.array([1, 1]),
        v_leak=np.array([0, 0]),
        v_reset=np.array([0, 0]),
    )
    model = ste.spiking.from_nir(graph, dt=1)
    lif = next(layer for layer in model.layers if "LIF" in type(layer).__name__)
    np.testing.assert_allclose(float(np.asarray(lif.beta)), 1 - 1 / 4, rtol=1e-6)  # β = 1 − dt/τ


def test_from_nir_refuses_edge_to_missing_node() -> None:
    graph = _lif_graph()
    graph.edges.append(("lif", "nowhere"))
    expect_ste_error(lambda: ste.spiking.from_nir(graph, dt=1e-3), "nowhere")


def test_from_nir_refuses_non_numeric_parameter() -> None:
    graph = _lif_graph(tau=np.array(["a", "b"]))
    expect_ste_error(lambda: ste.spiking.from_nir(graph, dt=1e-3), "tau")


@pytest.mark.parametrize("dt", [0.0, -1e-3, float("nan"), "1e-3"])
def test_from_nir_refuses_bad_dt(dt: Any) -> None:
    expect_ste_error(lambda: ste.spiking.from_nir(_lif_graph(), dt=dt))


def test_to_nir_li_with_decay_one_round_trips() -> None:
    model = keras.Sequential([keras.Input((7, 3)), keras.layers.Dense(2), ste.spiking.LI(beta=1.0)])
    graph = ste.spiking.to_nir(model, dt=1e-3)
    back = ste.spiking.from_nir(graph, dt=1e-3)
    x = np.random.default_rng(0).normal(size=(2, 7, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(back(x)), np.asarray(model(x)))
    # a perfect integrator: the output is the running sum of the currents
    currents = x @ np.asarray(model.layers[0].kernel) + np.asarray(model.layers[0].bias)
    np.testing.assert_allclose(np.asarray(model(x)), np.cumsum(currents, axis=1), rtol=1e-5, atol=1e-5)


def test_to_nir_refuses_non_model() -> None:
    expect_ste_error(lambda: ste.spiking.to_nir("model", dt=1e-3))


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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-m", "ste", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("check", "atan", "--points", "99999999999999999999"),
        ("check", "atan", "--points", "3000000000"),
        ("check", "atan", "--points", "1"),
        ("check", "atan", "--points", "-5"),
        ("check", "atan", "--points", "abc"),
        ("check", "atan", "--range", "0", "inf"),
        ("check", "atan", "--range", "1", "1"),
        (
            "check",
            "atan(alpha=__import__('os'))",
        ),
        (
            "check",
            "no_such_surrogate",
        ),
        ("plot", "atan", "--points", "99999999999999999999", "-o", "x.png"),
        (
            "show",
            "",
        ),
    ],
)
def test_cli_bad_arguments_are_one_line_errors(args: tuple[str, ...]) -> None:
    result = _cli(*args)
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len([line for line in result.stderr.strip().splitlines() if line.strip()]) <= 3, result.stderr[-2000:]
