"""Quantization-aware training on scikit-learn's bundled 8×8 digits (no download), deployed as an int8 TFLite model.

One small CNN (Conv+BN+ReLU, a depthwise block with a residual Add, Dense) is trained three ways: in float; then
``ste.quantize_model`` makes it quantization-aware (TFMOT's int8 scheme on Keras 3: batch norms folded, ReLUs fused,
fake quantization where the TFLite converter expects it) and it is fine-tuned; then ``ste.to_tflite`` converts it
with the stock TFLite converter to a model whose convolutions and matrix products run in int8. At the end: the three
test accuracies and the sizes of the float and int8 TFLite files.

Run: python examples/qat_digits.py            (add --epochs N --qat-epochs M for a shorter run)
"""

from __future__ import annotations

import argparse
import os
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

BATCH = 32


def load() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    digits = load_digits()
    x = (digits.images.astype("float32") / 16.0)[..., None]  # pixels 0..16 -> [0, 1], shape (8, 8, 1)
    y = digits.target.astype("int32")
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    return x_train, x_test, y_train, y_test


def float_model(keras: Any = keras) -> Any:
    """The float network, built with ``keras`` (Keras 3 here; benchmarks/qat.py passes TFMOT's ``tf.keras``)."""
    L = keras.layers
    i = keras.Input((8, 8, 1), name="pixels")
    x = L.Conv2D(32, 3, padding="same", use_bias=False)(i)
    x = L.BatchNormalization(momentum=0.9)(x)
    x = L.ReLU()(x)
    y = L.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
    y = L.BatchNormalization(momentum=0.9)(y)
    y = L.ReLU(6.0)(y)
    y = L.Conv2D(32, 1, use_bias=False)(y)
    y = L.BatchNormalization(momentum=0.9)(y)
    x = L.Add()([x, y])
    x = L.MaxPooling2D()(x)
    x = L.Flatten()(x)
    x = L.Dense(128, activation="relu")(x)
    return keras.Model(i, L.Dense(10)(x), name="digits_cnn")


def compile_model(model: Any, learning_rate: float, keras: Any = keras) -> None:
    model.compile(
        keras.optimizers.Adam(learning_rate),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def float_tflite(model: keras.Model) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        model.export(directory + "/m", verbose=False)
        return bytes(tf.lite.TFLiteConverter.from_saved_model(directory + "/m").convert())


def tflite_accuracy(flatbuffer: bytes, x: np.ndarray, y: np.ndarray) -> float:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # ste[litert] is optional
        Interpreter = tf.lite.Interpreter
    interpreter = Interpreter(model_content=flatbuffer)
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    interpreter.resize_tensor_input(inp["index"], list(x.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    return float(np.mean(np.argmax(interpreter.get_tensor(out["index"]), axis=1) == y))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40, help="float training epochs (default 40)")
    parser.add_argument("--qat-epochs", type=int, default=10, help="quantization-aware fine-tuning epochs (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--verbose", type=int, default=0, help="Keras progress output: 0 silent, 1 bar, 2 per epoch")
    args = parser.parse_args(argv)
    import ste  # here, not at the top: benchmarks/qat.py imports this module where only TFMOT is installed

    keras.utils.set_random_seed(args.seed)
    x_train, x_test, y_train, y_test = load()

    model = float_model()
    compile_model(model, 3e-3)
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=BATCH, verbose=args.verbose)
    float_accuracy = model.evaluate(x_test, y_test, verbose=0)[1]

    qat = ste.quantize_model(model, strict=True)  # every layer of this network is covered by the int8 scheme
    compile_model(qat, 5e-4)
    qat.fit(x_train, y_train, epochs=args.qat_epochs, batch_size=BATCH, verbose=args.verbose)
    qat_accuracy = qat.evaluate(x_test, y_test, verbose=0)[1]

    int8 = ste.to_tflite(qat)
    float_file = float_tflite(model)
    int8_accuracy = tflite_accuracy(int8, x_test, y_test)

    print(f"test accuracy  float: {float_accuracy:.2%}   QAT: {qat_accuracy:.2%}   int8 TFLite: {int8_accuracy:.2%}")
    ratio = len(int8) / len(float_file)
    print(f"TFLite file    float: {len(float_file)} bytes   int8: {len(int8)} bytes   ({ratio:.2f}x)")
    return {
        "float": float_accuracy,
        "qat": qat_accuracy,
        "int8": int8_accuracy,
        "float_bytes": len(float_file),
        "int8_bytes": len(int8),
    }


if __name__ == "__main__":
    main()
