"""Model size before and after Larq Compute Engine's conversion (docs/deploying.md).

Run from the repository root: ``python -m benchmarks.deploy_size`` (needs ``pip install -e ".[deploy]"``). Builds a
small binarized network with ``ste.layers``, exports it with ``model.export``, converts the same SavedModel with
TensorFlow Lite's converter (float) and with ``lce.convert_saved_model``, and prints the sizes and the operators of
each flatbuffer.
"""

from __future__ import annotations

import collections
import tempfile

import keras
import tensorflow as tf

import ste


def binarized_net() -> keras.Model:
    """A float stem, four binary 3×3 convolutions (``pad_values=1.0``), a float depthwise conv and Dense head."""
    keras.utils.set_random_seed(0)
    binary = dict(
        input_quantizer="ste_sign",
        kernel_quantizer="ste_sign",
        kernel_constraint="weight_clip",
        padding="same",
        pad_values=1.0,
        use_bias=False,
    )
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(32, 3, padding="same", use_bias=False)(inputs)
    h = keras.layers.BatchNormalization()(h)
    for filters, strides in ((64, 1), (64, 2), (128, 1), (128, 2)):
        h = ste.layers.QuantConv2D(filters, 3, strides=strides, **binary)(h)
        h = keras.layers.BatchNormalization()(h)
    h = keras.layers.DepthwiseConv2D(3, padding="same")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    outputs = keras.layers.Dense(10)(h)
    return keras.Model(inputs, outputs)


def flatbuffer_ops(flatbuffer: bytes) -> collections.Counter[str]:
    """Operators in a TFLite flatbuffer by name (builtins such as ``CONV_2D``, custom ops such as ``LceBconv2d``)."""
    from tensorflow.lite.python import schema_py_generated as schema

    builtin = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    model = schema.Model.GetRootAsModel(flatbuffer, 0)
    names = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        number = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        names.append(code.CustomCode().decode() if number == schema.BuiltinOperator.CUSTOM else builtin[number])
    counts: collections.Counter[str] = collections.Counter()
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for o in range(subgraph.OperatorsLength()):
            counts[names[subgraph.Operators(o).OpcodeIndex()]] += 1
    return counts


def main() -> None:
    import larq_compute_engine as lce

    model = binarized_net()
    summary = ste.summary(model, print_fn=None)
    with tempfile.TemporaryDirectory() as saved:
        model.export(saved, verbose=False)
        float_tflite = tf.lite.TFLiteConverter.from_saved_model(saved).convert()
        lce_tflite = lce.convert_saved_model(saved)
    print(f"parameters: {sum(summary.params.values()):,} ({summary.params} by bit width)")
    print(
        f"ste.summary: float32 {summary.float32_bytes / 1024:.1f} KiB, quantized {summary.memory_bytes / 1024:.1f} KiB"
    )
    print("| flatbuffer | size | operators |")
    print("| --- | --- | --- |")
    for name, flatbuffer in (("TFLite (float)", float_tflite), ("LCE", lce_tflite)):
        listed = ", ".join(f"{op} ×{n}" for op, n in sorted(flatbuffer_ops(flatbuffer).items()))
        print(f"| {name} | {len(flatbuffer) / 1024:.1f} KiB | {listed} |")


if __name__ == "__main__":
    main()
