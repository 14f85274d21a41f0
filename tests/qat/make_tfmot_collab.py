"""Writes tests/data/tfmot_collab.npz: what TFMOT 0.8.1's own PQAT, CQAT and PCQAT do, for
tests/qat/test_collab_tfmot_parity.py.

Run it with a Python that has TensorFlow, tf-keras and tensorflow-model-optimization 0.8.1 (never a dependency of
ste): ``TF_USE_LEGACY_KERAS=1 python tests/qat/make_tfmot_collab.py``. For each case (``pqat``, ``cqat``,
``pcqat``, and ``cqat_bn`` / ``pqat_bn`` with a batch norm after the convolution), a small tf.keras model gets
crafted pruned and/or clustered kernels, is quantized with ``tfmot.quantization.keras.quantize_apply`` and TFMOT's
``Default8BitPrunePreserveQuantizeScheme`` / ``Default8BitClusterPreserveQuantizeScheme(preserve_sparsity)``, and is
converted to int8 TFLite (``optimizations=[DEFAULT]``) before and after four SGD steps. Keys:

* ``x``, ``y``: the training data; ``<case>|<layer>|stripped``: the kernels the model starts from;
* ``<case>|<when>|ops``: the TFLite op names in order (``<when>``: ``t0`` untrained, ``t4`` after four steps);
* ``<case>|<when>|<op index>|int8``, ``...|scales``: the int8 filter of each CONV_2D, DEPTHWISE_CONV_2D and
  FULLY_CONNECTED op (as the interpreter holds it) and its scales;
* ``<case>|<layer>|latent4``: the layer's own kernel variable after the four steps (TFMOT's PQAT trains it in place;
  its CQAT assigns it the clustered kernel of the last training call, from which that call's range was taken);
* ``<case>|<layer>|ori4``, ``centroids4``, ``indices4``: TFMOT's CQAT variables after the steps (clustered kernels).

The untrained ``t0`` models hold TFMOT's initial kernel ranges ([−6, 6], its min/max variables before any training
call), not the kernels', so the tests read only ``t4``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_model_optimization as tfmot

keras = tf.keras
L = keras.layers
OUT = Path(__file__).resolve().parents[1] / "data" / "tfmot_collab.npz"
CENTROIDS = np.array([-0.5, -0.125, 0.25, 0.625], np.float32)
PC_CENTROIDS = np.array([-0.5, 0.25, 0.625], np.float32)
FILTER_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def crafted(shape: tuple[int, ...], kind: str, seed: int) -> np.ndarray:
    """Half zeros (pruned), four values (clustered), or three non-zero values and zeros (both)."""
    rng = np.random.default_rng(seed)
    if kind == "pqat":
        kernel = rng.normal(0, 0.3, shape)
        kernel[rng.random(shape) < 0.5] = 0.0
    elif kind == "cqat":
        kernel = CENTROIDS[rng.integers(0, 4, shape)]
    else:
        kernel = PC_CENTROIDS[rng.integers(0, 3, shape)]
        kernel[rng.random(shape) < 0.5] = 0.0
    return kernel.astype(np.float32)


def model(batch_norm: bool) -> keras.Model:
    """Activations inside the layers: TFMOT's ``LayerReLUQuantize`` gives a Conv2D followed by a ReLU layer a no-op
    config, whose kernel is then not fake-quantized at all."""
    if batch_norm:
        layers = [L.Conv2D(4, 3, use_bias=False, name="conv"), L.BatchNormalization(name="bn"), L.ReLU()]
    else:
        layers = [L.Conv2D(4, 3, activation="relu", name="conv")]
    layers += [L.DepthwiseConv2D(3, activation="relu", name="dw"), L.Flatten(), L.Dense(5, name="dense")]
    return keras.Sequential([keras.Input((6, 6, 3)), *layers])


KERNELS = {"conv": "kernel", "dw": "depthwise_kernel", "dense": "kernel"}


def filters(flatbuffer: bytes, prefix: str, out: dict) -> None:
    it = tf.lite.Interpreter(model_content=flatbuffer)
    it.allocate_tensors()
    details = {d["index"]: d for d in it.get_tensor_details()}
    names = []
    for i, op in enumerate(it._get_ops_details()):
        names.append(op["op_name"])
        if op["op_name"] in FILTER_OPS:
            index = op["inputs"][1]
            out[f"{prefix}|{i}|int8"] = it.get_tensor(index).copy()
            out[f"{prefix}|{i}|scales"] = np.asarray(details[index]["quantization_parameters"]["scales"])
    out[f"{prefix}|ops"] = np.array(json.dumps(names))


def convert(q: keras.Model) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(q)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter.convert()


def scheme(kind: str):
    combine = tfmot.experimental.combine
    if kind == "pqat":
        return combine.Default8BitPrunePreserveQuantizeScheme()
    return combine.Default8BitClusterPreserveQuantizeScheme(preserve_sparsity=kind == "pcqat")


def cluster_variables(wrapper, case: str, name: str, out: dict) -> None:
    """TFMOT's CQAT variables of a clustered kernel: its latent copy, its centroids (per channel for a Conv2D whose
    channels have as many values each) and the indices of the last training call."""
    for variable in wrapper.weights:
        for suffix, key in (("ori_weights_vars_tf", "ori4"), ("cluster_centroids_tf", "centroids4")):
            if variable.name.split("/")[-1].startswith(suffix):
                out[f"{case}|{name}|{key}"] = variable.numpy()
        if variable.name.split("/")[-1].startswith("pulling_indices_tf"):
            out[f"{case}|{name}|indices4"] = variable.numpy()


def run_case(case: str, out: dict, x: np.ndarray, y: np.ndarray) -> None:
    kind, batch_norm = case.removesuffix("_bn"), case.endswith("_bn")
    keras.utils.set_random_seed(1)
    float_model = model(batch_norm)
    for seed, name in enumerate(("conv", "dw", "dense")):
        variable = getattr(float_model.get_layer(name), KERNELS[name])
        kernel = crafted(tuple(variable.shape), kind, seed)
        variable.assign(kernel)
        out[f"{case}|{name}|stripped"] = kernel
    annotated = tfmot.quantization.keras.quantize_annotate_model(float_model)
    q = tfmot.quantization.keras.quantize_apply(annotated, scheme(kind))
    filters(convert(q), f"{case}|t0", out)
    q.compile(keras.optimizers.SGD(0.05, momentum=0.9), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    q.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    filters(convert(q), f"{case}|t4", out)
    for name, attribute in KERNELS.items():
        wrapper = q.get_layer(f"quant_{name}")
        (latent,) = [v for v in wrapper.weights if v.name == f"{name}/{attribute}:0"]  # the call swaps the attribute
        out[f"{case}|{name}|latent4"] = latent.numpy()
        cluster_variables(wrapper, case, name, out)


def main() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(32, 6, 6, 3)).astype(np.float32)
    y = rng.integers(0, 5, 32)
    out: dict[str, np.ndarray] = {"x": x, "y": y}
    for case in ("pqat", "cqat", "pcqat", "pqat_bn", "cqat_bn"):
        run_case(case, out, x, y)
    np.savez(OUT, **out)


if __name__ == "__main__":
    main()
