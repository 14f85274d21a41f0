"""larq 0.14's larq/layers_test.py under ``import ste.larq as lq`` (``tf.keras`` -> ``keras``).

Not ported, with the reason in docs/larq.md: the LocallyConnected layers (Keras 3 removed them) and larq's graph-mode
runs (TF1). larq's ``mocker.spy(tf, "pad")`` checks an implementation detail; here the padded value itself is
checked instead (a pad of 1.0 changes the output of an all-zero input).
"""

from __future__ import annotations

import inspect
import warnings

import keras
import numpy as np
import pytest

import ste.larq as lq

RNG = np.random.default_rng(0)


def random_input(shape):  # larq's testing_utils.random_input
    return (10 * RNG.random(shape) - 0.5).astype("float32")


PARAMS_ALL_LAYERS = [
    (lq.layers.QuantDense, keras.layers.Dense, (3, 2), dict(units=3)),
    (lq.layers.QuantConv1D, keras.layers.Conv1D, (2, 3, 7), dict(filters=2, kernel_size=3)),
    (lq.layers.QuantConv2D, keras.layers.Conv2D, (2, 3, 7, 6), dict(filters=2, kernel_size=3)),
    (lq.layers.QuantConv3D, keras.layers.Conv3D, (2, 3, 7, 6, 5), dict(filters=2, kernel_size=3)),
    (lq.layers.QuantConv2DTranspose, keras.layers.Conv2DTranspose, (2, 3, 7, 6), dict(filters=2, kernel_size=3)),
    (lq.layers.QuantConv3DTranspose, keras.layers.Conv3DTranspose, (2, 3, 7, 6, 5), dict(filters=2, kernel_size=3)),
]
PARAMS_SEP_LAYERS = [
    (lq.layers.QuantSeparableConv1D, keras.layers.SeparableConv1D, (2, 3, 7)),
    (lq.layers.QuantSeparableConv2D, keras.layers.SeparableConv2D, (2, 3, 7, 6)),
]


def layer_test(layer_cls, kwargs, input_data, run_eagerly):
    """larq's testing_utils.layer_test, reduced to what its callers read: the output of a model of the layer, by
    predict (compiled or eager), and a config round trip giving the same output."""
    model = keras.Sequential([keras.Input(input_data.shape[1:]), layer_cls(**kwargs)])
    model.compile(run_eagerly=run_eagerly)
    output = model.predict(input_data, verbose=0)
    clone = keras.Sequential.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone.predict(input_data, verbose=0), output, rtol=1e-6)
    return output


pytestmark = pytest.mark.filterwarnings("ignore:.*has a binary")


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["graph", "eager"])
class TestLayers:
    @pytest.mark.parametrize("quantized_layer, layer, input_shape, kwargs", PARAMS_ALL_LAYERS)
    def test_binarization(self, quantized_layer, layer, input_shape, kwargs, run_eagerly):
        input_data = random_input(input_shape)
        random_weight = RNG.random() - 0.5
        with lq.context.metrics_scope(["flip_ratio"]):
            quant_output = layer_test(
                quantized_layer,
                dict(
                    **kwargs,
                    kernel_quantizer="ste_sign",
                    input_quantizer="ste_sign",
                    kernel_initializer=keras.initializers.Constant(random_weight),
                ),
                input_data,
                run_eagerly,
            )
        fp_model = keras.Sequential(
            [
                keras.Input(input_shape[1:]),
                layer(**kwargs, kernel_initializer=keras.initializers.Constant(np.sign(random_weight))),
            ]
        )
        np.testing.assert_allclose(quant_output, fp_model.predict(np.sign(input_data), verbose=0), rtol=1e-6)

    @pytest.mark.parametrize("quantized_layer, layer, input_shape", PARAMS_SEP_LAYERS)
    def test_separable_layers(self, quantized_layer, layer, input_shape, run_eagerly):
        input_data = random_input(input_shape)
        random_d_kernel, random_p_kernel = RNG.random() - 0.5, RNG.random() - 0.5
        with lq.context.metrics_scope(["flip_ratio"]):
            quant_output = layer_test(
                quantized_layer,
                dict(
                    filters=3,
                    kernel_size=3,
                    depthwise_quantizer="ste_sign",
                    pointwise_quantizer="ste_sign",
                    input_quantizer="ste_sign",
                    depthwise_initializer=keras.initializers.Constant(random_d_kernel),
                    pointwise_initializer=keras.initializers.Constant(random_p_kernel),
                ),
                input_data,
                run_eagerly,
            )
        fp_model = keras.Sequential(
            [
                keras.Input(input_shape[1:]),
                layer(
                    filters=3,
                    kernel_size=3,
                    depthwise_initializer=keras.initializers.Constant(np.sign(random_d_kernel)),
                    pointwise_initializer=keras.initializers.Constant(np.sign(random_p_kernel)),
                ),
            ]
        )
        np.testing.assert_allclose(quant_output, fp_model.predict(np.sign(input_data), verbose=0), rtol=1e-6)

    def test_depthwise_layers(self, run_eagerly):
        input_data = random_input((2, 3, 7, 6))
        random_weight = RNG.random() - 0.5
        with lq.context.metrics_scope(["flip_ratio"]):
            quant_output = layer_test(
                lq.layers.QuantDepthwiseConv2D,
                dict(
                    kernel_size=3,
                    depthwise_quantizer="ste_sign",
                    input_quantizer="ste_sign",
                    depthwise_initializer=keras.initializers.Constant(random_weight),
                ),
                input_data,
                run_eagerly,
            )
        fp_model = keras.Sequential(
            [
                keras.Input(input_data.shape[1:]),
                keras.layers.DepthwiseConv2D(
                    kernel_size=3, depthwise_initializer=keras.initializers.Constant(np.sign(random_weight))
                ),
            ]
        )
        np.testing.assert_allclose(quant_output, fp_model.predict(np.sign(input_data), verbose=0), rtol=1e-6)


PADDED_LAYERS = [
    (lq.layers.QuantConv1D, 3),
    (lq.layers.QuantConv2D, 4),
    (lq.layers.QuantConv3D, 5),
    (lq.layers.QuantSeparableConv1D, 3),
    (lq.layers.QuantSeparableConv2D, 4),
    (lq.layers.QuantDepthwiseConv2D, 4),
]


@pytest.mark.parametrize("layer_cls, input_dim", PADDED_LAYERS)
@pytest.mark.parametrize("dilation", [True, False])
def test_non_zero_padding_layers(layer_cls, input_dim, dilation):
    inputs = np.zeros(RNG.integers(5, 20, size=input_dim), np.float32)
    kernel = tuple(int(k) for k in RNG.integers(3, 7, size=input_dim - 2))
    rand_tuple = tuple(int(r) for r in RNG.integers(1, 4, size=input_dim - 2))
    if not dilation and layer_cls in (lq.layers.QuantSeparableConv2D, lq.layers.QuantDepthwiseConv2D):
        rand_tuple = int(rand_tuple[0])
    kwargs = {"dilation_rate": rand_tuple} if dilation else {"strides": rand_tuple}
    args = (kernel,) if layer_cls == lq.layers.QuantDepthwiseConv2D else (2, kernel)
    ref_layer = layer_cls(*args, padding="same", **kwargs)
    layer = layer_cls(*args, padding="same", pad_values=1.0, **kwargs)
    layer.build(inputs.shape)
    output = layer(inputs)
    assert output.shape == ref_layer(inputs).shape
    layer.set_weights([np.ones_like(w) if w.ndim > 1 else w for w in layer.get_weights()])  # ones kernels, 0 bias
    padded = np.asarray(layer(inputs))
    # larq's "same" padding: total = max((ceil(n / s) - 1)·s + (k - 1)·d + 1 - n, 0) per spatial axis
    strides = np.broadcast_to(kwargs.get("strides", 1), input_dim - 2)
    dilations = np.broadcast_to(kwargs.get("dilation_rate", 1), input_dim - 2)
    sizes = inputs.shape[1:-1]
    totals = [
        max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0) for n, s, k, d in zip(sizes, strides, kernel, dilations)
    ]
    # the zero input's border is padded with 1.0: the output is non-zero exactly where some padding is needed
    assert (padded.max() > 0) == (max(totals) > 0)


@pytest.mark.parametrize("layer_cls, input_dim", PADDED_LAYERS)
@pytest.mark.parametrize("static", [True, False])
def test_non_zero_padding_shapes(layer_cls, input_dim, data_format, static):
    args = (3,) if layer_cls == lq.layers.QuantDepthwiseConv2D else (16, 3)
    layer = layer_cls(*args, padding="same", pad_values=1.0, data_format=data_format)
    rank = input_dim - 2
    input_shape = [32 if static else None] * rank + [3]
    if data_format == "channels_first":
        input_shape = list(reversed(input_shape))
    output = layer(keras.Input(shape=input_shape))
    if static:
        for dim in output.shape[1:]:
            assert dim is not None


def _construction_warnings(build):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build()
    return " ".join(str(w.message) for w in caught)


class TestLayerWarns:
    """larq logs the warning when the layer is constructed; ``ste.larq`` warns (``warnings.warn``) then too."""

    def test_layer_warns(self):
        assert "kernel_constraint" in _construction_warnings(
            lambda: lq.layers.QuantDense(5, kernel_quantizer="ste_sign")
        )

    def test_layer_does_not_warn(self):
        text = _construction_warnings(
            lambda: lq.layers.QuantDense(5, kernel_quantizer="ste_sign", kernel_constraint="weight_clip")
        )
        assert "kernel_constraint" not in text

    def test_depthwise_layer_warns(self):
        text = _construction_warnings(lambda: lq.layers.QuantDepthwiseConv2D(5, depthwise_quantizer="ste_sign"))
        assert "depthwise_constraint" in text

    def test_depthwise_layer_does_not_warn(self):
        text = _construction_warnings(
            lambda: lq.layers.QuantDepthwiseConv2D(
                5, depthwise_quantizer="ste_sign", depthwise_constraint="weight_clip"
            )
        )
        assert "depthwise_constraint" not in text

    def test_separable_layer_warns(self):
        text = _construction_warnings(
            lambda: lq.layers.QuantSeparableConv2D(3, 3, depthwise_quantizer="ste_sign", pointwise_quantizer="ste_sign")
        )
        assert "depthwise_constraint" in text and "pointwise_constraint" in text

    def test_separable_layer_does_not_warn(self):
        text = _construction_warnings(
            lambda: lq.layers.QuantSeparableConv2D(
                3,
                3,
                depthwise_quantizer="ste_sign",
                pointwise_quantizer="ste_sign",
                depthwise_constraint="weight_clip",
                pointwise_constraint="weight_clip",
            )
        )
        assert text == ""

    def test_unclipped_and_noop_kernels_warn_as_larq(self):
        # larq's rule: every binary quantizer but NoOp, whatever its gradient (ste.layers warns only for a clipped one)
        assert "kernel_constraint" in _construction_warnings(
            lambda: lq.layers.QuantDense(5, kernel_quantizer=lq.quantizers.SteSign(clip_value=None))
        )
        assert _construction_warnings(lambda: lq.layers.QuantDense(5, kernel_quantizer=lq.quantizers.NoOp(1))) == ""

    def test_no_second_warning_when_built(self):
        layer = lq.layers.QuantDense(5, kernel_quantizer="ste_sign")
        assert _construction_warnings(lambda: layer(np.ones((1, 2), "float32"))) == ""

    def test_conv1d_non_zero_padding_raises(self):
        with pytest.raises(ValueError, match=r".*pad_values.*"):
            lq.layers.QuantConv1D(24, 3, padding="causal", pad_values=1.0)

    @pytest.mark.parametrize("layer", [lq.layers.QuantConv1D, lq.layers.QuantConv2D, lq.layers.QuantConv3D])
    def test_groups(self, layer):
        assert layer(24, 3, groups=2).groups == 2


@pytest.mark.parametrize(
    "quant_layer,layer",
    [
        (lq.layers.QuantDense, keras.layers.Dense),
        (lq.layers.QuantConv1D, keras.layers.Conv1D),
        (lq.layers.QuantConv2D, keras.layers.Conv2D),
        (lq.layers.QuantConv3D, keras.layers.Conv3D),
        (lq.layers.QuantConv2DTranspose, keras.layers.Conv2DTranspose),
        (lq.layers.QuantConv3DTranspose, keras.layers.Conv3DTranspose),
        (lq.layers.QuantDepthwiseConv2D, keras.layers.DepthwiseConv2D),
    ],
)
def test_layer_kwargs(quant_layer, layer):
    quant_params = inspect.signature(quant_layer).parameters
    params = inspect.signature(layer).parameters
    ignored = ["input_quantizer", "kernel_quantizer", "depthwise_quantizer", "pointwise_quantizer", "pad_values"]
    ignored.append("metrics")  # larq takes it on quantizers; ste's layers take it too
    quant_params_list = [p for p in quant_params if p not in ignored]
    assert quant_params_list == list(params)
    for param in params:
        assert quant_params[param].default == params[param].default


def test_larq_layer_config_loads():
    """A QuantDense config saved by larq 0.14 (its quantizer and constraint configs name larq's modules)."""
    from tests.larq_port.conftest import REFERENCE

    config = dict(REFERENCE["dense_config"])
    layer = lq.layers.QuantDense.from_config(config)
    assert isinstance(layer.kernel_quantizer, lq.quantizers.SteTern)
    assert isinstance(layer.input_quantizer, lq.quantizers.SteSign)
    assert layer.kernel_constraint == lq.constraints.WeightClip(1.0)
    assert layer.units == 3 and not layer.use_bias
