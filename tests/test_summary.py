"""ste.summary: bit widths, parameter counts, memory and MACs against counts done by hand."""

from __future__ import annotations

import keras
import pytest

import ste


def model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            ste.layers.QuantConv2D(
                4, 3, input_quantizer="sign", kernel_quantizer="sign", kernel_constraint="weight_clip", name="conv"
            ),
            keras.layers.Flatten(name="flat"),
            keras.layers.BatchNormalization(name="bn"),
            ste.layers.QuantDense(10, kernel_quantizer="dorefa(bits=4, mode='weights')", name="dense4"),
            keras.layers.Dense(2, name="float_dense"),
        ],
        name="net",
    )


def test_per_layer_counts():
    printed = []
    result = ste.summary(model(), print_fn=printed.append)
    rows = {row.name: row for row in result.layers}
    # conv: 3·3·3·4 = 108 binary weights, 4 float biases; output 6×6 positions × 108 MACs, binary × binary
    assert rows["conv"].params == {1: 108, 32: 4}
    assert rows["conv"].macs == {1: 36 * 108}
    assert (rows["conv"].input_bits, rows["conv"].kernel_bits) == (1, (1,))
    assert rows["conv"].memory_bytes == (108 * 1 + 4 * 32) / 8 and rows["conv"].float32_bytes == 112 * 4
    assert rows["flat"].params == {} and rows["flat"].macs == {}
    assert rows["bn"].params == {32: 4 * 144}
    # dense4: 144·10 4-bit weights on a float input -> the MACs are at 32 bits
    assert rows["dense4"].params == {4: 1440, 32: 10} and rows["dense4"].macs == {32: 1440}
    assert rows["float_dense"].params == {32: 22} and rows["float_dense"].macs == {32: 20}
    assert result.params == {1: 108, 4: 1440, 32: 4 + 576 + 10 + 22}
    assert result.macs == {1: 3888, 32: 1460}
    quantized_bits = 108 + 4 * 1440 + 32 * (4 + 576 + 10 + 22)
    assert result.memory_bytes == quantized_bits / 8
    assert result.float32_bytes == (108 + 1440 + 612) * 4
    assert result.compression_ratio == pytest.approx((108 + 1440 + 612) * 32 / quantized_bits)
    assert printed == [str(result)]
    assert "compression ratio" in printed[0] and "conv" in printed[0] and "1b:3,888" in printed[0]


def test_separable_convolution_counts_pointwise_macs_on_the_float_depthwise_output():
    net = keras.Sequential(
        [
            keras.Input((5, 5, 3)),
            ste.layers.QuantSeparableConv2D(
                4,
                3,
                input_quantizer="sign",
                depthwise_quantizer="sign",
                pointwise_quantizer="ternary",
                depthwise_constraint="weight_clip",
                name="sep",
            ),
        ]
    )
    (row,) = ste.summary(net, print_fn=None).layers
    assert row.params == {1: 27, 2: 12, 32: 4}
    assert row.macs == {1: 9 * 27, 32: 9 * 3 * 4}
    assert row.kernel_bits == (1, 2)


def test_dense_on_a_sequence_counts_every_position():
    net = keras.Sequential([keras.Input((7, 5)), ste.layers.QuantDense(3, kernel_quantizer="ternary", name="d")])
    (row,) = ste.summary(net, print_fn=None).layers
    assert row.params == {2: 15, 32: 3} and row.macs == {32: 7 * 15}


def test_unbuilt_model_raises():
    with pytest.raises(ste.errors.NotBuiltError, match="not built"):
        ste.summary(keras.Sequential([keras.layers.Dense(2)]))


def test_batch_norm_every_variable_counted_deployment_view_folds_gamma_and_beta():
    # 32 channels, scale=False: beta, moving mean, moving variance -> 96 stored values; larq counts 64 (issue 12)
    net = keras.Sequential([keras.Input((5, 32)), keras.layers.BatchNormalization(scale=False, name="bn")])
    (row,) = ste.summary(net, print_fn=None).layers
    assert row.params == {32: 96} and row.trainable_params == 32 and row.non_trainable_params == 64
    assert row.deployment_params == {32: 64}
    full = keras.Sequential([keras.Input((5, 32)), keras.layers.BatchNormalization()])
    result = ste.summary(full, print_fn=None)
    assert result.total_params == full.count_params() == 128
    assert (result.trainable_params, result.non_trainable_params) == (64, 64)
    assert result.deployment_params == {32: 64} and result.deployment_memory_bytes == 64 * 4


def test_output_shapes_and_trainable_split():
    net = model()
    net.get_layer("float_dense").trainable = False
    result = ste.summary(net, print_fn=None)
    rows = {row.name: row for row in result.layers}
    assert rows["conv"].output_shape == (None, 6, 6, 4)
    assert rows["flat"].output_shape == (None, 144)
    assert rows["float_dense"].output_shape == (None, 2)
    trainable = sum(int(w.numpy().size) for w in net.trainable_weights)
    assert result.trainable_params == trainable and result.total_params == net.count_params()
    assert result.non_trainable_params == 22 + 2 * 144  # the frozen dense layer + batch norm's moving statistics


def test_printed_footer_states_conventions():
    printed: list[str] = []
    result = ste.summary(model(), print_fn=printed.append)
    text = printed[0]
    ratio = (108 + 1440 + 612) * 32 / (108 + 4 * 1440 + 32 * 612)
    assert f"compression ratio {ratio:.2f}x (float32 size / quantized size; larq prints the reciprocal, " in text
    assert f"{1 / ratio:.4f})" in text
    assert f"Parameters: {result.total_params:,} (trainable " in text
    assert "Deployment view (batch norm folded" in text and f"{result.deployment_params_total:,} parameters" in text
    assert "(None, 6, 6, 4)" in text
    quiet: list[str] = []
    ste.summary(model(), print_fn=quiet.append, include_macs=False)
    assert "MACs" not in quiet[0]


def test_subclassed_model_built_without_building_its_layers_raises():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = ste.layers.QuantDense(3, kernel_quantizer="ste_sign", kernel_constraint="weight_clip")

        def call(self, x):
            return self.dense(x)

    with pytest.raises(ste.errors.NotBuiltError, match="not built"):
        ste.summary(Net())
    net = Net()
    with pytest.warns(UserWarning):  # Keras: build() without a build method leaves the sublayers unbuilt
        net.build((None, 4))
    with pytest.raises(ste.errors.NotBuiltError, match="call the model on a batch"):
        ste.summary(net)
    net(keras.ops.zeros((1, 4)))
    assert ste.summary(net, print_fn=None).params == {1: 12, 32: 3}
