"""ste.export_quantized_weights: the quantized kernels of every quantized layer, nested models included."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import ste


def test_exports_quantized_kernels_by_layer_name():
    inner = keras.Sequential(
        [
            keras.Input((4,)),
            ste.layers.QuantDense(3, kernel_quantizer="sign", kernel_constraint="weight_clip", name="binary"),
        ],
        name="inner",
    )
    inputs = keras.Input((4,))
    h = inner(inputs)
    h = keras.layers.Dense(3, name="plain")(h)
    h = ste.layers.QuantDense(2, name="unquantized")(h)
    outputs = ste.layers.QuantDense(2, kernel_quantizer="dorefa(bits=2, mode='weights')", name="dorefa")(h)
    model = keras.Model(inputs, outputs)

    exported = ste.export_quantized_weights(model)
    assert set(exported) == {"inner/binary", "unquantized", "dorefa"}
    latent = inner.get_layer("binary").kernel.numpy()
    np.testing.assert_array_equal(exported["inner/binary"]["kernel"], np.where(latent >= 0, 1.0, -1.0))
    np.testing.assert_array_equal(exported["unquantized"]["kernel"], model.get_layer("unquantized").kernel.numpy())
    assert set(np.round(exported["dorefa"]["kernel"] * 3).ravel()) <= {-3.0, -1.0, 1.0, 3.0}

    as_int = ste.export_quantized_weights(model, dtype="int8")
    assert as_int["inner/binary"]["kernel"].dtype == np.int8
    assert set(as_int["inner/binary"]["kernel"].ravel()) <= {-1, 1}


def test_separable_layers_export_both_kernels():
    layer = ste.layers.QuantSeparableConv2D(
        2,
        3,
        depthwise_quantizer="ternary(threshold=0.1)",
        pointwise_quantizer="sign",
        pointwise_constraint="weight_clip",
    )
    model = keras.Sequential([keras.Input((5, 5, 2)), layer])
    kernels = ste.export_quantized_weights(model)[layer.name]
    assert set(kernels) == {"depthwise_kernel", "pointwise_kernel"}
    dw = layer.depthwise_kernel.numpy()
    np.testing.assert_array_equal(kernels["depthwise_kernel"], np.where(dw >= 0.1, 1, np.where(dw <= -0.1, -1, 0)))
    np.testing.assert_array_equal(layer.quantized_pointwise_kernel.numpy(), kernels["pointwise_kernel"])


# ------------------------------------------------------------------------------------------ packed=True (issue 19)


def packable_model(dtype: str = "float32") -> keras.Model:
    keras.utils.set_random_seed(3)
    clip = {"kernel_constraint": "weight_clip"}
    inputs = keras.Input((5, 5, 3))
    h = ste.layers.QuantConv2D(4, 3, kernel_quantizer="magnitude_aware_sign", name="scaled", dtype=dtype, **clip)(
        inputs
    )
    h = keras.layers.Flatten()(h)
    h = ste.layers.QuantDense(7, kernel_quantizer="sign", name="binary", dtype=dtype, **clip)(h)
    h = ste.layers.QuantDense(6, kernel_quantizer="absmean_ternary", name="bitnet", dtype=dtype)(h)
    h = ste.layers.QuantDense(5, kernel_quantizer="ternary(threshold=0.2)", name="tern", dtype=dtype)(h)
    h = ste.layers.QuantDense(3, kernel_quantizer="dorefa(bits=2, mode='weights')", name="dorefa", dtype=dtype)(h)
    return keras.Model(inputs, ste.layers.QuantDense(2, name="plain", dtype=dtype)(h))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_packed_export_round_trips_exactly_in_1_and_2_bits(dtype):
    model = packable_model(dtype)
    plain = ste.export_quantized_weights(model)
    packed = ste.export_quantized_weights(model, packed=True)
    assert {
        name: kernels["kernel"]["bits"] for name, kernels in packed.items() if isinstance(kernels["kernel"], dict)
    } == {
        "scaled": 1,  # ±α per output channel
        "binary": 1,
        "bitnet": 2,  # {−γ, 0, γ} per tensor
        "tern": 2,
    }
    assert isinstance(packed["dorefa"]["kernel"], np.ndarray) and isinstance(packed["plain"]["kernel"], np.ndarray)
    assert np.signbit(plain["bitnet"]["kernel"].astype(np.float64)[plain["bitnet"]["kernel"] == 0]).any()  # a −0
    restored = ste.unpack_quantized_weights(packed)
    for name, kernels in plain.items():
        got = restored[name]["kernel"]
        assert got.dtype == kernels["kernel"].dtype and got.shape == kernels["kernel"].shape
        assert got.tobytes() == kernels["kernel"].tobytes(), name  # byte for byte: the sign of zeros too
    for name, entry in packed.items():
        kernel = entry["kernel"]
        if isinstance(kernel, dict):
            n = plain[name]["kernel"].size
            assert kernel["codes"].nbytes == -(-n * kernel["bits"] // 8)  # ≤ 2 bits per weight, rounded up to bytes
            assert kernel["scale"].size in (1, plain[name]["kernel"].shape[-1])
    assert packed["bitnet"]["kernel"]["scale"].shape == () and packed["binary"]["kernel"]["scale"].shape == ()
    assert packed["scaled"]["kernel"]["scale"].shape == (4,)


def test_packed_layout_is_little_endian_codes():
    layer = ste.layers.QuantDense(2, kernel_quantizer="sign", kernel_constraint="weight_clip", use_bias=False)
    model = keras.Sequential([keras.Input((2,)), layer])
    layer.kernel.assign([[0.5, -0.5], [-0.5, 0.0]])  # signs +1 −1 −1 +1, flattened in C order
    entry = ste.export_quantized_weights(model, packed=True)[layer.name]["kernel"]
    assert entry["bits"] == 1 and entry["codes"].tolist() == [0b1001] and float(entry["scale"]) == 1.0
    ternary = ste.layers.QuantDense(2, kernel_quantizer="ternary(threshold=0.5)", use_bias=False)
    model = keras.Sequential([keras.Input((2,)), ternary])
    ternary.kernel.assign([[0.9, 0.1], [-0.9, -0.1]])  # +1, 0, −1, −0 (sign(sign(x+Δ)+sign(x−Δ)) keeps x's zero sign)
    entry = ste.export_quantized_weights(model, packed=True)[ternary.name]["kernel"]
    codes = [(entry["codes"][0] >> shift) & 3 for shift in (0, 2, 4, 6)]
    want = [1, 0, 2, 3 if np.signbit(ste.export_quantized_weights(model)[ternary.name]["kernel"][1, 1]) else 0]
    assert entry["bits"] == 2 and codes == want


def test_packed_int8_export_and_errors():
    model = packable_model()
    as_int = ste.export_quantized_weights(model, dtype="int8", packed=True)
    assert as_int["binary"]["kernel"]["bits"] == 1 and as_int["binary"]["kernel"]["scale"].dtype == np.int8
    restored = ste.unpack_quantized_weights(as_int)
    np.testing.assert_array_equal(
        restored["binary"]["kernel"], ste.export_quantized_weights(model, "int8")["binary"]["kernel"]
    )
    with pytest.raises(ste.errors.ParameterError, match="packed must be True or False"):
        ste.export_quantized_weights(model, packed="yes")
    with pytest.raises(ste.errors.ParameterError, match="binary/kernel.*neither an array nor a packed kernel"):
        ste.unpack_quantized_weights({"binary": {"kernel": {"bits": 3}}})
    cut = {**as_int["binary"]["kernel"], "codes": as_int["binary"]["kernel"]["codes"][:-1]}
    with pytest.raises(ste.errors.ParameterError, match=r"binary/kernel holds .* code bytes"):
        ste.unpack_quantized_weights({"binary": {"kernel": cut}})
    with pytest.raises(ste.errors.ParameterError, match="expected the dict"):
        ste.unpack_quantized_weights([1, 2])
