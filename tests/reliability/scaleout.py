"""The networks and training runs of the scale-out tests (issue 20): one process, replicas, workers.

Self-contained (imported by path in the worker subprocesses of test_processes.py, and as a package module by the
in-process replica tests). Three networks, each trained by Keras ``fit`` and by a custom loop with
``strategy.run``:

- ``binary``: a binarized conv net (LSQ on its input, ``ste.layers`` convolutions with ste_sign, flip-ratio
  metrics, synchronized ``ste.layers.BatchNormalization``), trained by ``CaseOptimizer(Bop, Adam)``; Bop's gamma
  scheduled by step;
- ``lsq``: PACT and LSQ (learned clipping level and step) before binarized dense layers (models.make_model), SGD;
- ``spiking``: LIF neurons with a learnable β over 6 time steps, Adam.

A run's result is its weights keyed ``layer/variable``, its logs (``fit``) or metric results (custom loop).
"""

from __future__ import annotations

import contextlib
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import ste

try:
    from . import models
except ImportError:  # imported by path in a worker subprocess
    import models  # type: ignore[no-redef]

NETS = ("binary", "lsq", "spiking")
GLOBAL_BATCH = 16
STEPS = 10
# The custom loops' last global batch: 6 examples (3 per worker; 2, 2, 1, 1 over 4 replicas) for the spiking net; 4
# (evenly split) where LSQ quantizes activations: its gradient scale counts a replica's elements x replicas, which is
# off for an uneven split (ste.quantizers.LSQ's docstring, docs/distributed.md).
UNEVEN = {"binary": 4, "lsq": 4, "spiking": 6}


def make_net(kind: str, synchronized: bool = True, seed: int = 3) -> keras.Model:
    keras.utils.set_random_seed(seed)
    if kind == "binary":
        binary = dict(kernel_quantizer="ste_sign", kernel_constraint="weight_clip", metrics=["flip_ratio"])
        return keras.Sequential(
            [
                keras.Input((6, 6, 2)),
                ste.quantizers.LSQ(bits=4, name="lsq"),  # a learned step, initialised from the first batch
                ste.layers.QuantConv2D(6, 3, use_bias=False, name="conv1", **binary),
                ste.layers.BatchNormalization(synchronized=synchronized, name="bn1"),
                ste.layers.QuantConv2D(6, 3, use_bias=False, input_quantizer="ste_sign", name="conv2", **binary),
                ste.layers.BatchNormalization(synchronized=synchronized, name="bn2"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(3, name="head"),
            ]
        )
    if kind == "lsq":
        return models.make_model(seed, lsq=True, pact=True)
    if kind == "spiking":
        return keras.Sequential(
            [
                keras.Input((6, 8)),
                keras.layers.Dense(12, name="current"),
                ste.spiking.LIF(beta=0.8, threshold=0.5, learn_beta=True, name="lif"),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(3, name="head"),
            ]
        )
    raise ValueError(kind)


def make_optimizer(kind: str) -> keras.optimizers.Optimizer:
    if kind == "binary":
        bop = ste.optimizers.Bop(threshold=1e-5, gamma=1e-2, name="bop")
        return ste.optimizers.CaseOptimizer(
            (ste.optimizers.Bop.is_binary_variable, bop), default_optimizer=keras.optimizers.Adam(0.01, name="adam")
        )
    if kind == "lsq":  # SGD: Adam divides by the root of tiny second moments, which amplifies rounding differences
        return keras.optimizers.SGD(0.05)
    return keras.optimizers.Adam(0.01)


def bop_of(model: keras.Model) -> Any:
    """The Bop inside the binary net's CaseOptimizer."""
    return model.optimizer.optimizers[0]


def gamma_schedule(step: int) -> float:
    """Bop's gamma by step (HyperparameterScheduler, update_freq="step"): its position must survive a restart."""
    return 1e-2 * 0.9**step


def scheduler(model: keras.Model) -> keras.callbacks.Callback:
    return ste.callbacks.HyperparameterScheduler(gamma_schedule, "gamma", bop_of(model), update_freq="step")


def make_data(kind: str, n: int = GLOBAL_BATCH * STEPS, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = {"binary": (6, 6, 2), "lsq": (8,), "spiking": (6, 8)}[kind]
    x = rng.normal(size=(n, *shape)).astype(np.float32)
    flat = x.reshape(n, -1)
    y = np.argmax(flat[:, :3] + 0.5 * flat[:, 3:6], axis=1).astype(np.int32)
    return x, y


def dataset(kind: str, n: int = GLOBAL_BATCH * STEPS) -> tf.data.Dataset:
    """Global batches of GLOBAL_BATCH in a fixed order; split between the replicas of all workers by ``DATA``
    sharding (each worker gets its part of every global batch, as one process sees the whole)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices(make_data(kind, n)).batch(GLOBAL_BATCH).with_options(options)


def _scope(strategy: tf.distribute.Strategy | None) -> Any:
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


def loss_fn() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def compiled(kind: str, strategy: tf.distribute.Strategy | None, synchronized: bool = True) -> keras.Model:
    with _scope(strategy):
        model = make_net(kind, synchronized)
        model.compile(make_optimizer(kind), loss_fn())
    return model


def weights_of(model: keras.Model) -> dict[str, np.ndarray]:
    return models.weights_of(model)


def flip_ratios(model: keras.Model) -> dict[str, float]:
    return {m.name: float(m.result()) for layer in model.layers for m in getattr(layer, "_flip_ratios", {}).values()}


def callbacks(kind: str, model: keras.Model) -> list[keras.callbacks.Callback]:
    return [scheduler(model)] if kind == "binary" else []


def fit(
    kind: str,
    strategy: tf.distribute.Strategy | None,
    epochs: int = 1,
    extra_callbacks: tuple[keras.callbacks.Callback, ...] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """``model.fit`` for ``epochs`` epochs of STEPS global batches; weights and the last epoch's logs."""
    model = compiled(kind, strategy, **kwargs)
    everything = [*callbacks(kind, model), *extra_callbacks]
    history = model.fit(dataset(kind), epochs=epochs, verbose=0, callbacks=everything)
    return {"weights": weights_of(model), "logs": {k: v[-1] for k, v in history.history.items()}}


def custom_loop(kind: str, strategy: tf.distribute.Strategy | None) -> dict[str, Any]:
    """A custom loop with ``strategy.run`` (one process: plain calls). The loss is divided by the global batch size,
    all-reduced from the replicas' sizes, so an uneven last batch is averaged over its real size (what the
    tf.distribute custom-training guide does): the same mean loss as one process."""
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = make_net(kind)
        optimizer = make_optimizer(kind)
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    bop = optimizer.optimizers[0] if kind == "binary" else None

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        global_size = context.all_reduce("SUM", tf.shape(x)[0])
        with tf.GradientTape() as tape:
            losses = per_example(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(losses, global_batch_size=global_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    batches = strategy.experimental_distribute_dataset(dataset(kind, GLOBAL_BATCH * STEPS + UNEVEN[kind]))

    @tf.function(input_signature=[batches.element_spec])  # one trace for the full and the last, partial batches
    def step(batch: Any) -> tf.Tensor:
        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    losses = []
    for batch in batches:
        if bop is not None:  # the schedule fit's callback applies, by Bop's own step count
            bop.gamma.assign(gamma_schedule(int(bop.iterations.numpy())))
        losses.append(float(step(batch)))
    return {
        "weights": weights_of(model),
        "logs": {"loss": float(np.mean(losses)), **flip_ratios(model)},
        "losses": losses,
    }


def as_lists(result: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready copy of a run's result."""
    return {**result, "weights": {k: np.asarray(v).tolist() for k, v in result["weights"].items()}}


def assert_same(actual: dict[str, Any], expected: dict[str, Any], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Equal weights (1e-5 relative, float32) and equal logs (the loss, the flip ratios, what both runs log)."""
    assert actual["weights"].keys() == expected["weights"].keys()
    for key, value in expected["weights"].items():
        np.testing.assert_allclose(actual["weights"][key], value, rtol=rtol, atol=atol, err_msg=key)
    flips = {k for k in expected["logs"] if k.startswith("flip_ratio")}
    assert flips <= actual["logs"].keys(), "the flip ratios must be logged by both runs"
    for key in expected["logs"].keys() & actual["logs"].keys():
        value = expected["logs"][key]
        np.testing.assert_allclose(actual["logs"][key], value, rtol=rtol, atol=atol, err_msg=key)
