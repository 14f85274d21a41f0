"""Hostile and wrong input: every case gets a typed ``ste.STEError`` naming what was wrong, and nothing else happens.

Spec strings that try to run code are parsed in a temporary working directory; the tests check that no file appears
there (the payloads would create ``pwned``) and that the forward function never ran.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.references import tf_sign

TOUCH = "__import__('os').system('touch pwned')"

# (spec, a fragment the message must contain)
CODE_SPECS = [
    (TOUCH, "only a plain registered name"),
    (f"straight_through(clip={TOUCH})", "calls inside arguments"),
    ("os.system('touch pwned')", "only a plain registered name"),
    ("open('pwned', 'w')", "no surrogate named 'open'"),  # literal arguments, but no such entry
    ("straight_through.__class__", "Attribute"),
    ("straight_through(clip=ste.__file__)", "attribute access"),
    ("sigmoid_surrogate(beta=float('4'))", "calls inside arguments"),
    ("sigmoid_surrogate(beta=(lambda: 4)())", "calls inside arguments"),
    ("lambda: __import__('os').system('touch pwned')", "Lambda"),
    ("sigmoid_surrogate(beta=lambda: 4)", "lambdas"),
    ("f\"{__import__('os').system('touch pwned')}\"", "JoinedStr"),
    ("sigmoid_surrogate(beta=f'{4}')", "f-strings"),
    ("sigmoid_surrogate(beta=2+2)", "arithmetic"),
    ("sigmoid_surrogate(beta=x)", "bare names"),
    ("sigmoid_surrogate(**{'beta': 4})", "**kwargs"),
    ("sigmoid_surrogate(*[4])", "*args"),
    ("straight_through[0]", "Subscript"),
    ("straight_through()()", "only a plain registered name"),
    ("(clip := 1)", "NamedExpr"),
    ("import os", "not valid syntax"),
    ("identity; __import__('os').system('touch pwned')", "not valid syntax"),
    ("sigmoid_surrogate(beta=[[[4]]])", "nested too deeply"),
    ("sigmoid_surrogate(beta=b'4')", "bytes literals"),
    ("", "empty"),
    ("   ", "empty"),
    ("straight_through(" + "1, " * 300 + ")", "characters long"),
    ("a(" * 200 + ")" * 200, "characters long"),
    ("(" * 240 + "identity" + ")" * 240, "not valid syntax"),  # deeper than Python's parser allows
    ("[" * 100 + "]" * 100, "not a name or a call"),
    ("((((identity))))", "never"),  # redundant parentheses around a name: accepted, it is just the name
    ("identity" + " " * 10_000, "characters long"),
]


@pytest.mark.parametrize(("spec", "fragment"), CODE_SPECS, ids=range(len(CODE_SPECS)))
def test_code_in_spec_strings_is_never_run(spec: str, fragment: str, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    calls = []

    def forward(x: tf.Tensor) -> tf.Tensor:
        calls.append(1)
        return tf_sign(x)

    if fragment == "never":
        assert ste.registry.get(spec) == ste.registry.get("identity")
        return
    with pytest.raises(ste.STEError) as info:
        ste.registry.get(spec)
    assert isinstance(info.value, (ste.errors.SpecError, ste.errors.UnknownSurrogateError)), type(info.value)
    assert fragment in str(info.value), str(info.value)
    with pytest.raises((ste.errors.SpecError, ste.errors.UnknownSurrogateError)):
        ste.forward(forward).backward(spec)(tf.constant([1.0]))
    assert calls == []
    assert os.listdir(tmp_path) == [], "a spec string created a file"


def test_spec_errors_keep_their_type_inside_tf_function(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)

    @tf.function
    def build_and_call(x: tf.Tensor) -> tf.Tensor:
        return ste.forward(tf_sign).backward(f"straight_through(clip={TOUCH})")(x)

    with pytest.raises(ste.errors.SpecError, match="calls inside arguments"):
        build_and_call(tf.constant([1.0]))
    assert os.listdir(tmp_path) == []


def test_non_string_specs_are_typed_errors() -> None:
    for spec in (b"identity", 3, 2.5, ["identity"], object()):
        with pytest.raises(ste.STEError) as info:
            ste.registry.get(spec)  # type: ignore[arg-type]
        assert type(spec).__name__ in str(info.value)


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [("straight_thru", "straight_through"), ("sigmoid_surogate(beta=2.0)", "sigmoid_surrogate"), ("Identity", "")],
)
def test_unknown_names_list_the_closest_known(spec: str, suggestion: str) -> None:
    with pytest.raises(ste.errors.UnknownSurrogateError) as info:
        ste.forward(tf_sign).backward(spec)
    message = str(info.value)
    assert repr(spec.split("(")[0]) in message
    assert "straight_through" in message and "sigmoid_surrogate" in message  # the known names are listed
    if suggestion:
        assert f"did you mean '{suggestion}'" in message


@pytest.mark.parametrize(
    ("spec", "params", "fragment"),
    [
        ("sigmoid_surrogate", {"beta": "4"}, "'beta' must be a real number"),
        ("sigmoid_surrogate(beta='4')", {}, "'beta' must be a real number"),
        ("sigmoid_surrogate", {"beta": True}, "'beta' must be a real number"),
        ("sigmoid_surrogate(beta=True)", {}, "'beta' must be a real number"),
        ("sigmoid_surrogate", {"beta": [4.0]}, "'beta' must be a real number"),
        ("sigmoid_surrogate(beta=(4.0,))", {}, "'beta' must be a real number"),
        ("sigmoid_surrogate", {"beta": None}, "'beta' may not be None"),
        ("sigmoid_surrogate", {"beta": -1.0}, "'beta' must be a finite number > 0"),
        ("sigmoid_surrogate(beta=0)", {}, "'beta' must be a finite number > 0"),
        ("sigmoid_surrogate", {"beta": float("nan")}, "'beta' must be a finite number > 0"),
        ("sigmoid_surrogate", {"beta": float("inf")}, "'beta' must be a finite number > 0"),
        ("sigmoid_surrogate", {"beta": tf.constant([1.0, 2.0])}, "'beta' must be a scalar"),
        ("sigmoid_surrogate", {"beta": tf.constant("x")}, "'beta' must be a real number"),
        ("sigmoid_surrogate", {"gamma": 1.0}, "no parameter(s) ['gamma']"),
        ("sigmoid_surrogate(1.0, 2.0)", {}, "at most 1 positional"),
        ("straight_through(clip=-0.5)", {}, "'clip' must be a finite number > 0"),
        ("identity(scale=2)", {}, "no parameter(s) ['scale']"),
        ("sigmoid_surrogate(beta=2.0)", {"beta": 3.0}, "given both"),
    ],
)
def test_wrong_hyperparameters_are_typed_errors(spec: str, params: dict[str, Any], fragment: str) -> None:
    with pytest.raises((ste.errors.ParameterError, ste.errors.SpecError)) as info:
        ste.forward(tf_sign).backward(spec, **params)
    assert fragment in str(info.value)
    name = spec.split("(")[0]
    assert name in str(info.value) or "given both" in fragment


class _Opaque:
    pass


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        (tf.constant([1, 2]), ["dtype int32", "positional input 0"]),
        (np.array([1, 2], np.int64), ["dtype int64"]),
        (tf.constant([True]), ["dtype bool"]),
        (tf.constant(["a"]), ["dtype string"]),
        (tf.constant([1 + 2j]), ["dtype complex128"]),
        (3, ["dtype int32"]),
        (tf.ragged.constant([[1.0], [1.0, 2.0]]), ["RaggedTensor"]),
        (tf.sparse.from_dense(tf.constant([[0.0, 1.0]])), ["SparseTensor"]),
        (None, ["is None"]),
        (_Opaque(), ["_Opaque", "cannot be converted"]),
        ({"x": 1.0}, ["dict"]),
        ([[1.0], [1.0, 2.0]], ["list", "cannot be converted"]),
        ("1.0", ["dtype string"]),
    ],
    ids=lambda v: type(v).__name__,
)
def test_invalid_inputs_raise_before_anything_runs(value: Any, fragments: list[str]) -> None:
    calls = []

    def forward(x: tf.Tensor) -> tf.Tensor:
        calls.append(1)
        return tf_sign(x)

    op = ste.forward(forward).backward("straight_through")
    with pytest.raises(ste.errors.InputError) as info:
        op(value)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    assert "forward" in str(info.value)  # names the op
    assert calls == []

    # and in position 1 of a two-input op, inside tf.function
    two = ste.forward(lambda x, v: x * v).backward(lambda dy, x, v: (dy * v, dy * x))

    @tf.function
    def traced(x: tf.Tensor) -> tf.Tensor:
        return two(x, value)

    with pytest.raises(ste.errors.InputError, match="positional input 1"):
        traced(tf.constant([1.0]))


def _grad(op: Any, x: tf.Tensor, compiled: bool) -> Any:
    def run(x: tf.Tensor) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x)
        return tape.gradient(y, x)

    return tf.function(run)(x) if compiled else run(x)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize(
    ("rule", "dtype", "error", "fragments"),
    [
        (lambda dy, x: (dy, dy), tf.float32, ste.errors.GradientCountError, ["returned 2 gradient(s); expected 1"]),
        (lambda dy, x: (), tf.float32, ste.errors.GradientCountError, ["returned 0 gradient(s)"]),
        (lambda dy, x: tf.reduce_sum(dy, keepdims=True), tf.float32, ste.errors.GradientShapeError, ["(1,)", "(3,)"]),
        (lambda dy, x: tf.reduce_sum(dy), tf.float32, ste.errors.GradientShapeError, ["shape ()", "broadcast"]),
        (lambda dy, x: tf.zeros([3, 3]), tf.float32, ste.errors.GradientShapeError, ["(3, 3)"]),
        (lambda dy, x: tf.cast(dy, tf.float32), tf.float16, ste.errors.GradientDtypeError, ["float32", "float16"]),
        (lambda dy, x: tf.cast(dy, tf.float64), tf.float32, ste.errors.GradientDtypeError, ["float64", "float32"]),
        (lambda dy, x: 1.0, tf.float32, ste.errors.RuleError, ["float", "expected a tf.Tensor"]),
        (lambda dy, x: np.ones(3, np.float32), tf.float32, ste.errors.RuleError, ["ndarray"]),
        (lambda dy, x: "grad", tf.float32, ste.errors.RuleError, ["str"]),
    ],
    ids=["two", "none", "keepdims", "scalar", "bigger", "f32-for-f16", "f64-for-f32", "float", "ndarray", "str"],
)
def test_rules_returning_wrong_gradients(
    rule: Any, dtype: tf.DType, error: type[Exception], fragments: list[str], compiled: bool
) -> None:
    op = ste.forward(tf_sign).backward(rule)
    with pytest.raises(error) as info:
        _grad(op, tf.constant([0.5, -1.0, 2.0], dtype), compiled)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "positional input" in message or "gradient" in message
    assert "sign" in message  # names the op


def test_keyword_hyperparameters_the_forward_does_not_take() -> None:
    op = ste.forward(tf_sign).backward("straight_through")
    with pytest.raises(ste.errors.CallError, match="clip"):
        op(tf.constant([1.0]), clip=2.0)
    with pytest.raises(ste.errors.CallError, match="no positional input"):
        op()


def test_rule_signature_mismatch_is_a_rule_error() -> None:
    op = ste.forward(lambda x, v: x * v).backward(lambda dy, x: dy)
    with pytest.raises(ste.errors.RuleError, match="cannot be called as rule"):
        op(tf.constant([1.0]), tf.constant([2.0]))
    with pytest.raises(ste.errors.RuleError, match="one-input"):
        ste.forward(lambda x, v: x * v).backward("identity")(tf.constant([1.0]), tf.constant([2.0]))


def test_every_error_class_is_an_ste_error_and_keeps_its_type_through_tf_function() -> None:
    classes = [getattr(ste.errors, name) for name in ste.errors.__all__]
    assert len(classes) >= 12
    for cls in classes:
        assert issubclass(cls, ste.STEError)
        assert cls.__init__ is Exception.__init__

        @tf.function
        def raise_it(x: tf.Tensor, cls: type[Exception] = cls) -> tf.Tensor:
            raise cls("boom")

        with pytest.raises(cls, match="boom"):
            raise_it(tf.constant(1.0))


# -- issue 22.B: quantizers, quantized layers and saved configs ------------------------------------------------

_BAD_DTYPES = {
    "string": lambda shape: tf.fill(shape, "a"),
    "int32": lambda shape: tf.zeros(shape, tf.int32),
    "int64": lambda shape: tf.zeros(shape, tf.int64),
    "bool": lambda shape: tf.zeros(shape, tf.bool),
    "complex64": lambda shape: tf.zeros(shape, tf.complex64),
}


@pytest.mark.parametrize("dtype", sorted(_BAD_DTYPES))
@pytest.mark.parametrize("name", ste.quantizers.names())
def test_every_quantizer_refuses_a_non_floating_input_before_its_variables_change(name: str, dtype: str) -> None:
    quantizer = ste.quantizers.get(name)
    quantizer(tf.ones([2, 3]))  # built, LSQ's step initialised
    before = [v.numpy().copy() for v in quantizer.weights]
    with pytest.raises(ste.errors.InputError, match=rf"{type(quantizer).__name__}.*{dtype}.*Fix"):
        quantizer(_BAD_DTYPES[dtype]([2, 3]))
    for old, new in zip(before, quantizer.weights):
        np.testing.assert_array_equal(old, new.numpy())


def test_lsq_on_a_string_tensor_is_an_input_error_even_before_it_is_initialised() -> None:
    with pytest.raises(ste.errors.InputError, match="LSQ.*string"):
        ste.quantizers.LSQ()(tf.constant([["a", "b"]]))


@pytest.mark.parametrize("value", [None, object()], ids=["None", "object"])
@pytest.mark.parametrize(
    "function", ["ste_sign", "approx_sign", "ste_tern", "magnitude_aware_sign", "dorefa_quantizer"]
)
def test_larq_function_forms_refuse_what_is_not_a_tensor(function: str, value: Any) -> None:
    with pytest.raises(ste.errors.InputError):
        getattr(ste.larq.quantizers, function)(value)


_LAYERS = {
    "QuantDense": (lambda: ste.layers.QuantDense(2, kernel_quantizer="ste_sign"), (1, 4)),
    "QuantConv1D": (lambda: ste.layers.QuantConv1D(2, 1, kernel_quantizer="ste_sign"), (1, 4, 2)),
    "QuantConv2D": (lambda: ste.layers.QuantConv2D(2, 1, kernel_quantizer="ste_sign"), (1, 4, 4, 2)),
    "QuantConv3D": (lambda: ste.layers.QuantConv3D(2, 1, kernel_quantizer="ste_sign"), (1, 4, 4, 4, 2)),
    "QuantDepthwiseConv2D": (lambda: ste.layers.QuantDepthwiseConv2D(1, kernel_quantizer="ste_sign"), (1, 4, 4, 2)),
    "QuantSeparableConv2D": (lambda: ste.layers.QuantSeparableConv2D(2, 1), (1, 4, 4, 2)),
    "QuantConv2DTranspose": (lambda: ste.layers.QuantConv2DTranspose(2, 1, kernel_quantizer="ste_sign"), (1, 4, 4, 2)),
}


@pytest.mark.parametrize("dtype", sorted(_BAD_DTYPES))
@pytest.mark.parametrize("layer", sorted(_LAYERS))
@pytest.mark.parametrize("input_quantizer", [None, "ste_sign"])
def test_every_quantized_layer_refuses_a_non_floating_input(layer: str, dtype: str, input_quantizer: Any) -> None:
    make, shape = _LAYERS[layer]
    instance = make()
    instance.input_quantizer = ste.quantizers.get(input_quantizer)
    with pytest.raises(ste.errors.InputError, match=dtype):
        instance(_BAD_DTYPES[dtype](shape))


@pytest.mark.parametrize("dtype", ["string", "complex64"])
def test_batch_normalization_refuses_string_and_complex_input(dtype: str) -> None:
    with pytest.raises(ste.errors.InputError, match=f"BatchNormalization.*{dtype}"):
        ste.layers.BatchNormalization()(_BAD_DTYPES[dtype]((2, 3)))


_DAMAGED_CONFIGS = [
    (ste.quantizers.DoReFa, {"bits": -1}, "bits must be an integer"),
    (ste.quantizers.DoReFa, {"mode": None}, "mode must be"),
    (ste.quantizers.Uniform, {"min": "garbage"}, "min must be a finite number"),
    (ste.quantizers.LSQ, {"signed": "no"}, "signed must be True or False"),
    (ste.quantizers.PACT, {"alpha": [1, 2]}, "alpha must be a finite number"),
    (ste.quantizers.NoOp, {"precision": None}, "precision must be"),
    (ste.quantizers.Sign, {"surrogate": {"name": "no_such_surrogate"}}, "no_such_surrogate"),
    (ste.quantizers.Sign, {"trainable": "garbage"}, "damaged"),
    (ste.quantizers.Sign, {"dtype": [1, 2]}, "damaged"),
    (ste.layers.QuantDense, {"units": "garbage"}, "damaged"),
    (ste.layers.QuantDense, {"use_bias": "no"}, "use_bias must be True or False"),
    (ste.layers.QuantDense, {"kernel_quantizer": "no_such_quantizer"}, "no_such_quantizer"),
    (ste.layers.BatchNormalization, {"center": "no"}, "center must be True or False"),
    (ste.layers.BatchNormalization, {"axis": "garbage"}, "damaged"),
    (ste.optimizers.Bop, {"gamma": "garbage"}, "gamma"),
    (ste.optimizers.Bop, {"clipnorm": "garbage"}, "clipnorm must be a finite number"),
    (ste.optimizers.Bop, {"no_such_argument": 1}, "damaged"),
]


@pytest.mark.parametrize(("cls", "damage", "fragment"), _DAMAGED_CONFIGS, ids=lambda v: getattr(v, "__name__", None))
def test_a_damaged_saved_config_raises_an_ste_error_not_kerass_bare_type_error(cls: Any, damage: Any, fragment: str):
    made = {
        ste.layers.QuantDense: lambda: ste.layers.QuantDense(2, kernel_quantizer="ste_sign"),
        ste.quantizers.NoOp: lambda: ste.quantizers.NoOp(precision=1),
    }.get(cls, cls)()
    config = {**made.get_config(), **damage}
    with pytest.raises(ste.STEError, match=fragment):
        cls.from_config(config)
    with pytest.raises(ste.errors.ParameterError, match="expected the dict"):
        cls.from_config(["not", "a", "dict"])
