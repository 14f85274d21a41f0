"""get / names / register: lookup with suggestions, user entries, replacement, configs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import ste
from ste.registry import Surrogate


def test_core_names_are_registered() -> None:
    names = ste.registry.names()
    assert names == sorted(names)
    assert {"identity", "straight_through", "zero", "sigmoid_surrogate"} <= set(names)


def test_spec_and_keyword_forms_are_the_same_entry() -> None:
    a = ste.registry.get("sigmoid_surrogate(beta=4.0)")
    b = ste.registry.get("sigmoid_surrogate", beta=4)
    c = ste.registry.get("sigmoid_surrogate(4.0)")
    assert a == b == c and hash(a) == hash(b)
    assert repr(a) == "sigmoid_surrogate(beta=4.0)"
    assert a != ste.registry.get("sigmoid_surrogate")
    assert ste.registry.get(a) is a
    assert ste.registry.get(a, beta=2.0) == ste.registry.get("sigmoid_surrogate(beta=2.0)")


def test_parameter_given_twice() -> None:
    with pytest.raises(ste.errors.SpecError, match="both in the spec"):
        ste.registry.get("sigmoid_surrogate(beta=4.0)", beta=2.0)


def test_unknown_name_lists_close_matches() -> None:
    with pytest.raises(ste.errors.UnknownSurrogateError) as info:
        ste.registry.get("straight_thru")
    message = str(info.value)
    assert "did you mean 'straight_through'" in message and "known names:" in message


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("sigmoid_surrogate(beta=0)", "must be a finite number > 0"),
        ("sigmoid_surrogate(beta=-1.0)", "sigmoid_surrogate.*beta"),
        ("sigmoid_surrogate(beta='a')", "real number"),
        ("sigmoid_surrogate(beta=True)", "real number"),
        ("sigmoid_surrogate(gamma=1.0)", "no parameter.*gamma"),
        ("sigmoid_surrogate(1.0, 2.0)", "at most 1 positional"),
        ("straight_through(clip=0)", "straight_through.*clip"),
    ],
)
def test_invalid_parameters(spec: str, match: str) -> None:
    with pytest.raises(ste.errors.ParameterError, match=match):
        ste.registry.get(spec)


def test_config_round_trip() -> None:
    for spec in (
        "identity",
        "straight_through(clip=None)",
        "straight_through(clip=0.25)",
        "sigmoid_surrogate(beta=3.0)",
    ):
        surrogate = ste.registry.get(spec)
        config = surrogate.get_config()
        assert Surrogate.from_config(config) == surrogate
        assert type(surrogate).from_config(config) == surrogate
        assert ste.registry.get(config) == surrogate
        assert ste.registry.get(repr(surrogate)) == surrogate


def test_scalar_tensor_parameter() -> None:
    beta = tf.Variable(2.0)
    surrogate = ste.registry.get("sigmoid_surrogate", beta=beta)
    x = np.array([-1.0, 0.0, 0.5])
    s = 1 / (1 + np.exp(-2.0 * x))
    np.testing.assert_allclose(surrogate.derivative(tf.constant(x)).numpy(), 2.0 * s * (1 - s), rtol=1e-6)
    assert surrogate.get_config() == {"name": "sigmoid_surrogate", "params": {"beta": 2.0}}
    with pytest.raises(ste.errors.ParameterError, match="scalar"):
        ste.registry.get("sigmoid_surrogate", beta=tf.constant([1.0, 2.0]))


def test_register_a_function_with_primitive() -> None:
    def soft_box(x, width=2.0):  # type: ignore[no-untyped-def]
        """1/width inside |x| < width/2."""
        return tf.cast(tf.abs(x) < width / 2, x.dtype) / width

    ste.registry.register(
        "test_soft_box", soft_box, primitive=lambda x, width=2.0: tf.clip_by_value(x / width, -0.5, 0.5)
    )
    try:
        entry = ste.registry.get("test_soft_box(width=4.0)")
        assert repr(entry) == "test_soft_box(width=4.0)" and entry.has_primitive
        assert ste.registry.get(entry.get_config()) == entry
        op = ste.forward(tf.sign).backward("test_soft_box", width=4.0)
        x = tf.constant([-3.0, -1.0, 0.0, 1.9, 2.5])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), [0.0, 0.25, 0.25, 0.25, 0.0])
        with pytest.raises(ste.errors.RegistrationError, match="already registered"):
            ste.registry.register("test_soft_box", soft_box)
        ste.registry.register("test_soft_box", lambda x: tf.ones_like(x), replace=True)
        assert ste.registry.get("test_soft_box").derivative(tf.constant([5.0])).numpy() == 1.0
    finally:
        ste.registry.unregister("test_soft_box")
    assert "test_soft_box" not in ste.registry.names()


def test_register_a_subclass_as_decorator() -> None:
    @ste.registry.register("test_scaled_identity")
    class ScaledIdentity(Surrogate):
        scale: float = 2.0

        def validate(self) -> None:
            self.require_positive("scale")

        def derivative(self, x: tf.Tensor) -> tf.Tensor:
            return self.param("scale", x.dtype) * tf.ones_like(x)

    try:
        assert ScaledIdentity.name == "test_scaled_identity"
        entry = ste.registry.get("test_scaled_identity(scale=3)")
        assert entry.scale == 3.0 and isinstance(entry.scale, float) and not entry.has_primitive
        assert entry.derivative(tf.constant([1.0, -7.0])).numpy().tolist() == [3.0, 3.0]
        with pytest.raises(ste.errors.ParameterError, match="test_scaled_identity.*scale"):
            ste.registry.get("test_scaled_identity(scale=-1)")
        with pytest.raises(AttributeError, match=r"immutable"):
            entry.scale = 4.0  # type: ignore[misc]
    finally:
        ste.registry.unregister("test_scaled_identity")


@pytest.mark.parametrize("name", ["not valid", "class", "1abc", ""])
def test_invalid_names(name: str) -> None:
    with pytest.raises(ste.errors.RegistrationError, match="identifier"):
        ste.registry.register(name, lambda x: x)


def test_register_rejects_non_callables() -> None:
    with pytest.raises(ste.errors.RegistrationError, match="Surrogate subclass or a function"):
        ste.registry.register("test_bad", 3)
