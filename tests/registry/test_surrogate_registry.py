"""Registry behaviour of every entry: config round-trip, spec strings, equality, tensor parameters, parameter
validation, unknown names, user registration (functions and classes, replace=True) and thread safety."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.registry import Surrogate

BUILTINS = [
    "identity",
    "straight_through",
    "zero",
    "sigmoid_surrogate",
    "approx_sign",
    "swish_sign",
    "fast_sigmoid",
    "atan",
    "triangle",
    "gaussian",
    "tanh_surrogate",
    "piecewise_exp",
    "erf_surrogate",
    "soft_sign",
    "piecewise_quadratic",
    "boxcar",
]
# name -> its positive hyperparameter (every built-in with a parameter has exactly one).
POSITIVE = {
    "straight_through": "clip",
    "sigmoid_surrogate": "beta",
    "swish_sign": "beta",
    "fast_sigmoid": "slope",
    "atan": "alpha",
    "triangle": "width",
    "gaussian": "sigma",
    "tanh_surrogate": "beta",
    "piecewise_exp": "alpha",
    "erf_surrogate": "alpha",
    "soft_sign": "alpha",
    "piecewise_quadratic": "alpha",
    "boxcar": "width",
}


def _variants(name: str) -> list[Surrogate]:
    out = [ste.registry.get(name)]
    if name in POSITIVE:
        field = POSITIVE[name]
        out += [ste.registry.get(name, **{field: 0.37}), ste.registry.get(name, **{field: 3})]
    return out


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    """Names registered by a test; unregistered afterwards so the registry stays as the library defines it."""
    names: list[str] = []
    yield names
    for name in names:
        if name in ste.registry.names():
            ste.registry.unregister(name)


@pytest.mark.parametrize("name", BUILTINS)
def test_config_and_spec_round_trip(name: str) -> None:
    for surrogate in _variants(name):
        config = surrogate.get_config()
        assert config["name"] == name
        assert json.loads(json.dumps(config)) == config  # JSON-serializable
        for rebuilt in (
            Surrogate.from_config(json.loads(json.dumps(config))),
            type(surrogate).from_config(config),
            ste.registry.get(config),
            ste.registry.get(repr(surrogate)),
            ste.registry.get(name, **config["params"]),
        ):
            assert type(rebuilt) is type(surrogate)
            assert rebuilt == surrogate and hash(rebuilt) == hash(surrogate)
            assert repr(rebuilt) == repr(surrogate)
        assert repr(surrogate).startswith(f"{name}(")


@pytest.mark.parametrize("name", [n for n in BUILTINS if n in POSITIVE])
def test_equality_and_hash_by_name_and_params(name: str) -> None:
    field = POSITIVE[name]
    a, b, c = (ste.registry.get(name, **{field: v}) for v in (2.0, 2, 2.5))
    assert a == b and hash(a) == hash(b)  # 2 is coerced to 2.0
    assert a != c
    assert len({a, b, c}) == 2
    other = next((n for n in POSITIVE if n != name and POSITIVE[n] == field), None)
    if other is not None:
        assert a != ste.registry.get(other, **{field: 2.0})  # same params, different entry
    assert a != object()


@pytest.mark.parametrize("name", [n for n in BUILTINS if n in POSITIVE])
def test_scalar_tensor_parameters(name: str) -> None:
    field = POSITIVE[name]
    number = ste.registry.get(name, **{field: 0.75})
    tensor = ste.registry.get(name, **{field: tf.constant(0.75)})
    as64 = ste.registry.get(name, **{field: tf.constant(0.75, tf.float64)})
    assert tensor == number and hash(tensor) == hash(number) and as64 == number
    assert tensor.get_config() == number.get_config()
    assert ste.registry.get(repr(tensor)) == number
    x = tf.constant(np.linspace(-3, 3, 61), tf.float32)
    np.testing.assert_array_equal(tensor.derivative(x).numpy(), number.derivative(x).numpy())

    @tf.function
    def traced(value: tf.Tensor, x: tf.Tensor) -> tf.Tensor:  # a symbolic parameter inside a graph
        return ste.registry.get(name, **{field: value}).derivative(x)

    np.testing.assert_allclose(traced(tf.constant(0.75), x).numpy(), number.derivative(x).numpy(), rtol=1e-6)
    with pytest.raises(ste.errors.ParameterError, match=field):
        ste.registry.get(name, **{field: tf.constant([0.5, 1.0])})
    with pytest.raises(ste.errors.ParameterError, match=name):
        ste.registry.get(name, **{field: tf.constant(-1.0)})


def test_variable_parameter_compares_by_identity_and_hash_is_stable() -> None:
    beta = tf.Variable(2.0)
    surrogate = ste.registry.get("swish_sign", beta=beta)
    before = hash(surrogate)
    beta.assign(3.0)
    assert hash(surrogate) == before and surrogate == ste.registry.get("swish_sign", beta=beta)
    assert surrogate != ste.registry.get("swish_sign", beta=tf.Variable(3.0))
    x = tf.constant([0.1, -0.4])
    np.testing.assert_allclose(surrogate(x).numpy(), ste.registry.get("swish_sign(beta=3.0)")(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", list(POSITIVE))
@pytest.mark.parametrize("bad", [0, 0.0, -1.0, -1e-9, math.inf, math.nan])
def test_invalid_hyperparameters_raise_naming_the_entry(name: str, bad: float) -> None:
    field = POSITIVE[name]
    cls = ste.registry.lookup(name)
    with pytest.raises(ste.errors.ParameterError, match=rf"'{name}'.*'{field}'"):
        cls(**{field: bad})
    with pytest.raises(ste.errors.ParameterError, match=rf"'{name}'.*'{field}'"):
        ste.registry.get(name, **{field: bad})
    if math.isfinite(bad):
        with pytest.raises(ste.errors.ParameterError, match=name):
            ste.registry.get(f"{name}({field}={bad!r})")
        with pytest.raises(ste.errors.ParameterError, match=name):
            ste.forward(tf.sign).backward(name, **{field: bad})


@pytest.mark.parametrize("name", BUILTINS)
def test_wrong_parameter_names_and_types(name: str) -> None:
    with pytest.raises(ste.errors.ParameterError, match=rf"'{name}'.*no parameter"):
        ste.registry.get(name, bogus=1.0)
    if name in POSITIVE:
        field = POSITIVE[name]
        with pytest.raises(ste.errors.ParameterError, match=field):
            ste.registry.get(name, **{field: "large"})
        with pytest.raises(ste.errors.ParameterError, match=field):
            ste.registry.get(name, **{field: True})
        if name != "straight_through":  # clip=None is documented; the others need a number
            with pytest.raises(ste.errors.ParameterError, match=field):
                ste.registry.get(name, **{field: None})


def test_straight_through_clip_none_means_identity() -> None:
    surrogate = ste.registry.get("straight_through(clip=None)")
    assert surrogate.clip is None and surrogate.constant_derivative == 1.0
    assert ste.registry.get(repr(surrogate)) == surrogate


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("sigmoid_surogate", "sigmoid_surrogate"),
        ("fast_sigmod", "fast_sigmoid"),
        ("swishsign", "swish_sign"),
        ("piecewise_quadratc", "piecewise_quadratic"),
        ("erf_surrogat", "erf_surrogate"),
        ("boxcars", "boxcar"),
    ],
)
def test_unknown_names_list_close_matches(typo: str, suggestion: str) -> None:
    with pytest.raises(ste.errors.UnknownSurrogateError, match=rf"did you mean.*'{suggestion}'") as info:
        ste.registry.get(typo)
    assert typo in str(info.value)
    with pytest.raises(ste.errors.UnknownSurrogateError, match=suggestion):
        ste.forward(tf.sign).backward(f"{typo}(beta=1.0)")


def _laplace_derivative(x: tf.Tensor, k: float = 2.0) -> tf.Tensor:
    """d(x) = (k/2)·exp(−k·abs(x))."""
    return (k / 2) * tf.exp(-k * tf.abs(x))


def _laplace_primitive(x: tf.Tensor, k: float = 2.0) -> tf.Tensor:
    return tf.where(x < 0, tf.exp(k * tf.minimum(x, 0.0)) / 2, 1 - tf.exp(-k * tf.maximum(x, 0.0)) / 2)


def _heaviside(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x > 0, x.dtype)


def _gradient(op: Any, x: tf.Tensor) -> np.ndarray:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    return np.asarray(tape.gradient(y, x).numpy(), np.float64)


def _check_user_entry(name: str, spec: str, numpy_derivative: Any) -> None:
    surrogate = ste.registry.get(spec)
    assert name in ste.registry.names()
    assert repr(surrogate) == spec
    assert ste.registry.get(repr(surrogate)) == surrogate
    config = json.loads(json.dumps(surrogate.get_config()))
    assert Surrogate.from_config(config) == surrogate
    x = tf.constant(np.linspace(-3, 3, 121), tf.float64)
    want = numpy_derivative(x.numpy())
    np.testing.assert_allclose(_gradient(ste.forward(_heaviside).backward(spec), x), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        _gradient(ste.forward(_heaviside).backward(Surrogate.from_config(config)), x), want, rtol=1e-12, atol=1e-15
    )
    if surrogate.has_primitive:
        like = ste.forward(_heaviside).backward_like(surrogate.primitive)
        np.testing.assert_allclose(_gradient(like, x), want, rtol=1e-10, atol=1e-13)
    for dtype in (tf.float16, tf.bfloat16, tf.float32):  # the wrapper returns x's dtype
        assert surrogate.derivative(tf.constant([0.5], dtype)).dtype == dtype


def test_user_function_with_primitive(cleanup: list[str]) -> None:
    cleanup.append("my_laplace")
    returned = ste.registry.register("my_laplace", primitive=_laplace_primitive)(_laplace_derivative)
    assert returned is _laplace_derivative
    _check_user_entry("my_laplace", "my_laplace(k=3.0)", lambda x: 1.5 * np.exp(-3.0 * np.abs(x)))
    assert ste.registry.get("my_laplace").params == {"k": 2.0}
    assert ste.registry.get("my_laplace(k=3)") == ste.registry.get("my_laplace", k=3.0)


def test_user_function_without_primitive(cleanup: list[str]) -> None:
    cleanup.append("my_box")

    @ste.registry.register("my_box")
    def my_box(x: tf.Tensor, half_width: float = 0.5) -> tf.Tensor:
        return tf.cast(tf.abs(x) <= half_width, x.dtype)

    assert not ste.registry.get("my_box").has_primitive
    _check_user_entry("my_box", "my_box(half_width=0.25)", lambda x: (np.abs(x) <= 0.25).astype(np.float64))


def test_user_surrogate_subclass(cleanup: list[str]) -> None:
    cleanup.append("my_cauchy")

    @ste.registry.register("my_cauchy")
    class MyCauchy(Surrogate):
        """d(x) = 1 / (π·gamma·(1 + (x/gamma)²)); peak 1/(π·gamma)."""

        gamma: float = 1.0

        def validate(self) -> None:
            self.require_positive("gamma")

        def derivative(self, x: tf.Tensor) -> tf.Tensor:
            gamma = self.param("gamma", x.dtype)
            return 1 / (math.pi * gamma * (1 + (x / gamma) ** 2))

        def primitive(self, x: tf.Tensor) -> tf.Tensor:
            return tf.atan(x / self.param("gamma", x.dtype)) / math.pi + 0.5

    assert MyCauchy.name == "my_cauchy" and ste.registry.lookup("my_cauchy") is MyCauchy
    _check_user_entry("my_cauchy", "my_cauchy(gamma=0.5)", lambda x: 1 / (math.pi * 0.5 * (1 + (x / 0.5) ** 2)))
    with pytest.raises(ste.errors.ParameterError, match=r"'my_cauchy'.*'gamma'"):
        ste.registry.get("my_cauchy(gamma=-2.0)")


def test_subclass_of_a_builtin_gets_its_own_name(cleanup: list[str]) -> None:
    cleanup.append("my_steep_sigmoid")

    @ste.registry.register("my_steep_sigmoid")
    class Steep(ste.registry.SigmoidSurrogate):
        beta: float = 8.0

    surrogate = Steep()
    assert repr(surrogate) == "my_steep_sigmoid(beta=8.0)"
    assert surrogate.get_config()["name"] == "my_steep_sigmoid"
    assert ste.registry.SigmoidSurrogate.name == "sigmoid_surrogate"
    assert type(ste.registry.get(repr(surrogate))) is Steep
    assert surrogate != ste.registry.get("sigmoid_surrogate(beta=8.0)")


def test_replace_semantics(cleanup: list[str]) -> None:
    cleanup.append("my_rule")
    ste.registry.register("my_rule", lambda x, c=1.0: c * tf.ones_like(x))
    old = ste.registry.get("my_rule(c=2.0)")
    with pytest.raises(ste.errors.RegistrationError, match=r"'my_rule'.*replace=True"):
        ste.registry.register("my_rule", lambda x, c=1.0: -c * tf.ones_like(x))
    assert ste.registry.get("my_rule(c=2.0)")(tf.constant([1.0])).numpy()[0] == 2.0  # unchanged by the failure
    ste.registry.register("my_rule", lambda x, c=1.0: -c * tf.ones_like(x), replace=True)
    assert ste.registry.get("my_rule(c=2.0)")(tf.constant([1.0])).numpy()[0] == -2.0
    assert old(tf.constant([1.0])).numpy()[0] == 2.0  # existing instances keep their class
    x = tf.constant([0.3, -0.2])
    np.testing.assert_array_equal(_gradient(ste.forward(_heaviside).backward("my_rule", c=4.0), x), [-4.0, -4.0])
    with pytest.raises(ste.errors.RegistrationError, match="identifier"):
        ste.registry.register("not a name", lambda x: x)
    with pytest.raises(ste.errors.RegistrationError, match="already registered"):
        ste.registry.register("sigmoid_surrogate", lambda x: x)


def test_threads_register_and_look_up_at_once(cleanup: list[str]) -> None:
    n_threads, per_thread = 8, 25
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []
    claimed: list[int] = []

    class Shared(Surrogate):
        def derivative(self, x: tf.Tensor) -> tf.Tensor:
            return tf.ones_like(x)

    def work(index: int) -> None:
        try:
            barrier.wait()
            for j in range(per_thread):
                name = f"threaded_{index}_{j}"
                ste.registry.register(name, lambda x, s=float(index): s * tf.ones_like(x))
                assert ste.registry.get(f"{name}(s={index + 0.5})").params["s"] == index + 0.5
                assert ste.registry.get(BUILTINS[(index + j) % len(BUILTINS)]).name in BUILTINS
                assert name in ste.registry.names()
            try:  # the same name from every thread: exactly one wins
                ste.registry.register("threaded_contested", lambda x: tf.ones_like(x))
                claimed.append(index)
            except ste.errors.RegistrationError:
                pass
            ste.registry.register(f"threaded_shared_{index}", Shared)  # one class under 8 names at once
        except BaseException as error:  # collected, asserted in the main thread
            errors.append(error)

    expected = [f"threaded_{i}_{j}" for i in range(n_threads) for j in range(per_thread)]
    shared = [f"threaded_shared_{i}" for i in range(n_threads)]
    cleanup.extend([*expected, *shared, "threaded_contested"])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(claimed) == 1
    names = set(ste.registry.names())
    assert set(expected) <= names and set(shared) <= names and set(BUILTINS) <= names
    for name in expected + shared:
        assert ste.registry.lookup(name).name == name  # every entry kept its own name
        assert ste.registry.get(name).get_config()["name"] == name
