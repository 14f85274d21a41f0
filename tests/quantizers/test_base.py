"""Quantizers by name and spec string, Keras serialization, and what a Quantizer layer does with dtypes."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
from ste import quantizers as q

ALL_SPECS = [
    "sign",
    "sign(surrogate='approx_sign')",
    "sign(surrogate='sigmoid_surrogate(beta=4.0)')",
    "heaviside",
    "ternary(threshold=0.1)",
    "ternary(ternary_weight_networks=True)",
    "magnitude_aware_sign",
    "dorefa(bits=4, mode='activations')",
    "dorefa(bits=3, mode='weights')",
    "uniform(bits=4, min=-2.0, max=2.0)",
    "lsq(bits=4, signed=False)",
    "pact(bits=3, alpha=2.0)",
    "ste_sign(clip_value=None)",
    "approx_sign",
    "swish_sign(beta=2.0)",
    "ste_heaviside",
    "ste_tern(threshold_value=0.2)",
    "dorefa_quantizer(k_bit=3)",
]


def test_names_lists_native_and_larq_quantizers():
    assert set(q.names()) >= {
        "sign",
        "heaviside",
        "ternary",
        "magnitude_aware_sign",
        "dorefa",
        "uniform",
        "lsq",
        "pact",
        "ste_sign",
        "approx_sign",
        "swish_sign",
        "ste_heaviside",
        "ste_tern",
        "dorefa_quantizer",
    }


def test_spec_strings_build_the_named_quantizer_with_its_arguments():
    sign = q.get("sign(surrogate='approx_sign')")
    assert isinstance(sign, q.Sign) and sign.surrogate.name == "approx_sign"
    dorefa = q.get("dorefa(bits=4, mode='activations')")
    assert isinstance(dorefa, q.DoReFa) and (dorefa.bits, dorefa.mode, dorefa.precision) == (4, "activations", 4)
    assert q.get("sign(surrogate='sigmoid_surrogate(beta=4.0)')").surrogate == ste.registry.get(
        "sigmoid_surrogate", beta=4.0
    )


def test_get_passes_instances_callables_and_none_through():
    sign = q.Sign()
    fn = tf.math.sign
    assert q.get(sign) is sign and q.get(fn) is fn and q.get(None) is None
    assert isinstance(q.get(q.Heaviside), q.Heaviside)


def test_unknown_names_suggest_close_ones():
    with pytest.raises(ste.errors.UnknownQuantizerError, match="did you mean 'sign'") as info:
        q.get("sing")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "spec",
    ["sign(", "sign(surrogate=__import__('os'))", "os.system('true')", "sign(surrogate=approx_sign)", "1 + 2"],
)
def test_malformed_or_unsafe_specs_are_rejected_without_evaluation(spec):
    with pytest.raises(ste.errors.SpecError, match="quantizer spec"):
        q.get(spec)


def test_wrong_arguments_and_types_raise_ste_errors():
    with pytest.raises(ste.errors.ParameterError, match="Sign"):
        q.get("sign(colour=1)")
    with pytest.raises(ste.errors.ParameterError, match="bits"):
        q.get("dorefa(bits=40)")
    with pytest.raises(ste.errors.SpecError, match="as a quantizer"):
        q.get(3)
    with pytest.raises(ste.errors.SpecError, match="config"):
        q.get({"class_name": "NoSuchQuantizer", "config": {}})


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_keras_serialization_round_trip_keeps_values_and_gradients(spec):
    original = q.get(spec)
    config = keras.saving.serialize_keras_object(original)
    restored = q.get(config)
    assert type(restored) is type(original) and restored.get_config() == original.get_config()
    x = tf.constant(np.linspace(-1.5, 1.5, 13), tf.float32)
    outputs = []
    for quantizer in (original, restored):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = quantizer(x)
        outputs.append((y.numpy(), tape.gradient(y, x).numpy()))
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    np.testing.assert_array_equal(outputs[0][1], outputs[1][1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_quantizers_keep_the_input_dtype_and_work_on_numpy_arrays(dtype):
    x = np.array([-1.0, 0.0, 0.5], dtype=tf.as_dtype(dtype).as_numpy_dtype)
    for spec in ["sign", "dorefa(bits=2)", "pact(bits=2, alpha=1.0)", "lsq(bits=3)"]:
        y = q.get(spec)(x)
        assert y.dtype == tf.as_dtype(dtype), spec


def test_quantizer_layers_build_functional_models_with_the_input_dtype():
    inputs = keras.Input((4,), dtype="float16")
    outputs = q.Sign()(inputs)
    assert outputs.dtype == "float16" and tuple(outputs.shape) == (None, 4)
    model = keras.Model(inputs, outputs)
    np.testing.assert_array_equal(model(np.array([[-2.0, 0.0, 1.0, -0.1]], "float16")).numpy(), [[-1, 1, 1, -1]])
