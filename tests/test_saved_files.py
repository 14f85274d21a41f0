"""``.keras`` files written by ste 0.1.0 (``tests/data/saved``) load in this ste and compute what they computed then.

The expected outputs and input gradients in ``expected.npz`` were computed by the ste that wrote the files
(``tests/data/saved/write.py``), so they are a reference independent of the code that loads them: every class and
function a file names must still be found by its Keras registration name, with the same weights and state.
"""

from __future__ import annotations

import os
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.helpers import run_python

SAVED = Path(__file__).parent / "data" / "saved"
EXPECTED = dict(np.load(SAVED / "expected.npz"))


def _output_and_gradient(fn, x):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
        weights = tf.reshape(tf.cast(tf.range(1, tf.size(y) + 1), y.dtype), tf.shape(y))
        loss = tf.reduce_sum(y * weights)
    return y.numpy(), tape.gradient(loss, xt).numpy()


@pytest.mark.parametrize("name", ["ops", "layers", "qat", "pruned", "clustered", "spiking"])
def test_a_saved_keras_file_loads_with_safe_mode_and_computes_as_before(name):
    model = keras.models.load_model(SAVED / f"{name}.keras")  # safe_mode: only registered names, no code
    x = EXPECTED[f"{name}_x"]
    y, dx = _output_and_gradient(lambda t: model(t, training=False), x)
    np.testing.assert_allclose(y, EXPECTED[f"{name}_y"], rtol=1e-6, atol=1e-6)
    # float32 gradients summed in the CPU kernels' order, which oneDNN changes (a spiking gradient, summed over
    # time steps: 3e-5 relative between oneDNN on and off)
    np.testing.assert_allclose(dx, EXPECTED[f"{name}_dx"], rtol=1e-4, atol=1e-6)


def test_saved_ste_layers_and_wrappers_load_as_ste_classes():
    model = keras.models.load_model(SAVED / "layers.keras")
    kinds = {type(layer) for layer in model.layers}
    assert {ste.layers.QuantConv2D, ste.layers.QuantDense, ste.layers.BatchNormalization} <= kinds
    pruned = keras.models.load_model(SAVED / "pruned.keras")
    assert any(isinstance(layer, ste.sparsity.PruneLowMagnitude) for layer in pruned.layers)
    clustered = keras.models.load_model(SAVED / "clustered.keras")
    assert any(isinstance(layer, ste.clustering.ClusterWeights) for layer in clustered.layers)
    spiking = keras.models.load_model(SAVED / "spiking.keras")
    assert isinstance(spiking.get_layer("lif"), ste.spiking.LIF)
    assert spiking.get_layer("lif").surrogate == ste.registry.get("atan(alpha=2.0)")


def test_every_saved_file_loads_in_a_fresh_process_after_a_plain_import_ste(tmp_path):
    """``import ste`` registers the classes of every family with Keras (docs/saving.md): a new interpreter that imports
    nothing else of ste loads each file, as a user's loading script does, and computes the stored outputs."""
    names = ["ops", "layers", "qat", "pruned", "clustered", "spiking"]
    script = (
        "import sys, keras, numpy as np, ste\n"
        "expected = np.load(sys.argv[1] + '/expected.npz')\n"
        f"outputs = {{name: np.asarray(keras.models.load_model(f'{{sys.argv[1]}}/{{name}}.keras')"
        f"(expected[name + '_x'], training=False)) for name in {names!r}}}\n"
        "np.savez('outputs.npz', **outputs)\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = run_python(["-c", script, SAVED], tmp_path, env=env, timeout=300)
    outputs = np.load(done.directory / "outputs.npz")
    assert sorted(outputs) == sorted(names)
    for name in names:
        np.testing.assert_allclose(outputs[name], EXPECTED[f"{name}_y"], rtol=1e-6, atol=1e-6, err_msg=name)


def _configs() -> dict[str, str]:
    import zipfile

    return {path.stem: zipfile.ZipFile(path).read("config.json").decode() for path in sorted(SAVED.glob("*.keras"))}


def test_the_kept_files_are_what_this_version_writes():
    """The kept files are this version's output (tests/data/saved/write.py, rerun before a release): every ste module
    a file names exists here, and the clustered file names the modules and the cluster_centroids_init spelling that
    write.py's model of this version has, so no file holds a spelling that only an earlier pre-release wrote."""
    import importlib.util
    import json
    import re

    configs = _configs()
    modules = sorted({m for text in configs.values() for m in re.findall(r'"module": "(ste[^"]*)"', text)})
    assert modules and [m for m in modules if importlib.util.find_spec(m) is None] == []
    spec = importlib.util.spec_from_file_location("saved_write", SAVED / "write.py")
    assert spec is not None and spec.loader is not None
    write = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(write)
    now = json.dumps(write.clustered_model().get_config())
    for pattern in (r'"module": "(ste[^"]*)"', r'"cluster_centroids_init": "([^"]*)"'):
        assert sorted(set(re.findall(pattern, configs["clustered"]))) == sorted(set(re.findall(pattern, now)))
