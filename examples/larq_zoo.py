"""larq-zoo's ImageNet architectures, rebuilt compactly in larq's own style, for any larq-shaped namespace.

Each builder takes the two modules a larq model definition uses, ``lq`` and ``keras``, so the same code builds the
model with larq 0.14 (``import larq as lq``, ``keras = tf.keras``, in a larq venv with ``TF_USE_LEGACY_KERAS=1``)
and with ``ste`` on Keras 3 (``import ste.larq as lq``, ``import keras``). The architectures follow larq-zoo's
``larq_zoo/sota/quicknet.py`` and ``larq_zoo/literature/*.py`` (layer by layer, same arguments that change counts;
initializers, regularizers and names are left out where they change nothing that is counted).

Run it in a virtual environment ``LARQ_VENV`` holding larq 0.14, ``tensorflow-cpu`` and ``tf-keras`` to print
``larq.models.summary``'s figures for every model as JSON (the reference that ``tests/test_larq_zoo_summary.py``
reads from ``tests/data/larq_zoo_summary.json``)::

    TF_USE_LEGACY_KERAS=1 $LARQ_VENV/bin/python examples/larq_zoo.py --larq > tests/data/larq_zoo_summary.json

``--larq-reference tests/data/larq_outputs.npz`` saves two small nets' random weights, inputs and larq's outputs
(the weights move with ``get_weights`` → ``set_weights``, as trained larq weights do); and run it with ``ste``
(``python examples/larq_zoo.py``) to print ``ste.summary``'s deployment figures next to larq-zoo's
published ones.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

Model = Any  # a keras.Model of whichever Keras the namespace uses
INPUT_SHAPE = (224, 224, 3)
NUM_CLASSES = 1000

# larq-zoo's published figures (the "ImageNet Metrics" table of each model's docstring): parameters, memory.
PUBLISHED = {
    "quicknet_small": (12_655_688, "4.00 MB"),
    "quicknet": (13_234_088, "4.17 MB"),
    "quicknet_large": (23_342_248, "5.40 MB"),
    "birealnet": (11_699_112, "4.03 MB"),
    "binary_resnet_e18": (11_699_368, "4.03 MB"),
    "binary_densenet28": (5_150_504, "4.12 MB"),
    "binary_densenet37": (8_734_120, "5.25 MB"),
    "binary_densenet45": (13_939_240, "7.54 MB"),
    "xnornet": (62_396_768, "22.81 MB"),
    "dorefanet": (62_403_912, "22.84 MB"),
    "binary_alexnet": (61_859_192, "7.49 MB"),
    "meliusnet22": (6_944_584, "3.88 MiB"),
}


def _global_pool(keras: Any, x: Any) -> Any:
    """larq-zoo's ``utils.global_pool``: an average pool over the whole feature map, then flatten."""
    x = keras.layers.AveragePooling2D(pool_size=tuple(x.shape[1:3]))(x)
    return keras.layers.Flatten()(x)


def _top(keras: Any, x: Any, **dense_kwargs: Any) -> Any:
    x = _global_pool(keras, x)
    x = keras.layers.Dense(NUM_CLASSES, **dense_kwargs)(x)
    return keras.layers.Activation("softmax", dtype="float32")(x)


def _ste_sign_binary(lq: Any, clip: float) -> dict[str, Any]:
    """The binary-layer arguments of QuickNet, BinaryResNetE, BinaryDenseNet and MeliusNet (clip 1.25 or 1.3)."""
    return dict(
        input_quantizer=lq.quantizers.SteSign(clip_value=clip),
        kernel_quantizer=lq.quantizers.SteSign(clip_value=clip),
        kernel_constraint=lq.constraints.WeightClip(clip_value=clip),
    )


def _bn(keras: Any, x: Any) -> Any:
    return keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)


def blurpool_initializer(shape: Any, dtype: Any = None) -> Any:
    """QuickNet's anti-aliasing filter (Zhang 2019), for a 3×3 depthwise kernel."""
    k = np.outer([1.0, 2.0, 1.0], [1.0, 2.0, 1.0])
    k = np.repeat((k / k.sum())[:, :, None], shape[2], axis=-1)
    return tf.constant(np.reshape(k, shape), dtype=dtype or "float32")


def quicknet_residual_block(lq: Any, keras: Any, x: Any, binary: dict[str, Any]) -> Any:
    """QuickNet's block: a binary 3×3 convolution, its input padded with +1 (``pad_values=1.0``), around a shortcut."""
    residual = x
    x = lq.layers.QuantConv2D(
        int(x.shape[-1]), (3, 3), activation="relu", padding="same", pad_values=1.0, use_bias=False, **binary
    )(x)
    x = _bn(keras, x)
    return keras.layers.Add()([x, residual])


def quicknet(lq: Any, keras: Any, variant: str = "") -> Model:
    """QuickNet, QuickNetSmall (``variant="small"``) or QuickNetLarge (``variant="large"``)."""
    blocks = (6, 8, 12, 6) if variant == "large" else (4, 4, 4, 4)
    filters = (32, 64, 256, 512) if variant == "small" else (64, 128, 256, 512)
    binary = _ste_sign_binary(lq, 1.25)
    inputs = keras.Input(INPUT_SHAPE)
    # stem
    x = lq.layers.QuantConv2D(filters[0] // 4, (3, 3), padding="same", strides=2, use_bias=False)(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    x = lq.layers.QuantDepthwiseConv2D((3, 3), padding="same", strides=2, use_bias=False)(x)
    x = keras.layers.BatchNormalization(scale=False, center=False)(x)
    x = lq.layers.QuantConv2D(filters[0], 1, use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    for n_blocks, n_filters in zip(blocks, filters):
        for _ in range(n_blocks):
            if n_filters != x.shape[-1]:  # transition block
                x = keras.layers.Activation("relu")(x)
                x = keras.layers.MaxPool2D(pool_size=2, strides=1)(x)
                x = keras.layers.DepthwiseConv2D(
                    (3, 3),
                    depthwise_initializer=blurpool_initializer,
                    padding="same",
                    strides=2,
                    trainable=False,
                    use_bias=False,
                )(x)
                x = lq.layers.QuantConv2D(n_filters, (1, 1), use_bias=False)(x)
                x = _bn(keras, x)
            x = quicknet_residual_block(lq, keras, x, binary)
    x = keras.layers.Activation("relu")(x)
    name = "quicknet" + (f"_{variant}" if variant else "")
    return keras.Model(inputs, lq.layers.QuantDense(NUM_CLASSES)(_global_pool(keras, x)), name=name)


def birealnet_block(lq: Any, keras: Any, x: Any, out_filters: int) -> Any:
    """Bi-Real Net's block: a binary 3×3 convolution with a real-valued shortcut around it."""
    in_filters = x.shape[-1]
    shortcut = x
    if in_filters != out_filters:
        shortcut = keras.layers.AvgPool2D(2, strides=2, padding="same")(shortcut)
        shortcut = keras.layers.Conv2D(out_filters, (1, 1), use_bias=False)(shortcut)
        shortcut = keras.layers.BatchNormalization(momentum=0.8)(shortcut)
    x = lq.layers.QuantConv2D(
        out_filters,
        (3, 3),
        strides=1 if out_filters == in_filters else 2,
        padding="same",
        input_quantizer="approx_sign",
        kernel_quantizer="magnitude_aware_sign",
        kernel_constraint="weight_clip",
        use_bias=False,
    )(x)
    x = keras.layers.BatchNormalization(momentum=0.8)(x)
    return keras.layers.add([x, shortcut])


def birealnet(lq: Any, keras: Any) -> Model:
    """Bi-Real Net 18 (Liu et al. 2018): ApproxSign inputs, magnitude-aware binary kernels."""

    inputs = keras.Input(INPUT_SHAPE)
    x = keras.layers.Conv2D(64, (7, 7), strides=2, padding="same", use_bias=False)(inputs)
    x = keras.layers.BatchNormalization(momentum=0.8)(x)
    x = keras.layers.MaxPool2D((3, 3), strides=2, padding="same")(x)
    for filters in (64, 128, 256, 512):
        for _ in range(4):
            x = birealnet_block(lq, keras, x, filters)
    return keras.Model(inputs, _top(keras, x), name="birealnet18")


def binary_resnet_e18(lq: Any, keras: Any) -> Model:
    """BinaryResNetE18 (Bethge et al. 2019)."""
    binary = _ste_sign_binary(lq, 1.25)

    def bn(x: Any) -> Any:
        return _bn(keras, x)

    inputs = keras.Input(INPUT_SHAPE)
    x = keras.layers.Conv2D(64, kernel_size=7, strides=2, padding="same", use_bias=False)(inputs)
    x = keras.layers.Activation("relu")(bn(x))
    x = bn(keras.layers.MaxPool2D(3, strides=2, padding="same")(x))
    for section, filters in enumerate((64, 128, 256, 512)):
        for layer in range(4):
            residual = x
            if x.shape[-1] != filters:
                residual = keras.layers.AvgPool2D(pool_size=2, strides=2)(x)
                residual = bn(keras.layers.Conv2D(filters, kernel_size=1, use_bias=False)(residual))
            strides = 1 if section == 0 or layer != 0 else 2
            x = lq.layers.QuantConv2D(filters, 3, strides=strides, padding="same", use_bias=False, **binary)(x)
            x = keras.layers.add([bn(x), residual])
    x = keras.layers.Activation("relu")(x)
    return keras.Model(inputs, _top(keras, x), name="binary_resnet_e_18")


def binary_densenet(lq: Any, keras: Any, depth: int = 28) -> Model:
    """BinaryDenseNet28 / 37 / 45 (Bethge et al. 2019)."""
    reduction, layers = {
        28: ((2.7, 2.7, 2.2), (6, 6, 6, 5)),
        37: ((3.3, 3.3, 4), (6, 8, 12, 6)),
        45: ((2.7, 3.3, 4), (6, 12, 14, 8)),
    }[depth]
    binary = _ste_sign_binary(lq, 1.3)

    def bn(x: Any) -> Any:
        return _bn(keras, x)

    inputs = keras.Input(INPUT_SHAPE)
    x = keras.layers.Conv2D(64, kernel_size=7, strides=2, padding="same", use_bias=False)(inputs)
    x = keras.layers.MaxPool2D(3, strides=2, padding="same")(keras.layers.Activation("relu")(bn(x)))
    for block, n_layers in enumerate(layers):
        for _ in range(n_layers):
            y = lq.layers.QuantConv2D(64, kernel_size=3, padding="same", use_bias=False, **binary)(bn(x))
            x = keras.layers.concatenate([x, y])
        if block < len(layers) - 1:
            x = keras.layers.Activation("relu")(keras.layers.MaxPooling2D(2, strides=2)(bn(x)))
            filters = round(x.shape[-1] // reduction[block] / 32) * 32
            x = keras.layers.Conv2D(filters, kernel_size=1, use_bias=False)(x)
    x = keras.layers.Activation("relu")(bn(x))
    return keras.Model(inputs, _top(keras, x), name=f"binary_densenet{depth}")


def xnornet(lq: Any, keras: Any) -> Model:
    """XNOR-Net (Rastegari et al. 2016): binary kernels scaled by their mean absolute value per filter."""

    @lq.utils.set_precision(1)
    @lq.utils.register_keras_custom_object
    def xnor_weight_scale(x: Any) -> Any:
        x = tf.clip_by_value(x, -1, 1)
        alpha = tf.reduce_mean(tf.abs(x), axis=[0, 1, 2], keepdims=True)
        return alpha * lq.quantizers.ste_sign(x)

    binary = dict(
        # larq-zoo passes the name "xnor_weight_scale"; ste.larq resolves it, but larq 0.14 on tf-keras 2.21 calls
        # the function it finds as if it were a class, so the function itself is passed here for both
        kernel_quantizer=xnor_weight_scale,
        input_quantizer="ste_sign",
        kernel_constraint="weight_clip",
        use_bias=False,
    )

    def bn(x: Any, epsilon: float = 1e-4) -> Any:
        return keras.layers.BatchNormalization(momentum=0.9, scale=False, epsilon=epsilon)(x)

    inputs = keras.Input(INPUT_SHAPE)
    x = keras.layers.Conv2D(96, (11, 11), strides=(4, 4), padding="same", use_bias=False)(inputs)
    x = keras.layers.Activation("relu")(bn(x, 1e-5))
    x = bn(keras.layers.MaxPool2D(pool_size=(3, 3), strides=(2, 2))(x))
    x = lq.layers.QuantConv2D(256, (5, 5), padding="same", **binary)(x)
    x = bn(keras.layers.MaxPool2D(pool_size=(3, 3), strides=(2, 2))(x))
    x = bn(lq.layers.QuantConv2D(384, (3, 3), padding="same", **binary)(x))
    x = bn(lq.layers.QuantConv2D(384, (3, 3), padding="same", **binary)(x))
    x = lq.layers.QuantConv2D(256, (3, 3), padding="same", **binary)(x)
    x = bn(keras.layers.MaxPool2D(pool_size=(3, 3), strides=(2, 2))(x))
    x = bn(lq.layers.QuantConv2D(4096, (6, 6), padding="valid", **binary)(x))
    x = bn(lq.layers.QuantConv2D(4096, (1, 1), padding="valid", **binary)(x), 1e-3)
    x = keras.layers.Flatten()(keras.layers.Activation("relu")(x))
    x = keras.layers.Dense(NUM_CLASSES, use_bias=False)(x)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x), name="xnornet")


def dorefanet(lq: Any, keras: Any) -> Model:
    """DoReFa-Net (Zhou et al. 2016): 2-bit activations, binary kernels scaled per layer, identity gradient."""

    @lq.utils.register_keras_custom_object
    @lq.utils.set_precision(1)
    def magnitude_aware_sign_unclipped(x: Any) -> Any:
        scale_factor = tf.stop_gradient(tf.reduce_mean(tf.abs(x)))

        @tf.custom_gradient
        def _magnitude_aware_sign(x: Any) -> Any:
            return lq.math.sign(x) * scale_factor, lambda dy: dy

        return _magnitude_aware_sign(x)

    @lq.utils.register_keras_custom_object
    def clip_by_value_activation(x: Any) -> Any:
        return tf.clip_by_value(x, 0, 1)

    binary = dict(
        input_quantizer=lq.quantizers.DoReFaQuantizer(k_bit=2),
        kernel_quantizer=magnitude_aware_sign_unclipped,
        kernel_constraint=None,
        use_bias=False,
    )

    def bn(x: Any) -> Any:
        return keras.layers.BatchNormalization(scale=False, momentum=0.9, epsilon=1e-4)(x)

    def conv(x: Any, filters: int, kernel_size: int, pool: bool = False, pool_padding: str = "same") -> Any:
        x = bn(lq.layers.QuantConv2D(filters, kernel_size=kernel_size, padding="same", **binary)(x))
        return keras.layers.MaxPool2D(pool_size=3, strides=2, padding=pool_padding)(x) if pool else x

    inputs = keras.Input(INPUT_SHAPE)
    x = keras.layers.Conv2D(96, kernel_size=12, strides=4, padding="valid", use_bias=True)(inputs)
    x = conv(x, 256, 5, pool=True)
    x = conv(x, 384, 3, pool=True)
    x = conv(x, 384, 3)
    x = conv(x, 256, 3, pool=True, pool_padding="valid")
    x = keras.layers.Flatten()(x)
    x = bn(lq.layers.QuantDense(4096, **binary)(x))
    x = bn(lq.layers.QuantDense(4096, **binary)(x))
    x = keras.layers.Activation("clip_by_value_activation")(x)
    x = keras.layers.Dense(NUM_CLASSES, use_bias=True)(x)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x), name="dorefanet")


def binary_alexnet(lq: Any, keras: Any) -> Model:
    """Binary AlexNet (Hubara et al. 2016); the fully connected layers are 1×1 binary convolutions."""
    binary = dict(kernel_quantizer="ste_sign", kernel_constraint="weight_clip", use_bias=False)

    def conv(x: Any, features: int, kernel_size: int, strides: int = 1, pool: bool = False, first: bool = False) -> Any:
        x = lq.layers.QuantConv2D(
            features,
            kernel_size=kernel_size,
            strides=strides,
            padding="same",
            input_quantizer=None if first else "ste_sign",
            **binary,
        )(x)
        if pool:
            x = keras.layers.MaxPool2D(pool_size=3, strides=2)(x)
        return keras.layers.BatchNormalization(scale=False, momentum=0.9)(x)

    inputs = keras.Input(INPUT_SHAPE)
    x = conv(inputs, 64, 11, strides=4, pool=True, first=True)
    x = conv(x, 192, 5, pool=True)
    x = conv(x, 384, 3)
    x = conv(x, 384, 3)
    x = conv(x, 256, 3, pool=True)
    x = keras.layers.Reshape((1, 1, x.shape[-1] * x.shape[-2] * x.shape[-3]))(x)
    for units in (4096, 4096, NUM_CLASSES):
        x = lq.layers.QuantConv2D(units, kernel_size=1, input_quantizer="ste_sign", **binary)(x)
        x = keras.layers.BatchNormalization(scale=False, momentum=0.9)(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(x), name="binary_alexnet")


def meliusnet22(lq: Any, keras: Any) -> Model:
    """MeliusNet22 (Bethge et al. 2020): dense blocks and improvement blocks of 64-channel binary convolutions."""
    binary = _ste_sign_binary(lq, 1.3)

    def bn(x: Any) -> Any:
        return _bn(keras, x)

    def relu(x: Any) -> Any:
        return keras.layers.Activation("relu")(x)

    def pool(x: Any) -> Any:
        return keras.layers.MaxPool2D(2, strides=2, padding="same")(x)

    def group_conv(x: Any, filters: int, groups: int) -> Any:
        width = x.shape[-1] // groups
        parts = [
            keras.layers.Conv2D(filters // groups, 3, padding="same", use_bias=False)(
                keras.layers.Lambda(lambda t, i=i: t[..., i * width : (i + 1) * width])(x)
            )
            for i in range(groups)
        ]
        return keras.layers.Concatenate()(parts)

    def binconv(x: Any) -> Any:
        return lq.layers.QuantConv2D(64, 3, padding="same", use_bias=False, **binary)(bn(x))

    inputs = keras.Input(INPUT_SHAPE)
    x = relu(bn(keras.layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(inputs)))
    x = relu(bn(group_conv(x, 32, 4)))
    x = pool(relu(bn(group_conv(x, 64, 8))))
    for n_blocks, transition in zip((4, 5, 4, 4), (160, 224, 256, None)):
        for _ in range(n_blocks):
            x = keras.layers.Concatenate()([x, binconv(x)])  # dense block
            pads = [[0, 0], [0, 0], [0, 0], [int(x.shape[-1]) - 64, 0]]  # improvement block: onto the last 64
            x = keras.layers.Lambda(lambda xs, pads=pads: xs[0] + tf.pad(xs[1], pads))([x, binconv(x)])
        if transition:
            x = keras.layers.Conv2D(transition, 1, use_bias=False)(relu(pool(bn(x))))
    x = relu(bn(x))
    return keras.Model(inputs, _top(keras, x), name="meliusnet22")


def birealnet_block_net(lq: Any, keras: Any) -> Model:
    """A small Bi-Real Net (two blocks on 16×16 inputs), for comparing outputs with larq itself."""
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, (3, 3), padding="same", use_bias=False)(inputs)
    x = keras.layers.BatchNormalization(momentum=0.8)(x)
    for filters in (8, 16):
        x = birealnet_block(lq, keras, x, filters)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="birealnet_block_net")


def quicknet_block_net(lq: Any, keras: Any) -> Model:
    """A small QuickNet (stem and two residual blocks padded with +1), for comparing outputs with larq itself."""
    binary = _ste_sign_binary(lq, 1.25)
    inputs = keras.Input((16, 16, 3))
    x = lq.layers.QuantConv2D(8, (3, 3), padding="same", strides=2, use_bias=False)(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = lq.layers.QuantDepthwiseConv2D((3, 3), padding="same", use_bias=False)(keras.layers.Activation("relu")(x))
    x = keras.layers.BatchNormalization(scale=False, center=False)(x)
    for _ in range(2):
        x = quicknet_residual_block(lq, keras, x, binary)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Activation("relu")(x))
    return keras.Model(inputs, lq.layers.QuantDense(10)(x), name="quicknet_block_net")


SMALL = {"birealnet_block_net": birealnet_block_net, "quicknet_block_net": quicknet_block_net}


def larq_reference(path: str) -> None:
    """Save, for each small net built with larq, random weights, an input batch and larq's output (``.npz``)."""
    import larq as lq

    rng = np.random.default_rng(0)
    arrays = {}
    for name, build in SMALL.items():
        tf.keras.backend.clear_session()
        model = build(lq, tf.keras)
        weights = [rng.normal(size=w.shape).astype("float32") for w in model.get_weights()]
        for layer in model.layers:  # a batch norm's moving variance must be positive
            if isinstance(layer, tf.keras.layers.BatchNormalization):
                variance = layer.moving_variance
                variance.assign(tf.abs(tf.random.normal(variance.shape, seed=1)) + 0.5)
        names = [w.name for w in model.weights]
        weights = [w.numpy() if "moving_variance" in n else v for w, n, v in zip(model.weights, names, weights)]
        model.set_weights(weights)
        x = rng.uniform(0.1, 1.0, size=(4, 16, 16, 3)).astype("float32") * rng.choice([-1, 1], size=(4, 16, 16, 3))
        arrays[f"{name}/x"] = x
        arrays[f"{name}/y"] = model(x, training=False).numpy()
        for i, w in enumerate(model.get_weights()):
            arrays[f"{name}/w{i:03d}"] = w
    np.savez_compressed(path, **arrays)


BUILDERS: dict[str, Callable[[Any, Any], Model]] = {
    "quicknet_small": lambda lq, keras: quicknet(lq, keras, "small"),
    "quicknet": quicknet,
    "quicknet_large": lambda lq, keras: quicknet(lq, keras, "large"),
    "birealnet": birealnet,
    "binary_resnet_e18": binary_resnet_e18,
    "binary_densenet28": lambda lq, keras: binary_densenet(lq, keras, 28),
    "binary_densenet37": lambda lq, keras: binary_densenet(lq, keras, 37),
    "binary_densenet45": lambda lq, keras: binary_densenet(lq, keras, 45),
    "xnornet": xnornet,
    "dorefanet": dorefanet,
    "binary_alexnet": binary_alexnet,
    "meliusnet22": meliusnet22,
}


def larq_figures(model: Any) -> dict[str, Any]:
    """What ``larq.models.summary`` reports for ``model`` (run in the larq venv)."""
    from larq.models import ModelProfile

    profile = ModelProfile(model)
    return {
        "params_by_bits": {str(b): profile.weight_count(b) for b in profile.unique_param_bidtwidths},
        "trainable_params": profile.weight_count(trainable=True),
        "non_trainable_params": profile.weight_count(trainable=False),
        "memory_bits": profile.memory,
        "macs_by_bits": {str(p): profile.op_count("mac", p) for p in profile.unique_op_precisions},
        "keras_count_params": int(model.count_params()),
    }


def main(argv: list[str]) -> None:
    if "--larq-reference" in argv:
        larq_reference(argv[argv.index("--larq-reference") + 1])
        return
    names = [a for a in argv if not a.startswith("--")] or list(BUILDERS)
    if "--larq" in argv:
        import larq as lq

        results = {}
        for name in names:
            tf.keras.backend.clear_session()
            results[name] = larq_figures(BUILDERS[name](lq, tf.keras))
        print(json.dumps(results, indent=1, sort_keys=True))
        return
    import keras

    import ste
    import ste.larq as lq_ste

    for name in names:
        keras.backend.clear_session()
        s = ste.summary(BUILDERS[name](lq_ste, keras), print_fn=None)
        params, size = PUBLISHED[name]
        print(
            f"{name:18} ste: every variable {s.total_params:>11,}, {s.memory_bytes / 2**20:5.2f} MiB; deployment view "
            f"{s.deployment_params_total:>11,}, {s.deployment_memory_bytes / 2**20:5.2f} MiB   "
            f"larq-zoo: {params:>11,}, {size}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
