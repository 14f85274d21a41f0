"""larq's keywords live in ste.larq: ``k_bit=`` (DoReFa), ``clip_value=`` (MagnitudeAwareSign) and larq's saved
constraint configs are read by ``ste.larq``; the native ``ste.quantizers`` / ``ste.constraints`` refuse them with the
fix. ste.larq's forms compute larq 0.14's formulas (numpy transcriptions, as in test_quantizer_formulas.py):
``DoReFa`` activations ``round(clip(x, 0, 1)·n)/n``, n = 2^k_bit − 1, gradient ``dy·1[0 <= x <= 1]``;
``MagnitudeAwareSign`` ``stop_gradient(mean(abs(x), axes[:-1]))·ste_sign(x)``, gradient
``α·dy·1[abs(x) <= clip_value]``. Defaults are larq 0.14's (larq/quantizers.py): ``DoReFa(k_bit=2,
mode="activations")``, ``MagnitudeAwareSign(clip_value=1.0)``.
"""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste
import ste.larq as lq
from tests.larq_port.conftest import REFERENCE
from tests.larq_port.test_quantizer_formulas import clipped, larq_sign
from tests.quantizers.conftest import FLOATS

LARQ_WEIGHT_CLIP = {"module": "larq.constraints", "class_name": "WeightClip", "config": {"clip_value": 0.5}}


def dorefa_activations(x, k_bit):
    n = 2**k_bit - 1
    return np.round(np.clip(x, 0.0, 1.0) * n) / n


# --- the native classes refuse larq's keywords, naming the fix --------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "fix", "larq_form"),
    [
        (lambda: ste.quantizers.DoReFa(k_bit=3), "DoReFa(bits=3, mode='activations')", "DoReFa(k_bit=3)"),
        (lambda: ste.quantizers.DoReFa(mode="weights", k_bit=4), "DoReFa(bits=4, mode='weights')", "DoReFa(k_bit=4)"),
        (lambda: ste.quantizers.get("dorefa(k_bit=3)"), "DoReFa(bits=3, mode='activations')", "DoReFa(k_bit=3)"),
        (
            lambda: ste.quantizers.MagnitudeAwareSign(clip_value=0.5),
            "MagnitudeAwareSign(surrogate=ste.registry.get('straight_through', clip=0.5))",
            "MagnitudeAwareSign(clip_value=0.5)",
        ),
        (
            lambda: ste.quantizers.get("magnitude_aware_sign(clip_value=None)"),
            "MagnitudeAwareSign(surrogate=ste.registry.get('straight_through', clip=None))",
            "MagnitudeAwareSign(clip_value=None)",
        ),
    ],
)
def test_native_quantizers_refuse_larqs_keywords_with_the_fix(make, fix, larq_form):
    with pytest.raises(ste.errors.ParameterError) as caught:
        make()
    message = str(caught.value)
    assert "is larq's argument" in message and f"Fix: {fix}" in message, message
    assert f"ste.larq.quantizers.{larq_form}" in message and "docs/larq.md" in message, message


def test_the_fix_in_the_message_computes_what_larqs_keyword_meant():
    x = np.random.default_rng(11).normal(size=(4, 3))
    larq_dorefa, ste_dorefa = lq.quantizers.DoReFa(k_bit=3), ste.quantizers.DoReFa(bits=3, mode="activations")
    np.testing.assert_array_equal(larq_dorefa(x), ste_dorefa(x))
    fixed = ste.quantizers.MagnitudeAwareSign(surrogate=ste.registry.get("straight_through", clip=0.5))
    with tf.GradientTape(persistent=True) as tape:
        xt = tf.constant(x)
        tape.watch(xt)
        ours, larqs = fixed(xt), lq.quantizers.MagnitudeAwareSign(clip_value=0.5)(xt)
    np.testing.assert_array_equal(ours, larqs)
    np.testing.assert_array_equal(tape.gradient(ours, xt), tape.gradient(larqs, xt))


def test_native_signatures_show_only_stes_arguments():
    assert list(inspect.signature(ste.quantizers.DoReFa).parameters) == ["bits", "mode", "kwargs"]
    assert list(inspect.signature(ste.quantizers.MagnitudeAwareSign).parameters) == ["surrogate", "kwargs"]


# --- ste.larq's forms: larq's keywords, defaults and formulas ---------------------------------------------------------


def test_larq_classes_take_larqs_arguments_and_defaults():
    dorefa = inspect.signature(lq.quantizers.DoReFa).parameters
    assert (dorefa["k_bit"].default, dorefa["mode"].default) == (2, "activations")
    assert list(dorefa)[:2] == ["k_bit", "mode"]  # larq passes them by position: DoReFa(k_bit, mode)
    assert inspect.signature(lq.quantizers.MagnitudeAwareSign).parameters["clip_value"].default == 1.0
    assert lq.quantizers.DoReFaQuantizer is lq.quantizers.DoReFa
    assert lq.quantizers.DoReFa().precision == 2 and lq.quantizers.DoReFa(5, "weights").precision == 5
    assert lq.quantizers.MagnitudeAwareSign().clip_value == 1.0
    assert lq.quantizers.MagnitudeAwareSign(None).clip_value is None


@pytest.mark.parametrize("k_bit", [1, 3])
@pytest.mark.parametrize(
    "form",
    [
        lambda k: lq.quantizers.DoReFa(k_bit=k),
        lambda k: lq.quantizers.DoReFa(k, "activations"),
        lambda k: lq.quantizers.DoReFaQuantizer(k_bit=k),
        lambda k: lq.quantizers.get(f"dorefa_quantizer(k_bit={k})"),
        lambda k: ste.quantizers.get(f"dorefa_quantizer(k_bit={k})"),  # larq's spec name, registered by ste.larq
        lambda k: lambda x: lq.quantizers.dorefa_quantizer(x, k_bit=k),
    ],
    ids=["class", "positional", "alias", "lq_spec", "ste_spec", "function"],
)
def test_larq_dorefa_forms_equal_larqs_formula(run, form, k_bit):
    x = np.linspace(-0.5, 1.5, 41)
    y, grad, dy = run(form(k_bit), x, tf.float64)
    np.testing.assert_allclose(y, dorefa_activations(x, k_bit), atol=1e-12)
    np.testing.assert_array_equal(grad, np.where((x >= 0) & (x <= 1), dy, 0.0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_larq_dorefa_default_is_two_bits_in_every_dtype(run, dtype):
    x = np.linspace(-0.5, 1.5, 17)  # steps of 1/8: exact in every float dtype
    y, grad, dy = run(lq.quantizers.DoReFa(), x, dtype)
    atol = {tf.float16: 1e-3, tf.bfloat16: 4e-3}.get(dtype, 1e-7)
    np.testing.assert_allclose(y, dorefa_activations(x, 2), atol=atol)
    np.testing.assert_array_equal(grad, np.where((x >= 0) & (x <= 1), dy, 0.0))


@pytest.mark.parametrize("clip_value", [1.0, 0.5, None])
@pytest.mark.parametrize(
    "form",
    [
        lambda c: lq.quantizers.MagnitudeAwareSign(clip_value=c),
        lambda c: lq.quantizers.MagnitudeAwareSign(c),
        lambda c: lq.quantizers.get(f"magnitude_aware_sign(clip_value={c})"),
        lambda c: lambda x: lq.quantizers.magnitude_aware_sign(x, clip_value=c),
    ],
    ids=["class", "positional", "lq_spec", "function"],
)
def test_larq_magnitude_aware_sign_forms_equal_larqs_formula(run, form, clip_value):
    x = np.random.default_rng(4).normal(size=(3, 3, 2, 5))
    y, grad, dy = run(form(clip_value), x, tf.float64)
    scale = np.mean(np.abs(x), axis=(0, 1, 2))
    np.testing.assert_allclose(y, scale * larq_sign(x), rtol=1e-12)
    np.testing.assert_allclose(grad, scale * clipped(x, dy, clip_value), rtol=1e-12)


def test_the_shared_name_means_larqs_class_in_ste_larq_and_stes_in_ste():
    assert type(lq.quantizers.get("magnitude_aware_sign")) is lq.quantizers.MagnitudeAwareSign
    assert type(ste.quantizers.get("magnitude_aware_sign")) is ste.quantizers.MagnitudeAwareSign
    layer = lq.layers.QuantDense(3, kernel_quantizer="magnitude_aware_sign", kernel_constraint="weight_clip")
    assert type(layer.kernel_quantizer) is lq.quantizers.MagnitudeAwareSign
    with pytest.raises(ste.errors.ParameterError, match="magnitude_aware_sign"):
        lq.quantizers.get("magnitude_aware_sign(clip_valu=0.5)")


def test_larq_and_ste_keywords_together_are_refused():
    with pytest.raises(ste.errors.ParameterError, match="not both"):
        lq.quantizers.DoReFa(k_bit=3, bits=4)
    with pytest.raises(ste.errors.ParameterError, match="not both"):
        lq.quantizers.MagnitudeAwareSign(clip_value=0.5, surrogate="identity")


# --- configs and saved files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "quantizer",
    [
        lambda: lq.quantizers.DoReFa(k_bit=3, mode="weights"),
        lambda: lq.quantizers.MagnitudeAwareSign(clip_value=0.5),
        lambda: lq.quantizers.MagnitudeAwareSign(clip_value=None),
    ],
    ids=["dorefa", "mas", "mas_unclipped"],
)
def test_larq_classes_write_stes_config_and_round_trip(quantizer):
    q = quantizer()
    config = q.get_config()
    assert "k_bit" not in config and "clip_value" not in config  # ste's keywords: bits, surrogate
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(q))
    assert type(restored) is type(q) and restored.get_config() == config
    assert type(q).from_config(config).get_config() == config
    x = np.random.default_rng(2).normal(size=(4, 6)).astype("float32")
    np.testing.assert_array_equal(restored(x), q(x))


def test_configs_saved_with_the_native_class_load_unchanged():
    """What ``lq.quantizers.DoReFa(k_bit=3)`` / ``MagnitudeAwareSign(clip_value=0.5)`` saved when they were the native
    classes (``ste>DoReFa`` with ``bits``, ``ste>MagnitudeAwareSign`` with ``surrogate``) loads as ste's class."""
    dorefa = {"module": "ste.quantizers._uniform", "class_name": "DoReFa", "registered_name": "ste>DoReFa"}
    dorefa["config"] = {"name": "d", "trainable": True, "dtype": "float32", "bits": 3, "mode": "activations"}
    mas = {"module": "ste.quantizers._binary", "class_name": "MagnitudeAwareSign"}
    mas["registered_name"] = "ste>MagnitudeAwareSign"
    mas["config"] = {"name": "m", "surrogate": {"name": "straight_through", "params": {"clip": 0.5}}}
    x = np.linspace(-1.5, 1.5, 13)
    loaded = ste.quantizers.get(dorefa)
    assert type(loaded) is ste.quantizers.DoReFa
    np.testing.assert_allclose(loaded(x), dorefa_activations(x, 3), atol=1e-7)
    loaded = ste.quantizers.get(mas)
    assert type(loaded) is ste.quantizers.MagnitudeAwareSign and loaded.surrogate.params == {"clip": 0.5}


@pytest.mark.parametrize("name", ["DoReFa", "MagnitudeAwareSign"])
def test_larqs_own_saved_configs_load_as_ste_larqs_classes(name):
    saved = REFERENCE["quantizers"][name]
    quantizer = lq.quantizers.get(saved["config"])
    assert type(quantizer) is getattr(lq.quantizers, name)
    np.testing.assert_allclose(quantizer(np.array(saved["x"], "float32")), saved["y"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("layers", [ste.layers, lq.layers], ids=["ste_layers", "lq_layers"])
def test_a_model_with_the_larq_classes_saves_and_loads(tmp_path, layers):
    inputs = keras.Input((6,))
    h = layers.QuantDense(
        5,
        input_quantizer=lq.quantizers.DoReFa(k_bit=3),
        kernel_quantizer=lq.quantizers.MagnitudeAwareSign(clip_value=0.5),
        kernel_constraint="weight_clip",
    )(inputs)
    out = layers.QuantDense(2, kernel_quantizer=lq.quantizers.DoReFa(4, "weights"))(h)
    model = keras.Model(inputs, out)
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras")
    first, second = restored.layers[1], restored.layers[2]
    assert type(first.input_quantizer) is lq.quantizers.DoReFa and first.input_quantizer.bits == 3
    assert type(first.kernel_quantizer) is lq.quantizers.MagnitudeAwareSign
    assert first.kernel_quantizer.clip_value == 0.5
    assert (type(second.kernel_quantizer), second.kernel_quantizer.mode) == (lq.quantizers.DoReFa, "weights")
    x = np.random.default_rng(3).uniform(-1, 2, size=(4, 6)).astype("float32")
    np.testing.assert_array_equal(restored.predict(x, verbose=0), model.predict(x, verbose=0))


# --- constraints ------------------------------------------------------------------------------------------------------


def test_ste_constraints_refuse_larqs_saved_config_naming_ste_larq():
    with pytest.raises(ste.errors.UnknownConstraintError, match=r"saved by larq.*Fix: ste\.larq\.constraints\.get"):
        ste.constraints.get(LARQ_WEIGHT_CLIP)
    with pytest.raises(ste.errors.UnknownConstraintError, match=r"ste\.larq\.constraints\.get"):
        ste.layers.QuantDense(3, kernel_constraint=dict(LARQ_WEIGHT_CLIP))


@pytest.mark.parametrize("class_name", ["WeightClip", "weight_clip"])
def test_ste_larq_reads_larqs_saved_constraint_config(class_name):
    config = {**LARQ_WEIGHT_CLIP, "class_name": class_name}
    w = tf.constant([-2.0, -0.25, 0.5, 3.0])
    for get in (lq.constraints.get, lq.constraints.deserialize):
        np.testing.assert_array_equal(get(config)(w), np.clip(w.numpy(), -0.5, 0.5))
    layer = lq.layers.QuantDense(3, kernel_constraint=dict(config))
    assert layer.kernel_constraint == ste.constraints.WeightClip(0.5)
    with pytest.raises(ste.errors.UnknownConstraintError, match="WeightClip"):
        lq.constraints.get({**config, "class_name": "MaxNorm"})
    assert lq.constraints.get("weight_clip(clip_value=0.25)") == ste.constraints.WeightClip(0.25)  # ste's forms too
