"""larq 0.14's namespace on Keras 3: a larq model definition runs after two edits.

``import larq as lq`` becomes ``import ste.larq as lq`` and ``tf.keras`` becomes ``keras``; the rest of the model
code stays as it is::

    import keras
    import ste.larq as lq

    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        lq.layers.QuantConv2D(32, 3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip", use_bias=False),
        keras.layers.BatchNormalization(scale=False),
        keras.layers.Flatten(),
        lq.layers.QuantDense(10, input_quantizer="ste_sign", kernel_quantizer="ste_sign",
                             kernel_constraint="weight_clip"),
    ])
    lq.models.summary(model)

Every name here is the ``ste`` object itself (``lq.layers.QuantConv2D is ste.layers.QuantConv2D``), so a model
built through this namespace saves, loads and trains like any ``ste`` model. What differs from larq, and why, is
on the migration page (docs/larq.md).
"""

from . import activations, callbacks, constraints, layers, math, metrics, models, optimizers, quantizers, utils

__all__ = [
    "activations",
    "callbacks",
    "constraints",
    "layers",
    "math",
    "metrics",
    "models",
    "optimizers",
    "quantizers",
    "utils",
]
