"""``lq.context``: larq 0.14's larq/context_test.py, and what larq documents for ``quantized_scope``: inside
``quantized_scope(True)`` ``model.get_weights()``, ``layer.kernel`` and saving give the quantized kernels; outside,
the latent ones. References: larq 0.14's own outputs (tests/data/larq_reference.json) and numpy's sign."""

from __future__ import annotations

import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
import ste.larq as lq
from ste.larq import context
from tests.larq_port import larq_models
from tests.larq_port.conftest import REFERENCE


def larq_sign(x):
    return np.where(np.asarray(x) >= 0, 1.0, -1.0)


def test_scope():  # larq/context_test.py
    assert context.get_training_metrics() == set()
    with context.metrics_scope(["flip_ratio"]):
        assert context.get_training_metrics() == {"flip_ratio"}
    assert context.get_training_metrics() == set()
    with pytest.raises(ValueError, match=r".*unknown_metric.*"):
        with context.metrics_scope(["flip_ratio", "unknown_metric"]):
            pass


def small_bnn():  # the model of tests/larq_port/make_reference.py
    return larq_models.small_bnn(lq, keras)


def test_get_weights_as_larq_gives_them():
    model = small_bnn()
    reference = REFERENCE["small_bnn"]
    model.set_weights([np.array(w, "float32") for w in reference["latent"]])
    with lq.context.quantized_scope(True):
        quantized = model.get_weights()
        kernel = model.layers[2].kernel.numpy()
    assert len(quantized) == len(reference["quantized"])
    for ours, larqs in zip(quantized, reference["quantized"]):
        np.testing.assert_allclose(ours, larqs, rtol=1e-6)
    np.testing.assert_allclose(kernel, reference["quantized_kernel_of_layer_2"], rtol=1e-6)
    for ours, latent in zip(model.get_weights(), reference["latent"]):  # outside the scope: latent again
        np.testing.assert_array_equal(ours, np.array(latent, "float32"))


def test_layer_kernels_read_quantized_in_the_scope():
    layer = lq.layers.QuantSeparableConv2D(
        4,
        3,
        depthwise_quantizer="ste_sign",
        pointwise_quantizer="ste_tern",
        depthwise_constraint="weight_clip",
        pointwise_constraint="weight_clip",
    )
    layer.build((None, 8, 8, 2))
    depthwise, pointwise = layer.depthwise_kernel.numpy(), layer.pointwise_kernel.numpy()
    tern = np.sign(np.sign(pointwise + 0.05) + np.sign(pointwise - 0.05))  # larq's ste_tern formula
    with lq.context.quantized_scope(True):
        np.testing.assert_array_equal(layer.depthwise_kernel.numpy(), larq_sign(depthwise))
        np.testing.assert_array_equal(np.asarray(layer.pointwise_kernel), tern)
        np.testing.assert_array_equal(tf.identity(layer.depthwise_kernel), larq_sign(depthwise))
        np.testing.assert_array_equal(layer.depthwise_kernel * 3.0, 3.0 * larq_sign(depthwise))
        np.testing.assert_array_equal(layer.depthwise_kernel[0, 0], larq_sign(depthwise)[0, 0])
        np.testing.assert_array_equal(layer.get_weights()[0], larq_sign(depthwise))
        np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(4))  # not a quantized kernel: unchanged
        with lq.context.quantized_scope(False):
            np.testing.assert_array_equal(layer.depthwise_kernel.numpy(), depthwise)
    np.testing.assert_array_equal(layer.depthwise_kernel.numpy(), depthwise)
    np.testing.assert_array_equal(layer.depthwise_kernel + 0.0, depthwise)
    assert layer.depthwise_kernel.precision == 1 and layer.pointwise_kernel.precision == 2
    assert isinstance(layer.depthwise_kernel.quantizer, lq.quantizers.SteSign)


def test_assign_inside_the_scope_changes_the_latent_kernel():
    layer = lq.layers.QuantDense(2, kernel_quantizer="ste_sign", kernel_constraint="weight_clip")
    layer.build((None, 2))
    with lq.context.quantized_scope(True):
        layer.kernel.assign([[0.25, -0.5], [0.75, -1.0]])
        layer.kernel.assign_add(np.full((2, 2), 0.5, "float32"))  # on the latent value, not on the ±1 read
        np.testing.assert_array_equal(layer.kernel.numpy(), [[1, 1], [1, -1]])
    np.testing.assert_array_equal(layer.kernel.numpy(), [[0.75, 0.0], [1.25, -0.5]])


def test_training_is_unaffected_by_the_scope():
    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    y = np.random.default_rng(1).normal(size=(16, 2)).astype("float32")
    results = []
    for scope in (False, True):
        keras.utils.set_random_seed(3)
        model = small_bnn()
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        with lq.context.quantized_scope(scope):
            model.fit(x, y, epochs=2, batch_size=8, verbose=0, shuffle=False)
        results.append(model.get_weights())
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_saving_inside_the_scope_saves_quantized_kernels(tmp_path, suffix):
    model = small_bnn()
    model(np.ones((1, 4), "float32"))
    latent = model.get_weights()
    with lq.context.quantized_scope(True):
        quantized = model.get_weights()
        if suffix == ".keras":
            model.save(tmp_path / f"binary{suffix}")
        else:
            model.save_weights(tmp_path / f"binary{suffix}")
    if suffix == ".keras":
        restored = keras.models.load_model(tmp_path / f"binary{suffix}")
    else:
        restored = small_bnn()
        restored.load_weights(tmp_path / f"binary{suffix}")
    for ours, expected in zip(restored.get_weights(), quantized):
        np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(restored.get_weights()[0], larq_sign(latent[0]))
    model.save_weights(tmp_path / "latent.weights.h5")  # outside: the latent kernels
    restored = small_bnn()
    restored.load_weights(tmp_path / "latent.weights.h5")
    np.testing.assert_array_equal(restored.get_weights()[0], latent[0])


def test_reads_inside_tf_function():
    layer = lq.layers.QuantDense(3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip")
    layer.build((None, 2))

    @tf.function
    def doubled():
        with lq.context.quantized_scope(True):
            return layer.kernel * 2.0

    np.testing.assert_array_equal(doubled(), 2 * larq_sign(layer.kernel.numpy()))


def test_mirrored_strategy():
    # ReductionToOneDevice: a collective all-reduce here would leave instance keys that clash with a later test's
    # MirroredStrategy in the same process (tests/quantizers/test_learned.py's then fails with a shape mismatch)
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    with strategy.scope():
        model = small_bnn()
        model.compile(optimizer="sgd", loss="mse")
    model.fit(x, np.zeros((16, 2), "float32"), epochs=1, batch_size=8, verbose=0)
    latent = model.get_weights()
    with lq.context.quantized_scope(True):
        np.testing.assert_array_equal(model.get_weights()[0], larq_sign(latent[0]))
        # the replica threads of strategy.run see the scope entered around it
        per_replica = strategy.run(lambda: tf.identity(model.layers[0].kernel))
    for value in strategy.experimental_local_results(per_replica):
        np.testing.assert_array_equal(value, larq_sign(latent[0]))
    per_replica = strategy.run(lambda: tf.identity(model.layers[0].kernel))  # and outside it, the latent value
    for value in strategy.experimental_local_results(per_replica):
        np.testing.assert_array_equal(value, latent[0])


def test_scope_is_thread_local():
    seen = []
    with lq.context.quantized_scope(True):
        thread = threading.Thread(target=lambda: seen.append(lq.context.should_quantize()))
        thread.start()
        thread.join()
        assert lq.context.should_quantize()
    assert seen == [False]


def test_scope_takes_booleans_only():
    with pytest.raises(ste.errors.ParameterError, match="True or False"):
        with lq.context.quantized_scope("yes"):
            pass


def test_metrics_scope_adds_flip_ratio_to_layers_built_inside():
    with lq.context.metrics_scope(["flip_ratio"]):
        inside = lq.layers.QuantDense(3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip")
    outside = lq.layers.QuantDense(3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip")
    model = keras.Sequential([keras.Input((4,)), inside, outside])
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(np.ones((8, 4), "float32"), np.zeros((8, 3), "float32"), epochs=1, verbose=0)
    assert [key for key in history.history if key.startswith("flip_ratio")] == [f"flip_ratio/{inside.name}"]
