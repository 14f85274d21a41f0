"""The spiking layers in every execution mode: tf.function, XLA, model.fit, mixed precision, MirroredStrategy,
.keras save/load and SavedModel export with gradients. Reference: the same computation in eager mode (itself
checked against numpy in test_gradients.py), or one device for the distributed run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

STEPS, FEATURES, CLASSES = 8, 6, 3


def _model(name: str = "snn") -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((STEPS, FEATURES)),
            keras.layers.Dense(12, name="dense_in"),
            ste.spiking.LIF(beta=0.8, learn_beta=True, learn_threshold=True, learn_surrogate=True, name="lif"),
            keras.layers.Dense(CLASSES, name="dense_out"),
            ste.spiking.ALIF(
                beta=0.9, reset="zero", detach_reset=False, surrogate="fast_sigmoid(slope=5)", name="alif"
            ),
        ],
        name=name,
    )


def _neurons_model(name: str = "snn_neurons") -> keras.Model:
    """Every neuron beyond LIF/ALIF: synaptic, recurrent (all-to-all with bias, one-to-one) and a leaky integrator."""
    return keras.Sequential(
        [
            keras.Input((STEPS, FEATURES)),
            keras.layers.Dense(8, name="dense_in"),
            ste.spiking.Synaptic(alpha=0.7, learn_alpha=True, learn_beta=True, name="syn"),
            keras.layers.Dense(6, name="dense_mid"),
            ste.spiking.RLIF(learn_threshold=True, recurrent_bias=True, name="rlif"),
            keras.layers.Dense(6, name="dense_rec"),
            ste.spiking.RSynaptic(all_to_all=False, reset="zero", detach_reset=False, name="rsyn"),
            keras.layers.Dense(CLASSES, name="dense_out"),
            ste.spiking.LI(beta=0.8, learn_beta=True, name="li"),  # membranes as the per-step logits
        ],
        name=name,
    )


MODELS = {"lif-alif": _model, "synaptic-recurrent-li": _neurons_model}
each_model = pytest.mark.parametrize("make", list(MODELS.values()), ids=list(MODELS))


def _data(n: int = 32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = ste.spiking.rate_encode(rng.random((n, FEATURES)).astype("float32"), STEPS, seed=3).numpy()
    return x, rng.integers(0, CLASSES, size=n).astype("int32")


def _loss_and_grads(model: keras.Model, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(ste.spiking.rate_cross_entropy(y, model(x, training=True)))
    return loss, tape.gradient(loss, model.trainable_weights)


@each_model
@pytest.mark.parametrize("jit", [False, True], ids=["tf.function", "jit_compile"])
def test_graph_and_xla_match_eager(make: Any, jit: bool) -> None:
    model = make()
    x, y = (tf.constant(a) for a in _data(8))
    eager_loss, eager_grads = _loss_and_grads(model, x, y)
    loss, grads = tf.function(_loss_and_grads, jit_compile=jit)(model, x, y)
    np.testing.assert_allclose(loss.numpy(), eager_loss.numpy(), rtol=1e-5)
    for g, e, w in zip(grads, eager_grads, model.trainable_weights):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=2e-4, atol=1e-6, err_msg=w.name)


@each_model
def test_fit_trains_every_parameter(make: Any) -> None:
    keras.utils.set_random_seed(0)  # the initial weights do not depend on which tests ran before in this process
    model = make()
    x, y = _data()
    before = [w.numpy().copy() for w in model.trainable_weights]
    model.compile(keras.optimizers.Adam(1e-2), ste.spiking.RateCrossEntropy(), jit_compile=True)
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    for w, b in zip(model.trainable_weights, before):
        assert not np.array_equal(w.numpy(), b), f"{w.name} did not train"


@each_model
def test_mixed_precision_fit(make: Any) -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = make()
        assert all(layer.compute_dtype == "float16" for layer in model.layers)
        x, y = _data()
        model.compile(keras.optimizers.Adam(1e-2), ste.spiking.RateCrossEntropy())
        model.fit(x, y, batch_size=8, epochs=2, verbose=0)
        out = model(x)
        assert out.dtype == "float16" and np.all(np.isfinite(out.numpy()))
        if make is _model:  # spikes at the output
            assert set(np.unique(out.numpy())) <= {0.0, 1.0}
        assert all(w.dtype == "float32" for w in model.weights)
        assert all(np.all(np.isfinite(w.numpy())) for w in model.weights)
    finally:
        keras.mixed_precision.set_global_policy("float32")


@each_model
def test_mirrored_strategy_matches_one_device(make: Any) -> None:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    if len(devices) < 2:
        pytest.skip("needs the two logical CPU devices set up by tests/conftest.py")
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    x, y = _data(16)

    def run(scope: object) -> list[np.ndarray]:
        keras.utils.set_random_seed(1)
        with scope:  # type: ignore[attr-defined]
            model = make()
            model.compile(keras.optimizers.SGD(0.5), ste.spiking.RateCrossEntropy())
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        return [w.numpy() for w in model.weights]

    mirrored = run(strategy.scope())
    single = run(tf.distribute.get_strategy().scope())
    for a, b in zip(mirrored, single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_keras_save_and_load(tmp_path) -> None:
    model = _model()
    x, y = _data(8)
    model.compile(keras.optimizers.Adam(1e-2), ste.spiking.RateCrossEntropy())
    model.fit(x, y, epochs=1, verbose=0)
    path = tmp_path / "snn.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)  # safe_mode: everything is registered, no lambda
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    lif = loaded.get_layer("lif")
    assert lif.surrogate == ste.registry.get("atan(alpha=2.0)") and lif.learned_surrogate == ("alpha",)
    assert loaded.get_layer("alif").cell.get_config() == model.get_layer("alif").cell.get_config()
    assert isinstance(loaded.loss, ste.spiking.RateCrossEntropy)
    for a, b in zip(loaded.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _exported_surrogate_gradient(directory: Path, neuron: dict[str, Any]) -> None:
    """The export's gradient is the live model's."""
    model = keras.Sequential(  # one spiking layer keeps the export short
        [keras.Input((STEPS, FEATURES)), keras.layers.Dense(CLASSES), ste.spiking.LIF(**neuron)]
    )
    x = tf.constant(_data(4)[0])
    path = str(directory / "exported")
    model.export(path, verbose=False)
    restored = tf.saved_model.load(path)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        out, expected = restored.serve(x), model(x)
        weighted = [tf.reduce_sum(o * tf.range(1.0, CLASSES + 1)) for o in (out, expected)]
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    got, want = (tape.gradient(w, x) for w in weighted)
    assert np.any(want.numpy() != 0)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-7)


# every learned parameter (the spike op takes them as inputs); the default spike op, gradient through the reset
EXPORTS = {
    "learned": {"reset": "zero", "learn_beta": True, "learn_threshold": True, "learn_surrogate": True},
    "default": {"reset": "subtract", "detach_reset": False},
}


@pytest.mark.parametrize("case", EXPORTS)
def test_savedmodel_export_keeps_the_surrogate_gradient(case: str, tmp_path: Path) -> None:
    _exported_surrogate_gradient(tmp_path, EXPORTS[case])


def test_forward_mode_matches_reverse_mode() -> None:
    # ForwardAccumulator ignores custom gradients inside functions it does not trace; the JVP through the time loop
    # must still be the surrogate's: <w, J·t> (forward mode) = <Jᵀ·w, t> (reverse mode, checked against numpy BPTT)
    layer = ste.spiking.LIF(reset="subtract", detach_reset=False)
    x = tf.random.stateless_normal((2, STEPS, 3), seed=(1, 2), mean=0.8)
    t, w = tf.random.stateless_normal((2, 2, STEPS, 3), seed=(3, 4))
    for call in (layer, tf.function(lambda z: layer(z))):
        with tf.autodiff.ForwardAccumulator(x, t) as accumulator:
            spikes = call(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            weighted = tf.reduce_sum(call(x) * w)
        forward = float(tf.reduce_sum(accumulator.jvp(spikes) * w))
        assert forward != 0
        np.testing.assert_allclose(forward, float(tf.reduce_sum(tape.gradient(weighted, x) * t)), rtol=1e-5)
