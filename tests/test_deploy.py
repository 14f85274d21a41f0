"""1-bit deployment with Larq Compute Engine (LCE): ste's sign quantizers are written in the pattern LCE's converter
matches, and a binarized ``ste.layers`` network exported with ``model.export`` converts to bit-packed ``LceBconv2d``
ops that compute what Keras computes."""

from __future__ import annotations

import collections
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.deploy_size import flatbuffer_ops  # noqa: E402

SIGN_QUANTIZERS = ["sign", "ste_sign", "approx_sign", "swish_sign", "sign(surrogate='sigmoid_surrogate(beta=4)')"]
FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


def graph_nodes(fn, x):
    """Every node of ``fn``'s traced graph, the bodies of its functions included (custom gradients live there)."""
    graph = tf.function(fn).get_concrete_function(x).graph.as_graph_def()
    return list(graph.node) + [node for f in graph.library.function for node in f.node_def]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", SIGN_QUANTIZERS)
def test_sign_forward_is_select_of_scalar_constants(name, dtype):
    """LCE matches SelectV2(x >= 0, 1, -1) with scalar constants; tf.sign or ones_like tensors stay float."""
    quantizer = ste.quantizers.get(name)
    nodes = graph_nodes(quantizer, tf.TensorSpec((2, 3), dtype))
    ops = collections.Counter(node.op for node in nodes)
    assert ops["SelectV2"] + ops["Select"] == 1
    assert not {"Sign", "OnesLike", "Fill", "Neg"} & set(ops), ops
    by_name = {node.name: node for node in nodes}
    (select,) = (node for node in nodes if node.op in ("Select", "SelectV2"))
    condition, then, other = (by_name[i.split(":")[0].lstrip("^")] for i in select.input)
    assert condition.op == "GreaterEqual"
    for node, value in ((then, 1.0), (other, -1.0)):
        assert node.op == "Const"
        constant = tf.make_ndarray(node.attr["value"].tensor)
        assert constant.shape == () and float(constant) == value
    # the values are unchanged (the gradients are checked in all four dtypes in tests/quantizers/test_binary.py)
    x = tf.constant([-2.0, -1.0, -0.25, 0.0, 0.5, 3.0], dtype)
    np.testing.assert_array_equal(quantizer(x).numpy().astype(np.float64), [-1, -1, -1, 1, 1, 1])


# ------------------------------------------------------------------------------------------------ LCE conversion

INTERPRETER = """
import importlib.util, pathlib, sys
import numpy as np
spec = importlib.util.find_spec("larq_compute_engine")  # not imported: its __init__ needs TensorFlow
wrapper = pathlib.Path(spec.submodule_search_locations[0]) / "tflite" / "python"
sys.path.insert(0, str(wrapper))
import interpreter_wrapper_lite
interpreter = interpreter_wrapper_lite.LiteInterpreter(pathlib.Path(sys.argv[1]).read_bytes(), 1, False, False, False)
x = np.load(sys.argv[2])
np.save(sys.argv[3], np.concatenate([interpreter.predict([x[i : i + 1]])[0] for i in range(len(x))]))
"""


def lce_python() -> str | None:
    """A Python that can run LCE's interpreter: it needs numpy < 2 (its wrapper reads numpy 1's array layout).

    ``STE_LCE_PYTHON``, else ``.venv-lce/bin/python`` in the repository, else this Python if its numpy is < 2.
    Make one with: ``python3 -m venv .venv-lce && .venv-lce/bin/pip install "numpy<2" tqdm flatbuffers
    && .venv-lce/bin/pip install --no-deps larq-compute-engine``.
    """
    candidates = [os.environ.get("STE_LCE_PYTHON"), str(ROOT / ".venv-lce/bin/python")]
    for candidate in candidates:
        if candidate and shutil.which(candidate):
            return candidate
    return sys.executable if int(np.__version__.split(".")[0]) < 2 else None


def binarized_net() -> keras.Model:
    """Two binary convolutions (one with pad_values=1.0), a float depthwise convolution and a float Dense head."""
    keras.utils.set_random_seed(0)
    binary = dict(input_quantizer="ste_sign", kernel_quantizer="ste_sign", kernel_constraint="weight_clip")
    inputs = keras.Input((12, 12, 3))
    h = ste.layers.QuantConv2D(16, 3, padding="same", pad_values=1.0, use_bias=False, name="b1", **binary)(inputs)
    h = keras.layers.BatchNormalization(name="bn1")(h)
    h = ste.layers.QuantConv2D(
        16, 3, strides=2, use_bias=False, name="b2", **{**binary, "kernel_quantizer": "magnitude_aware_sign"}
    )(h)
    h = keras.layers.BatchNormalization(name="bn2")(h)
    h = keras.layers.DepthwiseConv2D(3, padding="same", name="depthwise")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    outputs = keras.layers.Dense(10, name="head")(h)
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(1)
    for name in ("bn1", "bn2"):
        gamma, beta, _, var = (w.numpy() for w in model.get_layer(name).weights)
        # b1's outputs are sums of 27 ±1 (odd), b2's of 144 α-scaled ±1: a mean of 0.5 keeps every value feeding a
        # sign away from 0, where folding batch norm into the convolution could flip it
        model.get_layer(name).set_weights([rng.uniform(0.5, 2, gamma.shape), 0 * beta, 0.5 + 0 * var, var + 1])
    return model


def _warnings_seen(caplog, capfd) -> list[str]:
    """The Python log records at WARNING or above, and TensorFlow's unsaved-gradients notice in the process's
    stderr (TensorFlow writes some notices there directly), since the last call; both captures are emptied."""
    seen = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]
    seen += [line for line in capfd.readouterr().err.splitlines() if "unsaved custom gradients" in line]
    caplog.clear()
    return seen


def test_the_documented_lce_path_logs_no_warning(tmp_path, caplog, capfd):
    """``model.export`` then LCE's ``convert_saved_model`` (docs/deploying.md) logs no warning, in particular not
    TensorFlow's notice that a gradient "will likely fail", which would contradict the docs (the export keeps the
    custom gradients). The control: the same net saved without its gradient functions and loaded as TensorFlow
    loads a SavedModel logs that notice, and the same capture sees it."""
    lce = pytest.importorskip(
        "larq_compute_engine", reason="larq-compute-engine is not installed (pip install 'ste[deploy]')"
    )
    caplog.set_level(logging.WARNING)
    model = binarized_net()
    _warnings_seen(caplog, capfd)
    model.export(str(tmp_path / "saved"), verbose=False)
    assert b"LceBconv2d" in lce.convert_saved_model(str(tmp_path / "saved"))
    assert _warnings_seen(caplog, capfd) == []
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    tf.saved_model.save(model, str(tmp_path / "no_gradients"), options=options)
    tf.saved_model.load(str(tmp_path / "no_gradients"))
    assert any("unsaved custom gradients" in line for line in _warnings_seen(caplog, capfd))


def test_binarized_net_converts_to_bitpacked_lce_ops_and_matches_keras(tmp_path):
    lce = pytest.importorskip(
        "larq_compute_engine", reason="larq-compute-engine is not installed (pip install 'ste[deploy]')"
    )
    model = binarized_net()
    model.export(str(tmp_path / "saved"), verbose=False)
    flatbuffer = lce.convert_saved_model(str(tmp_path / "saved"))
    ops = flatbuffer_ops(flatbuffer)
    assert b"LceQuantize" in flatbuffer and b"LceBconv2d" in flatbuffer
    assert ops["LceBconv2d"] == 2 and ops["LceQuantize"] >= 1  # both binary convolutions, pad_values=1.0 included
    assert ops["CONV_2D"] == 0  # no float convolution is left for them
    assert ops["PAD"] + ops["PADV2"] == 0  # pad_values=1.0 is fused into LceBconv2d (same-one padding)
    assert ops["DEPTHWISE_CONV_2D"] == 1 and ops["FULLY_CONNECTED"] == 1  # what stays float

    python = lce_python()
    if python is None:
        pytest.skip(
            "flatbuffer checked; the output comparison needs LCE's interpreter, which needs numpy < 2: set "
            "STE_LCE_PYTHON or make .venv-lce (see lce_python in this file)"
        )
    x = np.random.default_rng(2).normal(size=(4, 12, 12, 3)).astype(np.float32)
    (tmp_path / "model.tflite").write_bytes(flatbuffer)
    np.save(tmp_path / "x.npy", x)
    paths = [str(tmp_path / n) for n in ("model.tflite", "x.npy", "y.npy")]
    subprocess.run([python, "-c", INTERPRETER, *paths], check=True, capture_output=True, timeout=120)
    expected = model(x, training=False).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-4)
