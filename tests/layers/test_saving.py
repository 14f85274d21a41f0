"""Saving and deploying quantized models: ``.keras`` round trip, SavedModel export with custom gradients, TFLite,
and the ``mixed_float16`` policy."""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste


def build_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 2))
    h = ste.layers.QuantConv2D(4, 3, kernel_quantizer="lsq(bits=3)", name="conv")(inputs)
    h = ste.layers.BatchNormalization(name="bn")(h)  # trained on the fused kernel, served by Keras's code
    h = keras.layers.Flatten()(h)
    h = ste.layers.QuantDense(
        8,
        input_quantizer="ste_sign",
        kernel_quantizer="sign(surrogate='approx_sign')",
        kernel_constraint="weight_clip",
        name="binary",
    )(h)
    h = ste.quantizers.PACT(bits=3, alpha=1.0, name="pact")(h)
    outputs = ste.layers.QuantDense(3, input_quantizer="dorefa(bits=2)", kernel_quantizer="ste_tern", name="out")(h)
    return keras.Model(inputs, outputs)


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 6, 6, 2)).astype("float32"), rng.normal(size=(16, 3)).astype("float32")


def outputs_and_gradients(model: keras.Model, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = model(xt, training=False)
        loss = tf.reduce_sum(y * tf.range(1.0, 4.0))
    grads = tape.gradient(loss, [xt, *model.trainable_variables])
    return y.numpy(), [g.numpy() for g in grads]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model = build_model()
    x, y = data()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    path = tmp_path_factory.mktemp("saved")
    return model, x, path


def test_keras_file_round_trip_without_custom_objects(trained):
    model, x, path = trained
    file = str(path / "model.keras")
    model.save(file)
    loaded = keras.models.load_model(file)
    conv = loaded.get_layer("conv")
    assert float(conv.kernel_quantizer.step.numpy()) == float(model.get_layer("conv").kernel_quantizer.step.numpy())
    assert float(conv.kernel_quantizer.initialized.numpy()) == 1.0
    assert float(loaded.get_layer("pact").alpha.numpy()) == float(model.get_layer("pact").alpha.numpy()) != 1.0
    y0, g0 = outputs_and_gradients(model, x)
    y1, g1 = outputs_and_gradients(loaded, x)
    np.testing.assert_array_equal(y0, y1)
    assert len(g0) == len(g1) == 1 + len(model.trainable_variables)
    for a, b in zip(g0, g1):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert any(np.any(g != 0) for g in g1[1:])


def test_fresh_process_exported_gradients_without_ste_then_keras_file_after_importing_ste(trained):
    """The SavedModel's gradients come from the file (ste is not imported yet); the .keras file then loads."""
    model, x, path = trained
    file = str(path / "fresh.keras")
    export_dir = str(path / "fresh_export")
    model.save(file)
    model.export(export_dir, verbose=False)
    np.save(path / "x.npy", x)
    script = (
        "import sys, numpy as np, tensorflow as tf\n"
        f"x = tf.constant(np.load({str(path / 'x.npy')!r}))\n"
        f"served = tf.saved_model.load({export_dir!r})\n"
        "with tf.GradientTape() as tape:\n"
        "    tape.watch(x)\n"
        "    loss = tf.reduce_sum(served.serve(x) * tf.range(1.0, 4.0))\n"
        f"np.save({str(path / 'grad.npy')!r}, tape.gradient(loss, x).numpy())\n"
        "assert 'ste' not in sys.modules\n"
        "import keras, ste\n"
        f"m = keras.models.load_model({file!r})\n"
        f"np.save({str(path / 'y.npy')!r}, m(x, training=False).numpy())\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, capture_output=True, timeout=120)
    expected_y, expected_grads = outputs_and_gradients(model, x)
    np.testing.assert_array_equal(np.load(path / "y.npy"), expected_y)
    grad = np.load(path / "grad.npy")
    assert np.any(grad != 0)  # every quantizer on the path is piecewise constant: no custom gradient, no signal
    np.testing.assert_allclose(grad, expected_grads[0], rtol=1e-5, atol=1e-6)


def test_saved_model_export_keeps_custom_gradients_and_converts_to_tflite(trained):
    model, x, path = trained
    export_dir = str(path / "exported")
    model.export(export_dir, verbose=False)
    reloaded = tf.saved_model.load(export_dir)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = reloaded.serve(xt)
        loss = tf.reduce_sum(y * tf.range(1.0, 4.0))
    grad = tape.gradient(loss, xt)
    expected_y, expected_grads = outputs_and_gradients(model, x)
    np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-6, atol=1e-6)
    # every quantizer on the path is piecewise constant: without the custom gradients this would be all zeros
    assert np.any(grad.numpy() != 0)
    np.testing.assert_allclose(grad.numpy(), expected_grads[0], rtol=1e-5, atol=1e-6)
    graph = reloaded.signatures["serving_default"].graph.as_graph_def()
    op_types = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    assert "ReadVariableOp" in op_types and "AssignVariableOp" not in op_types  # LSQ only reads its step here

    converter = tf.lite.TFLiteConverter.from_saved_model(export_dir)
    interpreter = tf.lite.Interpreter(model_content=converter.convert())
    runner = interpreter.get_signature_runner()
    input_name = next(iter(runner.get_input_details()))
    result = runner(**{input_name: x})
    np.testing.assert_allclose(next(iter(result.values())), expected_y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_mixed_float16_policy(run_eagerly):
    x, y = data()
    reference = build_model()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = build_model()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.set_weights(reference.get_weights())
    assert model.get_layer("binary").kernel.dtype == "float32"
    out = model(x, training=False)
    assert out.dtype == tf.float16
    assert model.get_layer("binary").quantized_kernel.dtype == tf.float32  # read outside call: the latent dtype
    # binary layers and quantized inputs: float16 changes only the rounding of the float32 parts
    np.testing.assert_allclose(
        out.numpy().astype(np.float32), reference(x, training=False).numpy(), rtol=0.05, atol=0.1
    )
    model.compile(keras.optimizers.Adam(0.01), "mse", run_eagerly=run_eagerly)
    history = model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert model.get_layer("conv").kernel_quantizer.step.dtype == "float32"
