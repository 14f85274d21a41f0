"""What larq users bring: pad_values, the layers larq has (and Keras 3 lacks), signatures IDEs can complete, and
clear errors for larq keywords and layers that ste does not take."""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.layers import (
    QuantConv1D,
    QuantConv1DTranspose,
    QuantConv2D,
    QuantConv2DTranspose,
    QuantConv3D,
    QuantConv3DTranspose,
    QuantDense,
    QuantDepthwiseConv2D,
    QuantSeparableConv1D,
    QuantSeparableConv2D,
)
from tests.helpers import run_or_skip_like_parent

pytestmark = pytest.mark.filterwarnings("ignore:.*has a binary")

PARENTS = {
    QuantDense: keras.layers.Dense,
    QuantConv1D: keras.layers.Conv1D,
    QuantConv2D: keras.layers.Conv2D,
    QuantConv3D: keras.layers.Conv3D,
    QuantConv1DTranspose: keras.layers.Conv1DTranspose,
    QuantConv2DTranspose: keras.layers.Conv2DTranspose,
    QuantConv3DTranspose: keras.layers.Conv3DTranspose,
    QuantDepthwiseConv2D: keras.layers.DepthwiseConv2D,
    QuantSeparableConv1D: keras.layers.SeparableConv1D,
    QuantSeparableConv2D: keras.layers.SeparableConv2D,
}
OPTIONS = ("input_quantizer", "kernel_quantizer", "depthwise_quantizer", "pointwise_quantizer", "pad_values")


def test_every_quantized_layer_is_covered_here():
    exported = {getattr(ste.layers, n) for n in ste.layers.__all__}
    quantized = {c for c in exported if isinstance(c, type) and issubclass(c, keras.layers.Layer)}
    assert {c for c in quantized if issubclass(c, ste.layers.QuantLayerMixin)} == set(PARENTS)
    assert quantized - set(PARENTS) == {ste.layers.BatchNormalization}  # not quantized: tested on its own


# ---------------------------------------------------------------------------------------------------------- pad_values


def sign(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, 1.0, -1.0).astype(np.float32)


def same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's "same" padding (checked against Keras by ``test_reference_padding_is_keras_same``)."""
    effective = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + effective - size)
    return total // 2, total - total // 2


def padded(x: np.ndarray, layer, value: float) -> np.ndarray:
    """numpy reference: pad the spatial axes of ``x`` (channels last) for "same" with the constant ``value``."""
    rank = x.ndim - 2
    k, s, d = (tuple(np.broadcast_to(getattr(layer, a), (rank,))) for a in ("kernel_size", "strides", "dilation_rate"))
    pads = [(0, 0)] + [same_pads(x.shape[1 + i], k[i], s[i], d[i]) for i in range(rank)] + [(0, 0)]
    return np.pad(x, pads, constant_values=value)


def valid_parent(layer, cls):
    """The Keras parent with the layer's configuration but padding="valid", carrying the quantized kernels."""
    config = {k: v for k, v in layer.get_config().items() if k not in OPTIONS}
    parent = cls.from_config({**config, "padding": "valid", "name": layer.name + "_valid"})
    return parent


PAD_CASES = [
    (QuantConv1D, dict(filters=3, kernel_size=4, strides=2), (2, 9, 3)),
    (QuantConv2D, dict(filters=4, kernel_size=3), (2, 6, 5, 3)),
    (QuantConv2D, dict(filters=4, kernel_size=(3, 2), strides=2, dilation_rate=1), (2, 7, 6, 2)),
    (QuantConv2D, dict(filters=2, kernel_size=3, dilation_rate=2), (2, 7, 7, 2)),
    (QuantConv3D, dict(filters=2, kernel_size=(2, 3, 3), strides=(2, 1, 2)), (2, 5, 4, 5, 2)),
    (QuantDepthwiseConv2D, dict(kernel_size=3, depth_multiplier=2, strides=2), (2, 6, 7, 3)),
    (QuantSeparableConv1D, dict(filters=4, kernel_size=3), (2, 8, 3)),
    (QuantSeparableConv2D, dict(filters=4, kernel_size=3, strides=2), (2, 5, 6, 3)),
]


def kernel_arguments(cls) -> dict[str, str]:
    return {slot.quantizer: "sign" for slot in cls.slots}


@pytest.mark.parametrize("value", [1.0, -1.0, 0.5])
@pytest.mark.parametrize(("cls", "kwargs", "shape"), PAD_CASES, ids=lambda v: getattr(v, "__name__", None))
def test_pad_values_equals_the_valid_parent_on_the_explicitly_padded_quantized_input(cls, kwargs, shape, value):
    keras.utils.set_random_seed(2)
    layer = cls(
        **kwargs,
        padding="same",
        pad_values=value,
        input_quantizer="ste_sign",
        **kernel_arguments(cls),
        bias_initializer="random_normal",
    )
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    y = layer(x)
    parent = valid_parent(layer, PARENTS[cls])
    reference_input = padded(sign(x), layer, value)
    parent.build(reference_input.shape)
    quantized = layer.quantized_kernels
    parent.set_weights([np.asarray(quantized[w.name]) if w.name in quantized else w.numpy() for w in layer.weights])
    expected = parent(reference_input)
    same = PARENTS[cls].from_config({**parent.get_config(), "padding": "same", "name": "same"})
    assert tuple(y.shape) == tuple(expected.shape) == tuple(same.compute_output_shape(shape))
    np.testing.assert_allclose(y.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("cls", "kwargs", "shape"), PAD_CASES[:3], ids=lambda v: getattr(v, "__name__", None))
def test_reference_padding_is_keras_same(cls, kwargs, shape):
    """The numpy reference above, with zeros, reproduces Keras's own padding="same" (so it is the right padding)."""
    same = PARENTS[cls](**kwargs, padding="same")
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    expected = same(x)
    valid = PARENTS[cls].from_config({**same.get_config(), "padding": "valid", "name": "valid"})
    valid.build(padded(x, same, 0.0).shape)
    valid.set_weights(same.get_weights())
    np.testing.assert_allclose(valid(padded(x, same, 0.0)).numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_pad_values_with_a_size_known_only_at_run_time():
    layer = QuantConv2D(
        3, 3, strides=2, padding="same", pad_values=1.0, input_quantizer="sign", kernel_quantizer="sign"
    )
    run = tf.function(layer, input_signature=[tf.TensorSpec((None, None, None, 2), tf.float32)])
    x = np.random.default_rng(3).normal(size=(2, 7, 6, 2)).astype(np.float32)
    y = run(x)
    parent = valid_parent(layer, keras.layers.Conv2D)
    parent.build(padded(x, layer, 1.0).shape)
    parent.set_weights([layer.quantized_kernel.numpy(), layer.bias.numpy()])
    np.testing.assert_allclose(y.numpy(), parent(padded(sign(x), layer, 1.0)).numpy(), rtol=1e-5, atol=1e-5)


def test_pad_values_channels_first():
    x = np.random.default_rng(5).normal(size=(2, 3, 7, 6)).astype(np.float32)
    layer = QuantConv2D(
        4, 3, strides=2, padding="same", pad_values=1.0, data_format="channels_first", input_quantizer="sign"
    )
    parent_first = keras.layers.Conv2D(4, 3, strides=2, padding="same", data_format="channels_first")
    y = run_or_skip_like_parent(lambda: layer(x), lambda: parent_first(sign(x)))
    channels_last = np.transpose(sign(x), (0, 2, 3, 1))
    parent = keras.layers.Conv2D(4, 3, strides=2)
    parent.build(padded(channels_last, layer, 1.0).shape)
    parent.set_weights([layer.kernel.numpy(), layer.bias.numpy()])
    expected = np.transpose(parent(padded(channels_last, layer, 1.0)).numpy(), (0, 3, 1, 2))
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_pad_values_zero_is_keras_same_padding():
    x = np.random.default_rng(4).normal(size=(2, 6, 6, 2)).astype(np.float32)
    layer = QuantConv2D(3, 3, padding="same", pad_values=0.0, input_quantizer="sign", kernel_quantizer="sign")
    parent = keras.layers.Conv2D(3, 3, padding="same")
    parent.build(x.shape)
    y = layer(x)
    parent.set_weights([layer.quantized_kernel.numpy(), layer.bias.numpy()])
    np.testing.assert_allclose(y.numpy(), parent(sign(x)).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (QuantConv2D, dict(filters=2, kernel_size=3, pad_values=1.0), "only applies with padding='same'"),
        (QuantConv1D, dict(filters=2, kernel_size=3, padding="causal", pad_values=1.0), "padding='causal'"),
        (QuantDepthwiseConv2D, dict(kernel_size=3, padding="valid", pad_values=-1.0), "padding='valid'"),
        (QuantConv2DTranspose, dict(filters=2, kernel_size=3, padding="same", pad_values=1.0), "does not pad"),
        (QuantConv2D, dict(filters=2, kernel_size=3, padding="same", pad_values="one"), "finite number"),
        (QuantConv2D, dict(filters=2, kernel_size=3, padding="same", pad_values=float("nan")), "finite number"),
    ],
)
def test_pad_values_errors_at_construction(cls, kwargs, match):
    with pytest.raises(ste.errors.ParameterError, match=match):
        cls(**kwargs)


# -------------------------------------------------------------------------------------- saving, export and summaries


def new_layers_model() -> keras.Model:
    keras.utils.set_random_seed(5)
    inputs = keras.Input((4, 4, 4, 2))
    h = QuantConv3D(
        3, 2, padding="same", pad_values=1.0, input_quantizer="ste_sign", kernel_quantizer="ste_sign", name="c3"
    )(inputs)
    h = QuantConv3DTranspose(2, 2, strides=(1, 2, 2), padding="same", kernel_quantizer="lsq(bits=3)", name="t3")(h)
    h = keras.layers.Reshape((4 * 8 * 8, 2))(h)
    h = QuantConv1DTranspose(2, 3, strides=2, padding="same", kernel_quantizer="ste_tern", name="t1")(h)
    h = QuantSeparableConv1D(
        3,
        2,
        strides=4,
        padding="same",
        pad_values=1.0,
        input_quantizer="ste_sign",
        depthwise_quantizer="sign",
        pointwise_quantizer="sign",
        name="s1",
    )(h)
    h = keras.layers.Reshape((16, 8, 3))(h)
    outputs = QuantConv2DTranspose(
        2, 3, padding="same", input_quantizer="ste_sign", kernel_quantizer="sign", name="t2"
    )(h)
    return keras.Model(inputs, outputs)


def test_new_layers_save_load_and_export(tmp_path):
    model = new_layers_model()
    x = np.random.default_rng(6).normal(size=(2, 4, 4, 4, 2)).astype(np.float32)
    expected = model(x).numpy()
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.get_layer("c3").pad_values == 1.0 and loaded.get_layer("s1").pad_values == 1.0
    np.testing.assert_array_equal(loaded(x).numpy(), expected)
    model.export(str(tmp_path / "exported"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "exported"))
    np.testing.assert_allclose(served.serve(tf.constant(x)).numpy(), expected, rtol=1e-5, atol=1e-5)
    exported = ste.export_quantized_weights(model)
    np.testing.assert_array_equal(exported["c3"]["kernel"], sign(model.get_layer("c3").kernel.numpy()))
    assert set(exported["s1"]) == {"depthwise_kernel", "pointwise_kernel"}


def test_summary_counts_the_new_layers():
    rows = {row.name: row for row in ste.summary(new_layers_model(), print_fn=None).layers}
    # Conv3D: 4·4·4 output positions × (2·2·2·2·3) binary weights, binary input
    assert rows["c3"].params == {1: 48, 32: 3} and rows["c3"].macs == {1: 64 * 48}
    # Conv3DTranspose: each of the 4·4·4 input positions scatters the 2·2·2·2·3 kernel, on a float input;
    # float32: 2 biases + LSQ's step and its initialized flag
    assert rows["t3"].params == {3: 48, 32: 2 + 2} and rows["t3"].macs == {32: 64 * 48}
    # Conv1DTranspose on 256 input positions with a 3·2·2 ternary kernel
    assert rows["t1"].params == {2: 12, 32: 2} and rows["t1"].macs == {32: 256 * 12}
    # SeparableConv1D: 128 output positions; depthwise 2·2·1 binary on a binary input, pointwise 2·3 on a float input
    assert rows["s1"].params == {1: 4 + 6, 32: 3}
    assert rows["s1"].macs == {1: 128 * 4, 32: 128 * 2 * 3}
    assert rows["t2"].macs == {1: 16 * 8 * 3 * 3 * 3 * 2}


# -------------------------------------------------------------------------------------------- signatures and keywords


@pytest.mark.parametrize("cls", list(PARENTS), ids=lambda c: c.__name__)
def test_signature_lists_the_parent_parameters_and_the_quantizer_options(cls):
    parent = inspect.signature(PARENTS[cls]).parameters
    own = inspect.signature(cls).parameters
    listed = [name for name in parent if name != "kwargs"]
    assert list(own)[: len(listed)] == listed
    for name in listed:
        assert own[name].default == parent[name].default and own[name].kind == parent[name].kind
    options = [p for p in own.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    expected = {"input_quantizer", *(slot.quantizer for slot in cls.slots)}
    assert expected <= {p.name for p in options}
    assert all(p.default is None for p in options if p.name.endswith("_quantizer"))
    is_conv = cls is not QuantDense
    assert ("pad_values" in own) == is_conv and (not is_conv or own["pad_values"].default == 0.0)
    assert list(own)[-1] == "kwargs" and own["kwargs"].kind is inspect.Parameter.VAR_KEYWORD


def test_a_subclass_keeps_its_own_init_signature_and_instances_their_call_signature():
    class Scaled(QuantConv2D):
        def __init__(self, filters, scale=2.0, **kwargs):
            super().__init__(filters, 3, **kwargs)
            self.scale = scale

    assert list(inspect.signature(Scaled).parameters) == ["filters", "scale", "kwargs"]
    layer = QuantConv2D(2, 3)
    assert list(inspect.signature(layer).parameters) == list(inspect.signature(keras.layers.Conv2D(2, 3)).parameters)
    clone = keras.models.clone_model(
        keras.Sequential([keras.Input((5, 5, 1)), QuantConv2D(2, 3, padding="same", pad_values=1.0)])
    )
    assert clone.layers[0].pad_values == 1.0


def test_positional_arguments_bind_as_in_the_parent():
    layer = QuantConv2D(4, 3, 2, "same", input_quantizer="sign", kernel_quantizer="sign")
    assert (layer.filters, layer.kernel_size, layer.strides, layer.padding) == (4, (3, 3), (2, 2), "same")
    assert inspect.signature(QuantConv2D).bind(4, 3, 2, "same", pad_values=1.0, name="c").arguments["padding"] == "same"


@pytest.mark.parametrize(
    ("cls", "kwargs", "keyword"),
    [
        (QuantDense, dict(units=2, pad_values=1.0), "pad_values"),
        (QuantConv2D, dict(filters=2, kernel_size=3, pointwise_quantizer="sign"), "pointwise_quantizer"),
        (QuantSeparableConv2D, dict(filters=2, kernel_size=3, kernel_quantizer="sign"), "kernel_quantizer"),
        (QuantConv1D, dict(filters=2, kernel_size=3, implementation=2), "implementation"),
    ],
)
def test_larq_keywords_ste_does_not_take_name_themselves_and_the_migration_page(cls, kwargs, keyword):
    with pytest.raises(ste.errors.ParameterError, match=rf"{keyword}=.*docs/larq\.md"):
        cls(**kwargs)


def test_larq_depthwise_quantizer_spelling_and_both_spellings_refused():
    layer = ste.larq.layers.QuantDepthwiseConv2D(3, depthwise_quantizer="ternary(threshold=0.3)")
    assert isinstance(layer.kernel_quantizer, ste.quantizers.Ternary) and layer.kernel_quantizer.threshold == 0.3
    with pytest.raises(ste.errors.ParameterError, match="not both"):
        ste.larq.layers.QuantDepthwiseConv2D(3, kernel_quantizer="sign", depthwise_quantizer="sign")
    with pytest.raises(ste.errors.ParameterError, match="depthwise_quantizer=.*ste.larq.layers"):
        QuantDepthwiseConv2D(3, depthwise_quantizer="sign")  # ste's layer: ste's name only


@pytest.mark.parametrize("name", ["QuantLocallyConnected1D", "QuantLocallyConnected2D"])
def test_locally_connected_layers_say_keras_3_has_none(name):
    with pytest.raises(ste.errors.UnsupportedLayerError, match=f"{name}.*Keras 3"):
        getattr(ste.layers, name)
    with pytest.raises(ste.errors.UnsupportedLayerError, match="LocallyConnected layers, which Keras 3 removed"):
        exec(f"from ste.layers import {name}")
    assert not hasattr(keras.layers, "LocallyConnected2D")  # the premise: Keras 3 has no such parent
    with pytest.raises(AttributeError):
        _ = ste.layers.QuantDoesNotExist
