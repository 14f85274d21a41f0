"""Writes tests/data/larq_reference.json with larq 0.14 itself (run in the larq venv, not by the test suite):

    TF_USE_LEGACY_KERAS=1 "$LARQ_VENV"/bin/python tests/larq_port/make_reference.py

It records what the ported tests compare with: larq's saved quantizer, constraint and layer configs, the output of
``larq.models.summary`` for larq's own test models, and the values of ``quantized_scope(True)`` reads.
"""

import contextlib
import io
import json
import sys
from pathlib import Path

import larq as lq
import numpy as np
import tensorflow as tf

keras = tf.keras
sys.path.insert(0, str(Path(__file__).resolve().parent))
import larq_models  # noqa: E402  (the models, written once for larq and for ste.larq)


def small_bnn():
    model = larq_models.small_bnn(lq, keras)
    rng = np.random.default_rng(7)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype("float32") for w in model.get_weights()])
    return model


def printed(fn):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn()
    return out.getvalue()


def main(path):
    reference = {"version": lq.__version__}
    quantizers = {
        "SteSign": lq.quantizers.SteSign(clip_value=1.25),
        "ApproxSign": lq.quantizers.ApproxSign(),
        "SwishSign": lq.quantizers.SwishSign(beta=3.0),
        "SteHeaviside": lq.quantizers.SteHeaviside(clip_value=0.5),
        "SteTern": lq.quantizers.SteTern(threshold_value=0.1, ternary_weight_networks=True, clip_value=2.0),
        "MagnitudeAwareSign": lq.quantizers.MagnitudeAwareSign(clip_value=0.75),
        "DoReFa": lq.quantizers.DoReFa(k_bit=3, mode="weights"),
        "NoOp": lq.quantizers.NoOp(precision=1),
    }
    x = np.linspace(-2, 2, 24, dtype="float32").reshape(2, 3, 4)
    reference["quantizers"] = {
        name: {"config": lq.quantizers.serialize(q), "x": x.tolist(), "y": q(x).numpy().tolist()}
        for name, q in quantizers.items()
    }
    reference["constraint"] = keras.constraints.serialize(lq.constraints.WeightClip(0.5))
    layer = lq.layers.QuantDense(
        3, input_quantizer="ste_sign", kernel_quantizer="ste_tern", kernel_constraint="weight_clip", use_bias=False
    )
    reference["dense_config"] = layer.get_config()

    model = small_bnn()
    with lq.context.quantized_scope(True):
        quantized = [w.tolist() for w in model.get_weights()]
        quantized_kernel = model.layers[2].kernel.numpy().tolist()
    reference["small_bnn"] = {
        "latent": [w.tolist() for w in model.get_weights()],
        "quantized": quantized,
        "quantized_kernel_of_layer_2": quantized_kernel,
    }
    reference["summary"] = {}
    for name, build in (("profile", larq_models.profile_model), ("1d", larq_models.model_1d)):
        keras.backend.clear_session()
        model = build(lq, keras)
        profile = lq.models.ModelProfile(model)
        reference["summary"][name] = {
            "printed": printed(lambda m=model: lq.models.summary(m)),
            "printed_no_macs": printed(lambda m=model: lq.models.summary(m, include_macs=False)),
            "layers": [
                {
                    "input_precision": p.input_precision,
                    "output_shape": list(p.output_shape),
                    "output_pixels": p.output_pixels,
                    "weight_count": p.weight_count(),
                    "trainable_count": p.weight_count(trainable=True),
                    "unique_param_bidtwidths": p.unique_param_bidtwidths,
                    "unique_op_precisions": p.unique_op_precisions,
                    "memory": p.memory,
                    "fp_equivalent_memory": p.fp_equivalent_memory,
                    "int8_fp_weights_memory": p.int8_fp_weights_memory,
                    "macs": p.op_count("mac"),
                    "binary_macs": p.op_count("mac", 1),
                }
                for p in profile.layer_profiles
            ],
        }
    Path(path).write_text(json.dumps(reference, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/larq_reference.json")
