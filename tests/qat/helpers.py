"""Small models and the TFLite reading shared by the QAT tests."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

L = keras.layers


#: TFLite's converter makes a per-channel FULLY_CONNECTED kernel from TensorFlow 2.20 on (2.16 to 2.19 fail with
#: "'tfl.transpose' op has mismatched quantized axes"), so ste's default schemes quantize Dense and EinsumDense per
#: output channel from there, per tensor before.
CONVERTS_PER_CHANNEL = tuple(int(part) for part in tf.__version__.split(".")[:2]) >= (2, 20)


def residual_net(classes: int = 10, dropout: float = 0.1) -> keras.Model:
    """Conv+BN+ReLU, depthwise+BN+ReLU6, Add, Concatenate, pooling, flatten, dropout, Dense."""
    i = keras.Input((8, 8, 3))
    x = L.Conv2D(8, 3, padding="same", use_bias=False)(i)
    x = L.BatchNormalization()(x)
    x = L.ReLU()(x)
    y = L.DepthwiseConv2D(3, padding="same")(x)
    y = L.BatchNormalization()(y)
    y = L.ReLU(6.0)(y)
    z = L.Add()([x, y])
    c = L.Concatenate()([z, L.Conv2D(4, 1, activation="relu")(z)])
    c = L.MaxPooling2D()(c)
    c = L.Flatten()(c)
    c = L.Dropout(dropout)(c)
    return keras.Model(i, L.Dense(classes)(c))


def numpy_fake_quant(x, low, high, bits=8, narrow_range=False):
    """TensorFlow's documented fake quantization (nudged range, round half up), in float64 numpy; also the mask."""
    q_min, q_max = (1 if narrow_range else 0), 2**bits - 1
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    scale = (high - low) / (q_max - q_min)
    zero = np.clip(np.round(q_min - low / scale), q_min, q_max)  # ties do not occur on these ranges
    n_min, n_max = (q_min - zero) * scale, (q_max - zero) * scale
    clamped = np.clip(x, n_min, n_max)
    return np.floor((clamped - n_min) / scale + 0.5) * scale + n_min, (x >= n_min) & (x <= n_max), scale


def data(n: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 1, (n, 8, 8, 3)).astype(np.float32), rng.integers(0, 10, n)


def interpreter(flatbuffer: bytes) -> tf.lite.Interpreter:
    """LiteRT's interpreter (``ai-edge-litert``), else TensorFlow's; reference kernels, no delegate."""
    try:
        from ai_edge_litert import interpreter as litert

        made = litert.Interpreter(
            model_content=flatbuffer,
            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        )
    except ImportError:
        made = tf.lite.Interpreter(
            model_content=flatbuffer,
            experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        )
    made.allocate_tensors()
    return made


def ops(flatbuffer: bytes) -> list[tuple[str, list[str], list[str]]]:
    """(op name, input dtypes, output dtypes) of every op, read from the flatbuffer's tensors."""
    it = interpreter(flatbuffer)
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    return [
        (
            op["op_name"],
            [np.dtype(tensors[k]["dtype"]).name for k in op["inputs"] if k >= 0],
            [np.dtype(tensors[k]["dtype"]).name for k in op["outputs"]],
        )
        for op in it._get_ops_details()
    ]


def run(flatbuffer: bytes, x: np.ndarray) -> np.ndarray:
    it = interpreter(flatbuffer)
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    results = []
    for row in x:
        it.set_tensor(inp["index"], row[None])
        it.invoke()
        results.append(it.get_tensor(out["index"]).copy())
    return np.concatenate(results)
