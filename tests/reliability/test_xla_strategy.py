"""TPU-readiness on CPU: every registry entry, quantizer and quantized layer (and the spiking layers) runs inside
``strategy.run`` under XLA (a ``tf.function(jit_compile=True)`` around ``strategy.run``, as Keras compiles ``fit``'s
step with ``jit_compile=True``; a jit function created inside the per-replica function cannot read mirrored
variables on CPU: XLA places it on one device). Compiling proves there is no op XLA cannot compile and no host
callback (a ``py_function`` does not compile); each replica gets the same input, so equal results on both replicas
and equal to one device without XLA prove there is no Python-side state that differs across replicas.
Bop's update and FlipRatio's update (variable writes) are compiled by XLA on one device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.references import builtin_names, tf_sign
from tests.test_keras_lookup import LAYERS

_RNG = np.random.default_rng(5)


def _strategy() -> tf.distribute.Strategy:
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def _value_and_grads(fn: Callable[[tf.Tensor], tf.Tensor], variables: list[Any], x: tf.Tensor) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
        weights = tf.sin(tf.cast(tf.reshape(tf.range(tf.size(y)), tf.shape(y)), y.dtype))  # a fixed dL/dy
        loss = tf.reduce_sum(y * weights)
    return [y, *tape.gradient(loss, [x, *variables], unconnected_gradients="zero")]


def _check_under_xla_in_strategy(fn: Callable[[tf.Tensor], tf.Tensor], variables: list[Any], x: np.ndarray) -> None:
    """fn's value and gradients: one device without XLA vs XLA inside strategy.run on 2 replicas."""
    expected = [t.numpy() for t in _value_and_grads(fn, variables, tf.constant(x))]
    strategy = _strategy()

    @tf.function(jit_compile=True)  # as Keras compiles fit's step (jit_compile=True) around strategy.run
    def run(xr: tf.Tensor) -> Any:
        return strategy.run(lambda t: _value_and_grads(fn, variables, t), args=(xr,))

    per_replica = run(tf.constant(x))
    for i, want in enumerate(expected):
        got = [v.numpy() for v in strategy.experimental_local_results(per_replica[i])]
        assert len(got) == 2
        np.testing.assert_array_equal(got[0], got[1])  # nothing differs between the replicas
        # XLA's convolutions and TensorFlow's (oneDNN's, where it is on) sum in other orders: the rounding of a sum
        # scales with its terms, not with its result, so the absolute tolerance scales with the array's magnitude
        # (a QuantConv3D kernel gradient of magnitude 11 had an element of 0.012 off by 1.9e-6 with oneDNN on)
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("name", builtin_names())
def test_every_registry_entry_compiles_in_strategy_run(name: str) -> None:
    op = ste.forward(tf_sign).backward(name)
    _check_under_xla_in_strategy(op, [], _RNG.normal(size=(4, 5)).astype(np.float32))


@pytest.mark.parametrize("name", ste.quantizers.names())
def test_every_quantizer_compiles_in_strategy_run(name: str) -> None:
    # every replica quantizes the same x here: for LSQ that is sharded=False (a sharded LSQ's per-replica step
    # gradient is a shard's, 1/sqrt(replicas) of one device's for the same x, summed across the replicas)
    spec = "lsq(sharded=False)" if name == "lsq" else name
    with _strategy().scope():
        quantizer = ste.quantizers.get(spec)
    x = _RNG.normal(size=(4, 5)).astype(np.float32)
    if isinstance(quantizer, keras.layers.Layer):
        quantizer(x, training=True)  # built and (LSQ) initialised before the compiled steps
    variables = list(getattr(quantizer, "trainable_variables", []))
    _check_under_xla_in_strategy(lambda t: quantizer(t, training=True), variables, x)


def _layers() -> list[str]:
    names = [
        n
        for n in ste.layers.__all__
        if isinstance(getattr(ste.layers, n), type)
        and issubclass(getattr(ste.layers, n), keras.layers.Layer)
        and n.startswith("Quant")
    ]
    return [*names, "BatchNormalization", "LIF", "IF", "ALIF"]


@pytest.mark.parametrize("name", _layers())
def test_every_layer_compiles_in_strategy_run(name: str) -> None:
    with _strategy().scope():
        if name in ("LIF", "IF", "ALIF"):
            layer = getattr(ste.spiking, name)(threshold=0.5, **({"learn_beta": True} if name != "IF" else {}))
            shape: tuple[int, ...] = (2, 5, 4)
        elif name == "BatchNormalization":
            layer, shape = ste.layers.BatchNormalization(synchronized=False), (4, 3, 3, 2)
        else:
            args, shape = LAYERS[name]
            cls = getattr(ste.layers, name)
            quantizers = {slot.quantizer: "ste_sign" for slot in cls.slots}
            quantizers[cls.slots[0].quantizer] = "lsq(bits=3)"
            constraints = {slot.constraint: "weight_clip" for slot in cls.slots}
            layer = cls(*args, input_quantizer="ste_sign", **quantizers, **constraints)
    x = _RNG.normal(size=shape).astype(np.float32)
    layer(x, training=True)  # built, LSQ initialised
    # inference mode for batch norm: its training call writes the moving averages (a variable write, see below)
    training = name != "BatchNormalization"
    _check_under_xla_in_strategy(lambda t: layer(t, training=training), list(layer.trainable_variables), x)


def _bop_and_flip_ratio_steps(jit: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    kernel = keras.Variable(np.where(np.random.default_rng(8).normal(size=(3, 4)) >= 0, 1.0, -1.0).astype(np.float32))
    bop = ste.optimizers.Bop(threshold=1e-3, gamma=0.5)
    bop.build([kernel])
    metric = ste.metrics.FlipRatio()
    metric.build_for((3, 4))
    grad = tf.constant(np.random.default_rng(9).normal(size=(3, 4)).astype(np.float32))

    def step(g: tf.Tensor) -> tf.Tensor:
        bop.apply([g], [kernel])
        metric.update_state(kernel)
        return metric.result()

    compiled = tf.function(step, jit_compile=jit)
    ratios = [compiled(grad * s).numpy() for s in (1.0, -1.0, 1.0)]
    return kernel.numpy(), ratios


def test_bop_and_flip_ratio_updates_compile_with_xla() -> None:
    """Variable writes compile with XLA on one device (on a TPU the whole replica step is compiled); the values equal
    the same updates without XLA."""
    results = [_bop_and_flip_ratio_steps(jit) for jit in (False, True)]
    np.testing.assert_array_equal(results[1][0], results[0][0])
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6)
    assert results[0][1][-1] > 0  # kernels flipped: the compared updates are not trivial


def test_lsq_initialisation_under_xla_in_a_strategy_raises_before_any_write() -> None:
    """The first step's data-dependent initialisation cannot compile under XLA around strategy.run on CPU (it
    writes a mirrored variable across devices): an error that says how to initialise it, before any variable
    changes; once initialised, the same compiled step runs (the quantizer test above)."""
    strategy = _strategy()
    with strategy.scope():
        lsq = ste.quantizers.LSQ(bits=4)
        lsq.build((4, 5))
    run = tf.function(lambda t: strategy.run(lambda u: lsq(u, training=True), args=(t,)), jit_compile=True)
    with pytest.raises(ste.errors.NotBuiltError, match="initialised from the first training batch"):
        run(tf.ones((4, 5)))
    assert float(lsq.initialized.numpy()) == 0.0 and float(lsq.step.numpy()) == 1.0
