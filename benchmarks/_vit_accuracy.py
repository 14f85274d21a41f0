"""One side of ``benchmarks.accuracy vit``: a small ViT on Fashion-MNIST, float, quantized after training by Keras, or
trained by ste (QAT, 2:4 pruning), in a fresh process.

    python benchmarks/_vit_accuracy.py '{"row": "vit", "side": "ste_int8", "data": "fashion.npz", ...}'

The network (:func:`network`): KerasHub's ``ViTBackbone`` (random weights, no download; :data:`VIT`) and a class-token
head, ``Dense(10)`` on ``tokens[:, 0]`` (what ``ViTImageClassifier(pooling="token")`` computes), as a functional
Keras model. Every side loads the same float weights (trained once by the parent, in the npz), then fine-tunes them
for the same epochs with the same optimizer, batch and seed (``_accuracy_worker.train``, under the parent's lockstep):

* ``float``: the float model. Its process then quantizes copies of the fine-tuned model with Keras's own
  post-training ``model.quantize("int8")`` and ``model.quantize("int4")`` (the sides ``keras_int8`` and
  ``keras_int4``: Dense, EinsumDense and Embedding weights; int8 also quantizes each Dense's input per token at run
  time, int4 leaves the activations float), so those sides get the same training as every other side.
* ``ste_int8``: ``ste.quantize_model(model)`` (TFMOT's 8-bit scheme).
* ``ste_int4``: ``ste.quantize_model(model, scheme=WEIGHT_ONLY_INT4)``: 4-bit weights, float activations.
* ``ste_ternary``: ``ste.quantize_model(model, scheme="ternary")`` (BitNet b1.58).
* ``ste_2_4``: ``ste.sparsity.prune_low_magnitude(model, sparsity_m_by_n=(2, 4))`` on the Dense, EinsumDense and
  MultiHeadAttention layers (the patch embedding has one input channel and the position embedding no input-channel
  axis), fine-tuned with ``UpdatePruningStep`` and stripped with ``strip_pruning``. Where this ste refuses 2:4 on
  MultiHeadAttention, its projections stay dense and the result says so (``attention_left_dense``).

Each side then reports the accuracy of the model it deploys (in Keras) and its TFLite flatbuffers: for each, the
converter call that made it, its bytes, its bytes gzipped (level 9) and the TFLite interpreter's test accuracy where
the interpreter runs it; or the converter's error. A side that this ste or Keras cannot build yet answers the
lockstep without training and reports ``pending`` with the error, so the rest of the row runs.

Only the standard library is imported at the top (the parent imports :func:`network` for its float stage).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from _allocator import use_bfc  # this directory is on sys.path when run as a script

use_bfc()  # before TensorFlow is imported: the peak needs the BFC allocator's statistics

from qat import DONE, _barrier  # noqa: E402  (qat.py imports only the standard library at the top)

#: ``keras_hub.models.ViTBackbone``'s arguments besides ``image_shape``: 7 × 7 patches of 4 × 4 pixels and a class
#: token (50 tokens), 4 encoder blocks of 4 heads, 64 channels, an MLP of 128 (139,018 parameters with the head)
VIT = {"patch_size": 4, "num_layers": 4, "num_heads": 4, "hidden_dim": 64, "mlp_dim": 128}
#: side -> (the side whose process makes it, the mode of Keras's ``model.quantize``)
DERIVED = {"keras_int8": ("float", "int8"), "keras_int4": ("float", "int4")}
SIDES = ("float", "keras_int8", "ste_int8", "keras_int4", "ste_int4", "ste_ternary", "ste_2_4")
RECIPES = {
    "float": "the float model, fine-tuned",
    "keras_int8": 'model.quantize("int8") on a copy of the fine-tuned float model (post-training)',
    "keras_int4": 'model.quantize("int4") on a copy of the fine-tuned float model (post-training)',
    "ste_int8": "ste.quantize_model(model) (QAT)",
    "ste_int4": "ste.quantize_model(model, scheme=ste.qat.NBitScheme(num_bits_weight=4, num_bits_activation=None)) "
    "(QAT, 4-bit weights, float activations)",
    "ste_ternary": 'ste.quantize_model(model, scheme="ternary") (QAT)',
    "ste_2_4": "ste.sparsity.prune_low_magnitude(model, ConstantSparsity(0.5, 0, frequency=steps // 20), "
    "sparsity_m_by_n=(2, 4), filters=[Dense, EinsumDense, MultiHeadAttention]), fine-tuned, strip_pruning",
}
KERNEL_OPS = ("FULLY_CONNECTED", "BATCH_MATMUL", "CONV_2D")
EVAL_BATCH = 1000


def weight_only_int4(ste: Any) -> Any:
    """ste's scheme for 4-bit weights with float activations (raises where this ste has none)."""
    return ste.qat.NBitScheme(num_bits_weight=4, num_bits_activation=None)


def network(keras: Any, row: str = "vit", size: dict[str, int] | None = None) -> Any:
    """:data:`VIT` (with ``size``'s arguments instead, where given) on 28 × 28 × 1 images and a class-token head:
    logits for 10 classes."""
    import keras_hub

    backbone = keras_hub.models.ViTBackbone(image_shape=(28, 28, 1), **{**VIT, **(size or {})})
    images = keras.Input((28, 28, 1), name="images")
    tokens = backbone(images)
    return keras.Model(images, keras.layers.Dense(10, name="predictions")(tokens[:, 0]), name=row)


def describe(size: dict[str, int] | None = None) -> str:
    """The network in words, from the arguments it is built with."""
    arguments = ", ".join(f"{k}={v}" for k, v in {**VIT, **(size or {})}.items())
    return f"keras_hub.models.ViTBackbone(image_shape=(28, 28, 1), {arguments}) + Dense(10) on the class token"


def _short(error: BaseException) -> str:
    """One line of an error: the converter's first ``error:`` line without its location, else the message's first."""
    text = str(error)
    for line in text.splitlines():
        if "error:" in line:
            message = line.split("error:", 1)[1].strip()
            if message.startswith("loc("):
                message = message.rsplit("): ", 1)[-1]
            return f"{type(error).__name__}: {message}"[:400]
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(error).__name__}: {first}"[:400]


def _accuracy(tf: Any, flatbuffer: bytes, x: Any, y: Any) -> float:
    """The TFLite interpreter's test accuracy, :data:`EVAL_BATCH` images a call."""
    import numpy as np

    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    correct = 0
    for start in range(0, len(x), EVAL_BATCH):
        batch = x[start : start + EVAL_BATCH]
        interpreter.resize_tensor_input(inp["index"], list(batch.shape))
        interpreter.allocate_tensors()
        interpreter.set_tensor(inp["index"], batch)
        interpreter.invoke()
        correct += int(
            np.sum(np.argmax(interpreter.get_tensor(out["index"]), axis=-1) == y[start : start + EVAL_BATCH])
        )
    return correct / len(x)


def _kernel_ops(tf: Any, flatbuffer: bytes) -> dict[str, list[int]]:
    """For each matrix-product op kind in the flatbuffer: [how many take int8 inputs and int8 weights, how many]."""
    import numpy as np

    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    dtypes = {t["index"]: t["dtype"] for t in interpreter.get_tensor_details()}
    out: dict[str, list[int]] = {}
    for op in interpreter._get_ops_details():
        if op["op_name"] in KERNEL_OPS:
            int8 = all(dtypes.get(i) == np.int8 for i in op["inputs"][:2])
            counts = out.setdefault(op["op_name"], [0, 0])
            counts[0] += int(int8)
            counts[1] += 1
    return out


def kernel_op_types(flatbuffer: bytes) -> dict[str, dict[str, int]]:
    """For each matrix-product op kind in the flatbuffer: how many take each pair of (input, weight) tensor types,
    read from the schema (``"INT8 x INT8"``: an int8 kernel; ``"FLOAT32 x FLOAT32"``: float). A tensor that a
    ``DEQUANTIZE`` op makes is named by that op's input (``"FLOAT32 x INT4 (dequantized)"``: float activations on
    int4 weights, expanded to float at run time)."""
    from tensorflow.lite.python import schema_py_generated as schema

    types = {value: name for name, value in vars(schema.TensorType).items() if not name.startswith("_")}
    ops = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    model = schema.Model.GetRootAsModel(flatbuffer, 0)
    out: dict[str, dict[str, int]] = {}
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        named = []
        for o in range(graph.OperatorsLength()):
            op = graph.Operators(o)
            code = model.OperatorCodes(op.OpcodeIndex())
            named.append((ops.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), ""), op))
        dequantized = {op.Outputs(0): op.Inputs(0) for name, op in named if name == "DEQUANTIZE"}
        for name, op in named:
            if name not in KERNEL_OPS or op.InputsLength() < 2:
                continue
            kinds = []
            for tensor in (op.Inputs(0), op.Inputs(1)):
                source = dequantized.get(tensor, tensor)
                kinds.append(types.get(graph.Tensors(source).Type(), "?") + (" (dequantized)" * (source != tensor)))
            pair = " x ".join(kinds)
            counts = out.setdefault(name, {})
            counts[pair] = counts.get(pair, 0) + 1
    return out


def constants(flatbuffer: bytes) -> dict[str, Any]:
    """Bytes of the flatbuffer's constant tensors by type, and how many int8 constants of 64 values or more take at
    most 3 distinct values (ternary kernels) out of how many."""
    import numpy as np
    from tensorflow.lite.python import schema_py_generated as schema

    names = {value: name for name, value in vars(schema.TensorType).items() if not name.startswith("_")}
    model = schema.Model.GetRootAsModel(flatbuffer, 0)
    by_type: dict[str, int] = {}
    ternary = [0, 0]
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            buffer = model.Buffers(tensor.Buffer())
            size = buffer.DataLength() if buffer is not None else 0
            if not size:
                continue
            kind = names.get(tensor.Type(), str(tensor.Type()))
            by_type[kind] = by_type.get(kind, 0) + size
            if kind == "INT8" and size >= 64:
                ternary[1] += 1
                ternary[0] += int(len(np.unique(buffer.DataAsNumpy())) <= 3)
    return {"constant_bytes": by_type, "int8_constants_ternary": ternary}


def flatbuffer_figures(tf: Any, converter: str, make: Callable[[], bytes], x: Any, y: Any) -> dict[str, Any]:
    """``make()``'s flatbuffer: bytes, gzip bytes, int8 op census and interpreter accuracy; or why it failed."""
    try:
        flatbuffer = bytes(make())
    except Exception as error:  # the converter refuses the model: reported, the row goes on
        return {"converter": converter, "refused": _short(error)}
    figures: dict[str, Any] = {
        "converter": converter,
        "bytes": len(flatbuffer),
        "gzip_bytes": len(gzip.compress(flatbuffer, 9)),
    }
    try:
        figures.update(constants(flatbuffer))
        figures["kernel_op_types"] = kernel_op_types(flatbuffer)
    except Exception as error:  # a flatbuffer the schema cannot read: its sizes stand
        figures["constants"] = _short(error)
    try:
        figures["kernel_ops"] = _kernel_ops(tf, flatbuffer)
        figures["tflite_accuracy"] = _accuracy(tf, flatbuffer, x, y)
    except Exception as error:  # e.g. TensorFlow ops that need the Flex delegate
        figures["interpreter"] = _short(error)
    return figures


def _litert(model: Any) -> bytes:
    """Keras's own TFLite export (``format="litert"``: TFLITE_BUILTINS and SELECT_TF_OPS, resource variables)."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.tflite")
        model.export(path, format="litert", verbose=False)
        with open(path, "rb") as file:
            return file.read()


def _saved_model_converter(tf: Any, model: Any, setup: Callable[[Any], None]) -> bytes:
    """``model.export`` (a SavedModel) and ``TFLiteConverter.from_saved_model``, set up by ``setup(converter)``."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "saved")
        model.export(path, verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(path)
        setup(converter)
        return bytes(converter.convert())


def _tf_ops_only(tf: Any) -> Callable[[Any], None]:
    def setup(converter: Any) -> None:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.SELECT_TF_OPS]
        converter._experimental_allow_all_select_tf_ops = True

    return setup


def _optimizations(tf: Any, optimizations: list[Any]) -> Callable[[Any], None]:
    def setup(converter: Any) -> None:
        converter.optimizations = optimizations

    return setup


TF_OPS_ONLY = (
    "model.export(path) + TFLiteConverter.from_saved_model, target_spec.supported_ops=[SELECT_TF_OPS], "
    "_experimental_allow_all_select_tf_ops=True (every op a TensorFlow op: needs the Flex delegate)"
)


def keras_ptq(
    keras: Any, tf: Any, model: Any, mode: str, data: tuple[Any, Any, Any, Any], lr: float, size: Any = None
) -> dict[str, Any]:
    """A copy of ``model`` quantized by Keras (``model.quantize(mode)``): its test accuracy in Keras and its TFLite
    flatbuffers (Keras's ``format="litert"``; where that fails, every op as a TensorFlow op)."""
    from _accuracy_worker import compile_model

    _, _, x_test, y_test = data
    copy = network(keras, "vit", size)
    copy.set_weights(model.get_weights())
    copy.quantize(mode)
    compile_model(keras, copy, lr)
    figures: dict[str, Any] = {
        "side": f"keras_{mode}",
        "recipe": RECIPES[f"keras_{mode}"],
        "test_accuracy": float(copy.evaluate(x_test, y_test, batch_size=EVAL_BATCH, verbose=0)[1]),
        "quantized_weights": sorted({str(w.dtype) for w in copy.weights}),
    }
    flatbuffers = [flatbuffer_figures(tf, 'model.export(path, format="litert")', lambda: _litert(copy), x_test, y_test)]
    if "refused" in flatbuffers[0]:
        flatbuffers.append(
            flatbuffer_figures(
                tf, TF_OPS_ONLY, lambda: _saved_model_converter(tf, copy, _tf_ops_only(tf)), x_test, y_test
            )
        )
    figures["flatbuffers"] = flatbuffers
    return figures


def _side_model(keras: Any, ste: Any, model: Any, config: dict[str, Any]) -> tuple[Any, list[Any], str | None]:
    """The model this side fine-tunes, its callbacks, and for 2:4 pruning the error of the layers left dense."""
    side = config["side"]
    if side == "float":
        return model, [], None
    if side == "ste_2_4":  # the masks are recomputed 20 times over the fine-tuning (as the pruning row's 2:4 sides)
        steps = config["epochs"] * config["steps_per_epoch"]
        schedule = ste.sparsity.ConstantSparsity(0.5, 0, frequency=max(1, steps // 20))
        dense = [keras.layers.Dense, keras.layers.EinsumDense]
        callbacks = [ste.sparsity.UpdatePruningStep()]
        try:  # the attention projections too (inside MultiHeadAttention, whose wrapper prunes its kernels)
            pruned = ste.sparsity.prune_low_magnitude(
                model, schedule, sparsity_m_by_n=(2, 4), filters=[*dense, keras.layers.MultiHeadAttention]
            )
            return pruned, callbacks, None
        except Exception as error:  # this ste cannot prune them 2:4 yet: they stay dense, said in the result
            pruned = ste.sparsity.prune_low_magnitude(model, schedule, sparsity_m_by_n=(2, 4), filters=dense)
            return pruned, callbacks, _short(error)
    scheme = {"ste_int8": "int8", "ste_ternary": "ternary"}.get(side) or weight_only_int4(ste)
    return ste.quantize_model(model, scheme=scheme), [], None


def _deploy(keras: Any, tf: Any, ste: Any, model: Any, config: dict[str, Any], data: Any) -> dict[str, Any]:
    """The side's deployed model: accuracy in Keras, kernels, flatbuffers."""
    from _accuracy_worker import _packed_bytes, compile_model

    _, _, x_test, y_test = data
    side = config["side"]
    if side == "float":
        flatbuffer = flatbuffer_figures(
            tf, 'model.export(path, format="litert")', lambda: _litert(model), x_test, y_test
        )
        derived = {
            name: keras_ptq(keras, tf, model, mode, data, config["learning_rate"], config.get("size"))
            for name, (_, mode) in DERIVED.items()
            if name in config.get("derived", [])
        }
        return {"flatbuffers": [flatbuffer], "derived": derived}
    if side == "ste_2_4":
        stripped = ste.sparsity.strip_pruning(model)
        compile_model(keras, stripped, config["learning_rate"])
        kernels = {
            layer.kernel.path: layer.kernel.numpy()
            for layer in stripped._flatten_layers(include_self=False, recursive=True)
            if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))
        }
        converters = {
            "model.export(path) + TFLiteConverter.from_saved_model, optimizations=[] (float)": [],
            "the same, optimizations=[EXPERIMENTAL_SPARSITY]": [tf.lite.Optimize.EXPERIMENTAL_SPARSITY],
            "the same, optimizations=[DEFAULT] (int8 weights, float activations)": [tf.lite.Optimize.DEFAULT],
        }
        return {
            "stripped_accuracy": float(stripped.evaluate(x_test, y_test, batch_size=EVAL_BATCH, verbose=0)[1]),
            "zeros": float(sum(int((k == 0).sum()) for k in kernels.values()) / sum(k.size for k in kernels.values())),
            "kernel_zeros": {path: float((k == 0).mean()) for path, k in kernels.items()},
            "pruned_kernels": len(kernels),
            "flatbuffers": [
                flatbuffer_figures(
                    tf,
                    how,
                    functools.partial(_saved_model_converter, tf, stripped, _optimizations(tf, optimizations)),
                    x_test,
                    y_test,
                )
                for how, optimizations in converters.items()
            ],
        }
    figures: dict[str, Any] = {
        "flatbuffers": [flatbuffer_figures(tf, "ste.to_tflite(model)", lambda: ste.to_tflite(model), x_test, y_test)]
    }
    if side == "ste_ternary":
        packed = _packed_bytes(ste, model)
        bits = list(packed["kernel_bits"].values())
        figures.update(packed, ternary_kernels=[bits.count(2), len(bits)])
    return figures


def _idle(config: dict[str, Any]) -> None:
    """Answer the parent's lockstep (every epoch's barrier and the last one) without training."""
    lockstep = config.get("lockstep", False)
    for _ in range(config["epochs"]):
        _barrier(lockstep)
        if lockstep:
            print(DONE, flush=True)
    _barrier(lockstep)


def main(config: dict[str, Any]) -> dict[str, Any]:
    import keras
    import keras_hub
    import numpy as np
    import tensorflow as tf
    from _accuracy_worker import compile_model, train

    import ste

    arrays = np.load(config["data"])
    x_train = (arrays["x_train"].astype("float32") / 255.0)[..., None]
    x_test = (arrays["x_test"].astype("float32") / 255.0)[..., None]
    data = (x_train, arrays["y_train"].astype("int32"), x_test, arrays["y_test"].astype("int32"))
    side = config["side"]
    base: dict[str, Any] = {
        "row": config["row"],
        "side": side,
        "seed": config["seed"],
        "recipe": RECIPES[side],
        "network": describe(config.get("size")),
        "versions": f"ste {ste.__version__}, keras-hub {keras_hub.__version__}, Keras {keras.__version__}, "
        f"TensorFlow {tf.__version__}",
    }
    keras.utils.set_random_seed(config["seed"])
    model = network(keras, config["row"], config.get("size"))
    model.set_weights([arrays[f"weight_{i}"] for i in range(int(arrays["weights"]))])
    try:
        model, callbacks, left_dense = _side_model(keras, ste, model, config)
    except Exception as error:  # this ste cannot build the side yet: the row goes on without it
        _idle(config)
        return {**base, "pending": _short(error)}
    if left_dense:
        base["attention_left_dense"] = left_dense
    compile_model(keras, model, config["learning_rate"])
    trained = train(config, keras, model, data, callbacks)
    try:
        deployed = _deploy(keras, tf, ste, model, config, data)
    except Exception as error:  # e.g. stripping or exporting this model is not supported yet
        deployed = {"pending": _short(error)}
    return {**base, **trained, **deployed}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
