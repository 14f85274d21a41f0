"""Registry surrogates and constraints copy, deep-copy and pickle (issue 10 item 4); equality includes the class;
an unregistered Surrogate subclass is refused when saved (issue 10 item 2), never saved under its parent's name.

Parametrized over ``ste.registry.names()`` so that a new entry is covered without editing this file.
"""

from __future__ import annotations

import copy
import json
import math
import pickle
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste

GRID = tf.constant(np.linspace(-3.0, 3.0, 61), tf.float64)


def _non_default(cls: type[ste.registry.Surrogate]) -> dict[str, Any]:
    """Every numeric hyperparameter at 1.5 × its default (a valid, different value)."""
    entry = cls()
    return {k: v * 1.5 for k, v in entry.params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _builtin_names() -> list[str]:
    """Every entry ste itself registers (entries other test modules register are left out)."""
    return [n for n in ste.registry.names() if ste.registry.lookup(n).__module__.startswith("ste.")]


def _instances() -> list[tuple[str, ste.registry.Surrogate]]:
    out = []
    for name in _builtin_names():
        cls = ste.registry.lookup(name)
        out.append((name, cls()))
        if _non_default(cls):
            out.append((name, cls(**_non_default(cls))))
    return out


def _same(a: ste.registry.Surrogate, b: ste.registry.Surrogate) -> None:
    assert a == b and hash(a) == hash(b) and type(a) is type(b) and repr(a) == repr(b)
    np.testing.assert_array_equal(a(GRID).numpy(), b(GRID).numpy())


@pytest.mark.parametrize("name", _builtin_names())
def test_every_registry_entry_copies_deep_copies_and_pickles(name: str) -> None:
    for entry_name, entry in _instances():
        if entry_name != name:
            continue
        _same(copy.copy(entry), entry)
        _same(copy.deepcopy(entry), entry)
        _same(copy.deepcopy({"config": [entry]})["config"][0], entry)  # a config holding one
        for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
            _same(pickle.loads(pickle.dumps(entry, protocol)), entry)


class UserEntry(ste.registry.Surrogate):
    """d(x) = k (a module-level user class: pickled by reference; registered only inside the test)."""

    k: float = 3.0

    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return tf.fill(tf.shape(x), tf.cast(self.k, x.dtype))


def test_user_registered_class_and_function_entries_pickle() -> None:
    ste.registry.register("user_module_level_entry", UserEntry)
    try:
        entry = ste.registry.get("user_module_level_entry(k=2.0)")
        _same(pickle.loads(pickle.dumps(entry)), entry)
    finally:
        ste.registry.unregister("user_module_level_entry")

    def cube_derivative(x: tf.Tensor, a: float = 1.0) -> tf.Tensor:  # a local function: pickled by registry name
        return 3 * a * x * x

    ste.registry.register("user_function_entry", cube_derivative)
    try:
        made = ste.registry.get("user_function_entry", a=2.0)
        restored = pickle.loads(pickle.dumps(made))
        _same(restored, made)
        np.testing.assert_allclose(restored(GRID).numpy(), 6.0 * GRID.numpy() ** 2)  # d/dx of 2·x³
        _same(copy.deepcopy(made), made)
    finally:
        ste.registry.unregister("user_function_entry")


def test_equality_includes_the_class() -> None:
    class Same(ste.registry.SigmoidSurrogate):
        pass

    base = ste.registry.SigmoidSurrogate(beta=2.0)
    sub = Same(beta=2.0)
    np.testing.assert_array_equal(sub(GRID).numpy(), base(GRID).numpy())  # same values ...
    assert sub != base and base != sub  # ... different classes
    assert len({base, sub, ste.registry.get("sigmoid_surrogate(beta=2.0)")}) == 2
    _same(copy.copy(sub), sub)  # a local class copies (by class, not by import path) ...
    _same(copy.deepcopy(sub), sub)
    with pytest.raises(ste.errors.RegistrationError, match="module level"):  # ... and says why it cannot be pickled
        pickle.dumps(sub)


class _SteeperSigmoid(ste.registry.SigmoidSurrogate):
    """A subclass with another derivative, never registered."""

    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return 2 * super().derivative(x)


class _Nameless(ste.registry.Surrogate):
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return tf.ones_like(x)


@pytest.mark.parametrize("cls", [_SteeperSigmoid, _Nameless], ids=["subclass_of_builtin", "nameless"])
def test_unregistered_subclass_fails_at_save_time(cls: type[ste.registry.Surrogate]) -> None:
    entry = cls()
    assert entry.name == ""  # not the parent's name
    with pytest.raises(ste.STEError, match="not registered"):
        entry.get_config()
    quantizer = ste.quantizers.Sign(surrogate=entry)
    model = keras.Sequential([keras.Input((3,)), ste.layers.QuantDense(2, input_quantizer=quantizer)])
    with pytest.raises(ste.STEError, match="not registered"):
        model.to_json()


def test_a_replaced_name_refuses_to_save_the_old_class() -> None:
    @ste.registry.register("replaceable_entry")
    class First(ste.registry.Surrogate):
        def derivative(self, x: tf.Tensor) -> tf.Tensor:
            return tf.ones_like(x)

    old = First()
    assert ste.registry.get(old.get_config()) == old
    try:

        @ste.registry.register("replaceable_entry", replace=True)
        class Second(First):
            def derivative(self, x: tf.Tensor) -> tf.Tensor:
                return tf.zeros_like(x)

        with pytest.raises(ste.STEError, match="now means another class"):
            old.get_config()
        assert type(ste.registry.get(Second().get_config())) is Second
    finally:
        ste.registry.unregister("replaceable_entry")
    with pytest.raises(ste.STEError, match="is no longer registered"):
        old.get_config()


def test_registered_subclass_saves_under_its_own_name() -> None:
    @ste.registry.register("steeper_sigmoid_test")
    class Steeper(_SteeperSigmoid):
        pass

    try:
        config = Steeper(beta=2.0).get_config()
        assert config["name"] == "steeper_sigmoid_test"
        rebuilt = ste.registry.get(json.loads(json.dumps(config)))
        assert type(rebuilt) is Steeper and rebuilt == Steeper(beta=2.0)
        assert ste.registry.SigmoidSurrogate.name == "sigmoid_surrogate"  # the parent keeps its name
    finally:
        ste.registry.unregister("steeper_sigmoid_test")


@pytest.mark.parametrize("name", ste.constraints.names())
def test_every_constraint_copies_and_pickles(name: str) -> None:
    constraint = ste.constraints.get(name)
    weights = tf.constant(np.linspace(-4.0, 4.0, 17), tf.float32)
    for other in (copy.copy(constraint), copy.deepcopy(constraint), pickle.loads(pickle.dumps(constraint))):
        assert type(other) is type(constraint) and other.get_config() == constraint.get_config()
        np.testing.assert_array_equal(np.asarray(other(weights)), np.asarray(constraint(weights)))


def test_weight_clip_clips_to_its_value_and_is_larqs_lowercase_alias() -> None:
    assert ste.constraints.weight_clip is ste.constraints.WeightClip
    weights = np.linspace(-4.0, 4.0, 17)
    clipped = np.asarray(ste.constraints.weight_clip(0.5)(tf.constant(weights)))
    np.testing.assert_array_equal(clipped, np.minimum(np.maximum(weights, -0.5), 0.5))
    assert ste.constraints.weight_clip(0.5) == ste.constraints.get("weight_clip(clip_value=0.5)")
    assert not math.isclose(ste.constraints.get("weight_clip").clip_value, 0.5)
