"""One registry design for surrogates, quantizers, constraints, QAT schemes, pruning schedules, spiking neurons and
centroid initializations, tested the same way on each.

For every table: replacing a name (a built-in included) needs ``replace=True``; a name a spec string cannot reach is
refused at registration; names are NFKC-normalised as Python normalises identifiers (checked against ``ast``,
which applies Python's own rule); unknown names get suggestions; ``unregister`` works; concurrent registration of
one name lets exactly one thread win.
"""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import ste


class _Doubling(ste.registry.Surrogate):
    def derivative(self, x: tf.Tensor) -> tf.Tensor:
        return 2 * tf.ones_like(x)


class _Halving(ste.quantizers.Quantizer):
    def call(self, inputs: Any) -> tf.Tensor:
        return tf.convert_to_tensor(inputs) / 2


class _Negate(keras.constraints.Constraint):  # type: ignore[misc]
    def __call__(self, w: Any) -> Any:
        return -w


class _Int8Again(ste.qat.Int8Scheme):
    """A user's scheme (the test entry)."""


class _Always(ste.sparsity.PruningSchedule):
    def __call__(self, step: Any) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.constant(True), tf.constant(0.25)

    def get_config(self) -> dict[str, Any]:
        return {}


class _Doubler(ste.spiking.LICell):
    """A user's neuron (the test entry): a leaky integrator of twice its input."""

    def step(self, inputs: tf.Tensor, states: Any) -> tuple[tf.Tensor, None, list[tf.Tensor]]:
        return states[0] + 2 * inputs, None, []


def _sevens() -> Callable[[tf.Tensor, int, bool], tf.Tensor]:
    """A user's centroid initialization (a fresh function each time): every centroid 7."""

    def sevens(weights: tf.Tensor, number_of_clusters: int, preserve_sparsity: bool) -> tf.Tensor:
        return tf.fill([number_of_clusters], tf.constant(7.0, weights.dtype))

    return sevens


def _centroids(name: str) -> np.ndarray:
    """The centroids ``initial_centroids`` computes with the initialization ``name``."""
    return np.asarray(ste.clustering.initial_centroids(tf.constant([1.0, 2.0, 3.0, 4.0]), 2, name))


@dataclass
class Table:
    kind: str
    register: Callable[..., Any]  # register(name, replace=False) -> registers a fresh entry
    unregister: Callable[[str], Any]
    names: Callable[[], list[str]]
    build: Callable[[str], Any]  # name or spec -> instance
    is_ours: Callable[[Any], bool]  # whether an instance comes from the test entry
    unknown_error: type[Exception]
    builtin: str
    entry: Callable[[str], Any]  # the entry registered under a name
    put: Callable[[str, Any], Any]  # register an entry under a name with replace=True
    spec: bool = True  # whether a spec string "name()" builds it too


def _register_surrogate(name: str, replace: bool = False) -> Any:
    return ste.registry.register(name, type("Doubling", (_Doubling,), {"__module__": __name__}), replace=replace)


TABLES = [
    Table(
        "surrogate",
        _register_surrogate,
        ste.registry.unregister,
        ste.registry.names,
        ste.registry.get,
        lambda s: float(s(tf.constant(0.3)).numpy()) == 2.0,
        ste.errors.UnknownSurrogateError,
        "sigmoid_surrogate",
        ste.registry.lookup,
        lambda name, entry: ste.registry.register(name, entry, replace=True),
    ),
    Table(
        "quantizer",
        lambda name, replace=False: ste.quantizers.register(name, replace=replace)(
            type("Halving", (_Halving,), {"__module__": __name__})
        ),
        ste.quantizers.unregister,
        ste.quantizers.names,
        ste.quantizers.get,
        lambda q: float(q(tf.constant(3.0)).numpy()) == 1.5,
        ste.errors.UnknownQuantizerError,
        "sign",
        ste.quantizers.lookup,
        lambda name, entry: ste.quantizers.register(name, replace=True)(entry),
    ),
    Table(
        "constraint",
        lambda name, replace=False: ste.constraints.register(name, replace=replace)(
            type("Negate", (_Negate,), {"__module__": __name__})
        ),
        ste.constraints.unregister,
        ste.constraints.names,
        ste.constraints.get,
        lambda c: float(np.asarray(c(tf.constant(3.0)))) == -3.0,
        ste.errors.UnknownConstraintError,
        "weight_clip",
        lambda name: type(ste.constraints.get(name)),
        lambda name, entry: ste.constraints.register(name, replace=True)(entry),
    ),
    Table(
        "scheme",
        lambda name, replace=False: ste.qat.register_scheme(name, replace=replace)(
            type("Int8Again", (_Int8Again,), {"__module__": __name__})
        ),
        ste.qat.unregister_scheme,
        ste.qat.schemes,
        lambda name: ste.qat._api._scheme(name),  # what quantize_model(model, scheme=name) builds
        lambda scheme: isinstance(scheme, _Int8Again),
        ste.errors.ParameterError,
        "int8",
        lambda name: ste.qat._scheme_names.SCHEMES.lookup(name),
        lambda name, entry: ste.qat.register_scheme(name, replace=True)(entry),
        spec=False,
    ),
    Table(
        "schedule",
        lambda name, replace=False: ste.sparsity.register_schedule(name, replace=replace)(
            type("Always", (_Always,), {"__module__": __name__})
        ),
        ste.sparsity.unregister_schedule,
        ste.sparsity.schedules,
        lambda name: ste.sparsity._schedule_names.SCHEDULES.lookup(name),  # the class a saved config names
        lambda cls: issubclass(cls, _Always),
        ste.errors.ParameterError,
        "constant_sparsity",
        lambda name: ste.sparsity._schedule_names.SCHEDULES.lookup(name),
        lambda name, entry: ste.sparsity.register_schedule(name, replace=True)(entry),
        spec=False,
    ),
    Table(
        "neuron",
        lambda name, replace=False: ste.spiking.register_neuron(name, replace=replace)(
            type("Doubler", (_Doubler,), {"__module__": __name__})
        ),
        ste.spiking.unregister_neuron,
        ste.spiking.neurons,
        lambda name: ste.spiking.SpikingDense(2, neuron=name).neuron,
        lambda cell: isinstance(cell, _Doubler),
        ste.errors.ParameterError,
        "lif",
        lambda name: ste.spiking._names.NEURONS.lookup(name),
        lambda name, entry: ste.spiking.register_neuron(name, replace=True)(entry),
        spec=False,
    ),
    Table(
        "initialization",
        lambda name, replace=False: ste.clustering.register_init(name, replace=replace)(_sevens()),
        ste.clustering.unregister_init,
        ste.clustering.inits,
        _centroids,
        lambda centroids: centroids.tolist() == [7.0, 7.0],
        ste.errors.ParameterError,
        "linear",
        lambda name: ste.clustering._init_names.INITS.lookup(name),
        lambda name, entry: ste.clustering.register_init(name, replace=True)(entry),
        spec=False,
    ),
]


@pytest.fixture(params=TABLES, ids=[t.kind for t in TABLES])
def table(request: pytest.FixtureRequest) -> Table:
    return request.param  # type: ignore[no-any-return]


def test_replacing_a_builtin_needs_replace_true(table: Table) -> None:
    original = table.entry(table.builtin)
    before = table.build(table.builtin)
    with pytest.raises(ste.errors.RegistrationError, match="replace=True"):
        table.register(table.builtin)
    assert not table.is_ours(table.build(table.builtin))  # unchanged by the refused registration
    try:
        table.register(table.builtin, replace=True)
        assert table.is_ours(table.build(table.builtin))
    finally:
        table.put(table.builtin, original)
    assert type(table.build(table.builtin)) is type(before)


@pytest.mark.parametrize("name", ["not-an-identifier", "1st", "", "with space", "class", "None", "lambda", "x.y"])
def test_a_name_a_spec_string_cannot_reach_is_refused(table: Table, name: str) -> None:
    assert not _spec_reaches(name)
    with pytest.raises(ste.errors.RegistrationError, match="identifier") as caught:
        table.register(name)
    assert name not in table.names()
    suggested = re.search(r"Fix: e\.g\. '([^']*)'", str(caught.value))
    assert suggested is not None and _spec_reaches(suggested.group(1))  # the suggested name is one that works


def _spec_reaches(name: str) -> bool:
    """Whether Python parses ``name(1)`` as a call of the plain name ``name`` (what a spec string needs)."""
    try:
        node = ast.parse(f"{name}(1)", mode="eval").body
    except SyntaxError:
        return False
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def test_a_soft_keyword_is_reachable_and_accepted(table: Table) -> None:
    assert _spec_reaches("match")
    table.register("match")
    try:
        assert table.is_ours(table.build("match"))
    finally:
        table.unregister("match")


def test_names_are_normalised_as_python_normalises_identifiers(table: Table) -> None:
    micro, greek = "\u00b5_r" + table.kind, "\u03bc_r" + table.kind  # MICRO SIGN, GREEK SMALL LETTER MU
    python_name = ast.parse(micro, mode="eval").body.id  # type: ignore[attr-defined]  # what Python calls it
    assert python_name == greek != micro
    table.register(micro)
    try:
        assert python_name in table.names() and micro not in table.names()
        for spelling in (micro, greek):
            assert table.is_ours(table.build(spelling))
            if table.spec:
                assert table.is_ours(table.build(f"{spelling}()"))
        with pytest.raises(ste.errors.RegistrationError, match="already registered"):
            table.register(greek)
    finally:
        table.unregister(micro)
    assert python_name not in table.names()


def test_unknown_names_get_suggestions(table: Table) -> None:
    typo = table.builtin[:-1] + "x"
    with pytest.raises(table.unknown_error, match=f"(?i)did you mean [^?]*['\"]{table.builtin}['\"]"):
        table.build(typo)
    assert issubclass(table.unknown_error, ste.STEError)


def test_unregister_removes_a_name_and_unknown_unregister_raises(table: Table) -> None:
    table.register("temporary_entry")
    assert "temporary_entry" in table.names()
    table.unregister("temporary_entry")
    assert "temporary_entry" not in table.names()
    with pytest.raises(table.unknown_error, match="temporary_entr"):
        table.unregister("temporary_entry")


def test_concurrent_registration_of_one_name_has_exactly_one_winner(table: Table) -> None:
    results: list[str] = []
    barrier = threading.Barrier(8)

    def attempt() -> None:
        barrier.wait()
        try:
            table.register("contested_entry")
            results.append("won")
        except ste.errors.RegistrationError:
            results.append("refused")

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert sorted(results) == ["refused"] * 7 + ["won"]
    finally:
        table.unregister("contested_entry")


def test_concurrent_registration_of_many_names_loses_none(table: Table) -> None:
    names = [f"entry_{table.kind}_{i}" for i in range(32)]
    threads = [threading.Thread(target=table.register, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert set(names) <= set(table.names())
    finally:
        for name in names:
            table.unregister(name)


@pytest.mark.parametrize(
    ("register", "entry", "names"),
    [
        (ste.quantizers.register, lambda x: x, ste.quantizers.names),
        (ste.quantizers.register, _Doubling, ste.quantizers.names),  # a surrogate is not a quantizer
        (ste.constraints.register, 42, ste.constraints.names),
        (ste.constraints.register, lambda w: w, ste.constraints.names),
    ],
    ids=["quantizer-function", "quantizer-surrogate", "constraint-int", "constraint-function"],
)
def test_a_wrong_entry_is_refused_before_the_table_changes(register: Any, entry: Any, names: Any) -> None:
    """Every table checks its entry's kind before storing it, as register_scheme does: a RegistrationError naming
    the call, what was received and the fix, and the table's names unchanged."""
    before = names()
    with pytest.raises(ste.errors.RegistrationError, match=r"register\('wrong_entry'\): expected .* received .*Fix: "):
        register("wrong_entry")(entry)
    assert names() == before


def test_a_failing_publisher_leaves_the_table_as_it_was() -> None:
    """A table whose on_change raises (Keras refusing the entry) keeps its previous entry, or none."""
    from ste._common._names import NameTable

    def refuse(name: str, entry: Any) -> None:
        if entry == "refused":
            raise RuntimeError("refused by the publisher")

    names: NameTable[str] = NameTable("thing", ste.errors.ParameterError, on_change=refuse)
    names.register("kept", "first")
    for name in ("kept", "new"):
        with pytest.raises(RuntimeError, match="refused"):
            names.register(name, "refused", replace=True)
    assert names.items() == [("kept", "first")]


@pytest.mark.parametrize("name", [["atan"], {"name": "x"}, 3])
def test_a_name_that_is_not_a_string_raises_the_tables_error(table: Table, name: Any) -> None:
    """lookup and unregister of a list, dict or number: the table's own error (as an unknown name gets), naming the
    type received, not Python's "unhashable type". (ste.constraints has no lookup: its get hands a non-string to
    Keras, which reads configs and instances.)"""
    for call in (table.unregister,) if table.kind == "constraint" else (table.entry, table.unregister):
        with pytest.raises(table.unknown_error, match=f"name is a string; received {type(name).__name__}"):
            call(name)
