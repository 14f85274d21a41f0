"""One side of a ``benchmarks.accuracy`` row, in a fresh process of its own venv (ste's, larq's or TFMOT's).

    python benchmarks/_accuracy_worker.py '{"row": "binary_cnn", "side": "larq", "data": "fashion.npz", ...}'

Only the standard library is imported at the top, so that the peers' venvs (which have no ste) can run it. The side
trains its network epoch by epoch under the parent's lockstep (``qat.WAIT`` / ``go`` / ``qat.DONE``: one side trains
and evaluates while the others wait, in an order that reverses every epoch), then prints one ``RESULT {json}`` line:
the test accuracy after every epoch, the median step time (``fit``'s ``train_function``, from
``on_train_batch_begin`` to ``on_train_batch_end``, the first epoch left out as warm-up), the allocator's peak above
the memory in use before each epoch, and for the QAT sides the int8 TFLite model's figures.

Sides: ``binary_cnn``: ``ste`` (ste.layers on Keras 3), ``larq`` (larq 0.14 on tf-keras), ``float`` (Keras 3);
``int8_qat``: ``ste`` (``ste.quantize_model`` + ``ste.to_tflite``), ``tfmot`` (TFMOT 0.8 on tf-keras, the
converter with ``Optimize.DEFAULT``); ``low_bit``: ``ternary``, ``binary`` (``ste.quantize_model(scheme=...)``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

from _allocator import use_bfc  # this directory is on sys.path when run as a script

use_bfc()  # before TensorFlow is imported: the peak needs the BFC allocator's statistics

from qat import DONE, _barrier, _tflite_figures  # noqa: E402  (qat.py imports only the standard library at the top)

BATCH = 128
INT8_KERNELS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def binary_cnn(keras: Any, conv: Any, norm: Any) -> Any:
    """larq's "BinaryNet on MNIST" layout, sized for 2 CPU cores: a float stem (conv, batch norm, pooling), two binary
    conv blocks (``conv(filters)``: sign of the input, sign of the kernel, weight clip; then pooling and batch norm
    as larq's example orders them) and a float dense head.
    ``conv(filters)`` is ``None`` for the float network (``Conv2D``); ``norm()`` makes each batch norm."""
    L = keras.layers
    inputs = keras.Input((28, 28, 1))
    h = L.Conv2D(32, 3, padding="same", use_bias=False)(inputs)
    h = norm()(h)
    h = L.MaxPooling2D()(h)
    for filters in (64, 64):
        layer = L.Conv2D(filters, 3, padding="same", use_bias=False) if conv is None else conv(filters)
        h = norm()(L.MaxPooling2D()(layer(h)))
    h = L.Flatten()(h)
    return keras.Model(inputs, L.Dense(10)(h), name="binary_cnn")


def small_cnn(keras: Any) -> Any:
    """A small CNN with batch norm and a depthwise convolution (a MobileNet-style separable block), for int8 QAT and
    the low-bit schemes."""
    L = keras.layers
    inputs = keras.Input((28, 28, 1))
    h = L.Conv2D(32, 3, padding="same", use_bias=False)(inputs)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    h = L.MaxPooling2D()(h)
    h = L.DepthwiseConv2D(3, padding="same", use_bias=False)(h)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    h = L.Conv2D(64, 1, use_bias=False)(h)
    h = L.BatchNormalization()(h)
    h = L.ReLU()(h)
    h = L.MaxPooling2D()(h)
    h = L.Flatten()(h)
    return keras.Model(inputs, L.Dense(10)(h), name="small_cnn")


# the pruning and clustering rows: side "LIBRARY_SETTING" -> the setting (sparsity, "2:4", or the cluster count)
COMPRESSION = {
    "pruning": {"50": 0.5, "80": 0.8, "2_4": (2, 4)},
    "clustering": {"16": 16, "32": 32},
}


def network(keras: Any, row: str) -> Any:
    """The row's network: ``benchmarks.sparsity``'s CNN for the pruning and clustering rows, else :func:`small_cnn`."""
    if row in COMPRESSION:
        import sparsity  # benchmarks/sparsity.py (numpy and the standard library at the top)

        return sparsity.cnn(keras)
    return small_cnn(keras)


def _compressed(keras: Any, model: Any, library: str, row: str, config: dict[str, Any]) -> tuple[Any, str]:
    """The float model pruned (``benchmarks.sparsity.prune``: every layer but the first convolution) or clustered
    (every layer, k-means++ centroids), by ste or TFMOT; and the versions string."""
    import sparsity

    setting = COMPRESSION[row][config["side"].split("_", 1)[1]]
    if library == "tfmot":
        import tensorflow_model_optimization as tfmot

        version = f"TFMOT {tfmot.__version__}"
        S, C = tfmot.sparsity.keras, tfmot.clustering.keras
    else:
        import ste

        version = f"ste {ste.__version__}"
        S, C = ste.sparsity, ste.clustering
    if row == "pruning":
        steps = config["epochs"] * config["steps_per_epoch"]
        pattern = setting if isinstance(setting, tuple) else None
        pruned = sparsity.prune(keras, S, model, steps, None if pattern else setting, pattern)
        return pruned, version
    kmeans = C.CentroidInitialization.KMEANS_PLUS_PLUS
    return C.cluster_weights(model, number_of_clusters=setting, cluster_centroids_init=kmeans), version


def _compression_figures(keras: Any, model: Any, config: dict[str, Any], x_test: Any, y_test: Any) -> dict[str, Any]:
    """Stripped model: test accuracy, zeros or distinct values, TFLite sizes raw and gzipped (``sparsity.sizes``)."""
    import clustering
    import sparsity

    library = config["side"].split("_")[0]
    if library == "tfmot":
        import tensorflow_model_optimization as tfmot

        S, C = tfmot.sparsity.keras, tfmot.clustering.keras
    else:
        import ste

        S, C = ste.sparsity, ste.clustering
    stripped = S.strip_pruning(model) if config["row"] == "pruning" else C.strip_clustering(model)
    compile_model(keras, stripped, config["learning_rate"])
    accuracy = float(stripped.evaluate(x_test, y_test, batch_size=1000, verbose=0)[1])
    figures: dict[str, Any] = {"stripped_accuracy": accuracy}
    if config["row"] == "pruning":
        figures["zeros"] = sparsity.zeros(stripped)
    else:
        figures["distinct_values"] = clustering.distinct(stripped)
    figures["tflite"] = sparsity.sizes(stripped, "tfmot" if library == "tfmot" else "ste")
    return figures


def compile_model(keras: Any, model: Any, learning_rate: float) -> None:
    model.compile(
        keras.optimizers.Adam(learning_rate),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def _model(config: dict[str, Any], data: Any) -> tuple[Any, Any, str, Any]:
    """(keras module, model, versions, quantized-export function or None) for the config's row and side."""
    import tensorflow as tf

    row, side = config["row"], config["side"]
    library = side.split("_")[0]  # "ste_50" -> "ste"
    if library in ("larq", "tfmot"):
        import tf_keras

        keras = tf.keras  # tf_keras, under TF_USE_LEGACY_KERAS=1
        version = f"tf-keras {tf_keras.__version__}"
    else:
        import keras

        version = f"Keras {keras.__version__}"
    keras_version = version
    keras.utils.set_random_seed(config["seed"])
    if row == "binary_cnn":
        kwargs = dict(
            padding="same",
            use_bias=False,
            input_quantizer="ste_sign",
            kernel_quantizer="ste_sign",
            kernel_constraint="weight_clip",
        )
        if side == "larq":
            import larq as lq

            version = f"larq {getattr(lq, '__version__', '0.14')}, {version}"
            conv = lambda f: lq.layers.QuantConv2D(f, 3, **kwargs)  # noqa: E731
            norm = lambda: keras.layers.BatchNormalization(scale=False)  # noqa: E731
        elif side == "ste":
            import ste

            version = f"ste {ste.__version__}, {version}"
            conv = lambda f: ste.layers.QuantConv2D(f, 3, **kwargs)  # noqa: E731
            norm = lambda: ste.layers.BatchNormalization(scale=False)  # noqa: E731
        else:
            conv, norm = None, lambda: keras.layers.BatchNormalization(scale=False)
        return keras, binary_cnn(keras, conv, norm), version, None
    model = network(keras, row)
    model.set_weights([data[f"weight_{i}"] for i in range(int(data["weights"]))])
    if row in COMPRESSION:
        compressed, version = _compressed(keras, model, library, row, config)
        return keras, compressed, f"{version}, {keras_version}", None if library == "tfmot" else _ste()
    if side == "tfmot":
        import tensorflow_model_optimization as tfmot

        return keras, tfmot.quantization.keras.quantize_model(model), f"TFMOT {tfmot.__version__}, {version}", None
    import ste

    scheme = "int8" if row == "int8_qat" else side
    return keras, ste.quantize_model(model, scheme=scheme), f"ste {ste.__version__}, {version}", ste


def _epoch(
    keras: Any, model: Any, x: Any, y: Any, callbacks: list[Any] | None = None, shuffle: bool = True
) -> list[float]:
    """One epoch of ``fit`` (``shuffle=False``: in the given order; the timer first, so that the other callbacks'
    batch work is timed); the seconds of each training step."""

    class StepTimer(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.start, self.steps = 0.0, []

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.steps.append(time.perf_counter() - self.start)

    timer = StepTimer()
    model.fit(x, y, epochs=1, batch_size=BATCH, verbose=0, callbacks=[timer, *(callbacks or [])], shuffle=shuffle)
    return timer.steps


def _packed_bytes(ste: Any, model: Any) -> dict[str, Any]:
    """Bytes of the trainable weights with every binary / ternary kernel packed (1 or 2 bits a value, plus a float32
    scale each; ``ste.export_quantized_weights(packed=True)``) and every other weight float32; and all float32."""
    import numpy as np

    float_bytes = sum(int(np.prod(v.shape)) * 4 for v in model.trainable_weights)
    packed, bits = float_bytes, {}
    for layer, kernels in ste.export_quantized_weights(model, packed=True).items():
        for name, entry in kernels.items():
            if isinstance(entry, dict):
                size = int(np.prod(entry["shape"]))
                packed += entry["codes"].nbytes + np.asarray(entry["scale"]).size * 4 - size * 4
                bits[f"{layer}/{name}"] = int(entry["bits"])
            else:
                bits[f"{layer}/{name}"] = 32
    return {"packed_bytes": int(packed), "float32_bytes": int(float_bytes), "kernel_bits": bits}


def _pruning_state_bytes(tf: Any, model: Any) -> int:
    """Bytes of the state the pruning wrappers add to the model (each mask, threshold and step counter), read from
    the variables' shapes and dtypes: TFMOT's and ste's wrappers both list them as ``pruning_vars`` (weight, mask,
    threshold) and ``pruning_step``."""
    import numpy as np

    total = 0
    for layer in model.layers:
        if not hasattr(layer, "pruning_vars"):
            continue
        state = [v for _, mask, threshold in layer.pruning_vars for v in (mask, threshold)] + [layer.pruning_step]
        total += sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in state)
    return total


def _ste() -> Any:
    import ste

    return ste


def _tfmot_sparsity() -> Any:
    import tensorflow_model_optimization as tfmot

    return tfmot.sparsity.keras


def train(
    config: dict[str, Any], keras: Any, model: Any, data: tuple[Any, Any, Any, Any], callbacks: list[Any]
) -> dict[str, Any]:
    """``config["epochs"]`` epochs of ``fit`` under the parent's lockstep, the test accuracy after each; the figures
    every side reports (curve, step times, CPU time per step, allocator peak). ``data``: x_train, y_train, x_test,
    y_test."""
    import tensorflow as tf

    x_train, y_train, x_test, y_test = data
    lockstep = config.get("lockstep", False)
    curve, steps, peaks, cpu = [], [], [], []
    for epoch in range(config["epochs"]):
        _barrier(lockstep)
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        started, cpu_started = time.perf_counter(), time.process_time()
        times = _epoch(keras, model, x_train, y_train, callbacks)
        seconds = time.perf_counter() - started
        if epoch or config["epochs"] == 1:
            cpu.append((time.process_time() - cpu_started) / len(times))
        peaks.append(int(tf.config.experimental.get_memory_info("CPU:0")["peak"] - before))
        steps.append(times if epoch or config["epochs"] == 1 else [])
        accuracy = float(model.evaluate(x_test, y_test, batch_size=1000, verbose=0)[1])
        curve.append({"epoch": epoch + 1, "test_accuracy": accuracy, "seconds": seconds})
        if lockstep:
            print(DONE, flush=True)
    _barrier(lockstep)  # conversion and the final evaluation run with every side idle
    flat = [t for epoch_times in steps for t in epoch_times]
    return {
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", ""),
        "parameters": int(model.count_params()),
        "curve": curve,
        "test_accuracy": curve[-1]["test_accuracy"],
        "median_step_s": statistics.median(flat),
        "epoch_step_s": [statistics.median(times) for times in steps if times],
        "step_samples": len(flat),
        "cpu_per_step_s": statistics.median(cpu),
        "peak_bytes": max(peaks),
    }


def main(config: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import tensorflow as tf

    data = np.load(config["data"])
    x_train = (data["x_train"].astype("float32") / 255.0)[..., None]
    x_test = (data["x_test"].astype("float32") / 255.0)[..., None]
    y_train, y_test = data["y_train"].astype("int32"), data["y_test"].astype("int32")
    keras, model, version, ste = _model(config, data)
    compile_model(keras, model, config["learning_rate"])
    callbacks = []
    if config["row"] == "pruning":
        callbacks.append((ste.sparsity if ste is not None else _tfmot_sparsity()).UpdatePruningStep())
    trained = train(config, keras, model, (x_train, y_train, x_test, y_test), callbacks)
    result: dict[str, Any] = {
        "row": config["row"],
        "side": config["side"],
        "versions": f"{version}, TensorFlow {tf.__version__}",
        **trained,
    }
    if config["row"] == "int8_qat":
        if ste is not None:
            flatbuffer = ste.to_tflite(model)
        else:
            converter = tf.lite.TFLiteConverter.from_keras_model(model)
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            flatbuffer = bytes(converter.convert())
        figures = _tflite_figures(tf, flatbuffer, x_test, y_test)
        interpreter = tf.lite.Interpreter(model_content=flatbuffer)
        inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
        interpreter.resize_tensor_input(inp["index"], list(x_test.shape))
        interpreter.allocate_tensors()
        interpreter.set_tensor(inp["index"], x_test)
        interpreter.invoke()
        tflite_pred = np.argmax(interpreter.get_tensor(out["index"]), axis=1)
        keras_pred = np.argmax(model.predict(x_test, batch_size=1000, verbose=0), axis=1)
        result.update(figures)
        result["keras_tflite_agreement"] = float(np.mean(tflite_pred == keras_pred))
        result["interpreter"] = f"tf.lite.Interpreter (TensorFlow {tf.__version__})"
    if config["row"] == "pruning":
        result["pruning_state_bytes"] = _pruning_state_bytes(tf, model)
    if config["row"] in COMPRESSION:
        result.update(_compression_figures(keras, model, config, x_test, y_test))
    if config["row"] == "low_bit":
        result.update(_packed_bytes(ste, model))
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
