"""Writes tests/data/larq_reference.json with larq 0.14 itself (run in the larq venv, not by the test suite):

    TF_USE_LEGACY_KERAS=1 /work/venvs/larq/bin/python tests/larq_port/make_reference.py

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


def profile_model():  # larq/models_test.py's get_profile_model
    return keras.models.Sequential(
        [
            lq.layers.QuantConv2D(32, (3, 3), kernel_quantizer="ste_sign", input_shape=(64, 64, 1), padding="same"),
            keras.layers.MaxPooling2D((2, 2)),
            lq.layers.QuantDepthwiseConv2D(
                kernel_size=3,
                strides=(3, 3),
                input_quantizer=lq.quantizers.SteTern(),
                depthwise_quantizer=lq.quantizers.SteTern(),
                padding="same",
                pad_values=1.0,
                use_bias=False,
            ),
            keras.layers.BatchNormalization(scale=False),
            lq.layers.QuantSeparableConv2D(
                32,
                (3, 3),
                input_quantizer="ste_sign",
                depthwise_quantizer="ste_sign",
                pointwise_quantizer="ste_sign",
                padding="same",
            ),
            keras.layers.Flatten(),
            keras.layers.Dense(10, trainable=False),
        ],
        name="sequential",
    )


def model_1d():  # larq/models_test.py's test_layer_profile_1d model
    return keras.models.Sequential(
        [
            lq.layers.QuantConv1D(32, 3, input_shape=(64, 6), kernel_quantizer="ste_sign", padding="same"),
            keras.layers.MaxPooling1D(2),
            lq.layers.QuantSeparableConv1D(
                16,
                3,
                input_quantizer="ste_sign",
                depthwise_quantizer="ste_sign",
                pointwise_quantizer="ste_sign",
                padding="same",
            ),
            keras.layers.Flatten(),
            keras.layers.Dense(10, trainable=False),
        ],
        name="sequential_1d",
    )


def small_bnn():  # larq/testing_utils.py's get_small_bnn_model(4, 3, 2), with fixed weights
    model = keras.models.Sequential(
        [
            lq.layers.QuantDense(
                3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip", input_shape=(4,), use_bias=False
            ),
            keras.layers.BatchNormalization(),
            lq.layers.QuantDense(
                2,
                kernel_quantizer="magnitude_aware_sign",
                input_quantizer="ste_sign",
                kernel_constraint="weight_clip",
                use_bias=False,
            ),
        ]
    )
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
    for name, build in (("profile", profile_model), ("1d", model_1d)):
        keras.backend.clear_session()
        model = build()
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
