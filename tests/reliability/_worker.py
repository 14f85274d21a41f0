"""Subprocess entry points for test_processes.py (not a test module).

    python _worker.py multiworker OUT.json          # one MultiWorkerMirroredStrategy worker (TF_CONFIG from env)
    python _worker.py determinism OUT.json SEED     # a seeded training run with op determinism enabled
    python _worker.py load KERAS_DIR MODULE_DIR INPUTS.npz OUT.npz   # load exports WITHOUT ever importing ste

Results are written to files; stdout/stderr are only for diagnostics.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _hex_weights(model: Any) -> dict[str, str]:
    import numpy as np

    return {v.path: np.asarray(v.numpy()).tobytes().hex() for v in model.weights}


def multiworker(out: str) -> None:
    import keras
    import tensorflow as tf

    sys.path.insert(0, HERE)
    import models

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = models.make_model(0)
        optimizer = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    x, y = models.make_data(64)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).with_options(options)
    distributed = strategy.experimental_distribute_dataset(dataset)
    initial = {v.path: v.numpy().tolist() for v in model.weights}

    # Keras 3.15's model.fit cannot run under MultiWorkerMirroredStrategy (its symbolic build reduces a PerReplica
    # batch eagerly and fails), so the steps are TensorFlow's own custom-loop engine: strategy.run + all-reduce.
    @tf.function
    def step(batch: Any) -> tf.Tensor:
        def replica(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                per_example = loss_fn(yb, model(xb, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=16)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.reduce("SUM", strategy.run(replica, args=batch), axis=None)

    losses = [float(step(batch)) for _ in range(2) for batch in distributed]

    # The same steps on one device (outside the strategy): the same global batches, the same mean loss.
    single = models.make_model(0)
    single_optimizer = keras.optimizers.SGD(0.05)

    @tf.function
    def single_step(xb: tf.Tensor, yb: tf.Tensor) -> None:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(yb, single(xb, training=True)))
        grads = tape.gradient(loss, single.trainable_variables)
        single_optimizer.apply_gradients(zip(grads, single.trainable_variables))

    for _ in range(2):
        for xb, yb in dataset:
            single_step(xb, yb)
    with open(out, "w") as f:
        json.dump(
            {
                "hex": _hex_weights(model),
                "initial": initial,
                "final": {v.path: v.numpy().tolist() for v in model.weights},
                "one_device": {v.path: w.numpy().tolist() for v, w in zip(model.weights, single.weights, strict=True)},
                "losses": losses,
                "task": json.loads(os.environ["TF_CONFIG"])["task"]["index"],
            },
            f,
        )


def determinism(out: str, seed: int) -> None:
    import keras
    import tensorflow as tf

    sys.path.insert(0, HERE)
    import models

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(seed)  # before the layers exist: Dropout/GaussianNoise draw their seeds when built
    model = models.compile_model(
        models.make_model(seed, extra_layers=(keras.layers.Dropout(0.2), keras.layers.GaussianNoise(0.1)))
    )
    keras.utils.set_random_seed(seed)
    x, y = models.make_data(96)
    model.fit(x, y, batch_size=16, epochs=2, shuffle=True, verbose=0)
    prediction = model.predict(x[:8], verbose=0)
    with open(out, "w") as f:
        json.dump({"hex": _hex_weights(model), "prediction": prediction.tobytes().hex()}, f)


class _BlockSte(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "ste" or name.startswith("ste."):
            raise ImportError(f"this process must not import ste (tried to import {name!r})")
        return None


def load(keras_dir: str, module_dir: str, inputs: str, out: str) -> None:
    sys.meta_path.insert(0, _BlockSte())
    import numpy as np
    import tensorflow as tf

    data = np.load(inputs)
    results: dict[str, Any] = {}

    exported = tf.saved_model.load(keras_dir)
    x = tf.constant(data["keras_x"])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = exported.serve(x)
    results["keras_y"] = y.numpy()
    results["keras_gx"] = tape.gradient(y, x, output_gradients=tf.constant(data["keras_dy"])).numpy()

    module = tf.saved_model.load(module_dir)
    x = tf.constant(data["module_x"])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = module(x)
    gx, gw = tape.gradient(y, [x, module.w], output_gradients=tf.constant(data["module_dy"]))
    results.update(module_y=y.numpy(), module_gx=gx.numpy(), module_gw=gw.numpy())
    assert "ste" not in sys.modules and not any(name.startswith("ste.") for name in sys.modules)
    results["ste_imported"] = np.array(False)
    np.savez(out, **results)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    mode, *args = sys.argv[1:]
    if mode == "multiworker":
        multiworker(args[0])
    elif mode == "determinism":
        determinism(args[0], int(args[1]))
    elif mode == "load":
        load(*args)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
