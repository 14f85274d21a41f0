"""The models of larq 0.14's tests, written once for both libraries: ``build(lq, keras)`` with larq and tf.keras
(tests/larq_port/make_reference.py, in the larq venv) or with ``ste.larq`` and Keras 3 (the ported tests)."""

from __future__ import annotations

from typing import Any


def profile_model(lq: Any, keras: Any) -> Any:
    """larq/models_test.py's get_profile_model."""
    return keras.Sequential(
        [
            keras.Input((64, 64, 1)),
            lq.layers.QuantConv2D(32, (3, 3), kernel_quantizer="ste_sign", padding="same"),
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


def model_1d(lq: Any, keras: Any) -> Any:
    """larq/models_test.py's test_layer_profile_1d model."""
    return keras.Sequential(
        [
            keras.Input((64, 6)),
            lq.layers.QuantConv1D(32, 3, kernel_quantizer="ste_sign", padding="same"),
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


def small_bnn(lq: Any, keras: Any) -> Any:
    """larq/testing_utils.py's get_small_bnn_model(4, 3, 2), with a magnitude-aware sign in the second layer."""
    return keras.Sequential(
        [
            keras.Input((4,)),
            lq.layers.QuantDense(3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip", use_bias=False),
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
