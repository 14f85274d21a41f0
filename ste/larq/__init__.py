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

Every name here is the ``ste`` object itself, except ``lq.layers``' classes, which subclass ``ste.layers``' with larq's
construction-time warning, and ``lq.models``, which counts as larq does; a model built through this namespace saves,
loads and trains like any ``ste`` model. ``lq.context.quantized_scope(True)`` makes ``model.get_weights()`` return
the quantized kernels, as in larq. ``lq.__version__`` is the larq release matched (0.14). What differs from larq,
and why, is on the migration page (docs/larq.md).
"""

from . import (
    activations,
    callbacks,
    constraints,
    context,
    layers,
    math,
    metrics,
    models,
    optimizers,
    quantized_variable,
    quantizers,
    utils,
)

#: The larq release whose API, forward values, gradients and summary figures ``ste.larq`` matches.
__version__ = "0.14.0"

__all__ = [
    "__version__",
    "activations",
    "callbacks",
    "constraints",
    "context",
    "layers",
    "math",
    "metrics",
    "models",
    "optimizers",
    "quantized_variable",
    "quantizers",
    "utils",
]
