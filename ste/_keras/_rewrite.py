"""The model rewriter: the one place that walks and rebuilds Keras models, for every transformation of ste (QAT,
pruning, clustering, their ``strip_*`` calls, the fixed input and output ranges of a QAT model).

A transformation says only what it does to one layer (a :class:`LayerRewrite`): whether it claims the layer, which of
the layer's weights it then computes with, and the layer that replaces it. :class:`Rewriter` does the rest, the same
way for every transformation:

* **It reaches every layer**: the layers of functional and Sequential graphs (with their operation nodes, ``x + y``
  or ``x[:, 0]``, called again as they are), nested models, and the sublayers that any layer or model tracks, as
  attributes, in lists or in dicts, at any depth. A layer that the transformation does not claim but that holds
  claimed layers (a transformer block, an attention layer, a subclassed model) is copied and its claimed sublayers are
  swapped inside the copy.
* **It never changes the model it is given.** A model whose config is its graph (a ``keras.Sequential``, a model of
  Keras's own functional class) is rebuilt graph by graph: each layer a copy with its weights, a layer the graph calls
  several times one copy called as often, so its calls share their variables. Any other model (a subclassed model,
  a functional model whose class keeps a config of its own, as KerasHub's backbones and tasks do) is copied whole
  through Keras's serialization, and the copy is changed in place: each claimed layer is swapped for its replacement
  wherever the copy refers to it (attributes, lists, dicts, graph nodes), so the copy keeps its class and every
  attribute its code reads. The result is never compiled: its variables and structure are new, so it is compiled
  again, as TFMOT's results are.
* **It decides before it builds anything**: which layers it claims (the transformation's own checks run on each), and
  which weights of rank >= 2 no claimed layer computes with. Those stay float and are named in one warning, or
  refused under ``strict=True``. A layer selected out by the user's ``filters`` is left alone without a word.
"""

from __future__ import annotations

import abc
import contextlib
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from ..errors import NotBuiltError, ParameterError, ParameterTypeError, SerializationError, UnsupportedLayerError
from ._versions import complete_config

__all__ = [
    "GraphRebuild",
    "LayerRewrite",
    "Rewriter",
    "copy",
    "copy_layer",
    "count_calls",
    "graph_nodes",
    "graph_of",
    "is_graph_model",
    "is_weight",
    "layer_filter",
    "pairs",
    "shared_inside",
    "sublayers",
    "swap",
    "walk",
]


# -- what a model is made of ----------------------------------------------------------------------------------------


def _functional_class() -> type:
    from keras.src.models.functional import Functional  # Keras's functional class has no public name

    found: type = Functional
    return found


def is_graph_model(model: Any) -> bool:
    """Whether ``model``'s config is its graph, so that a model rebuilt from its layers is a model of its class: a
    ``keras.Sequential`` or a model of Keras's own functional class (not a subclass, such as KerasHub's backbones,
    whose config holds their constructor's arguments)."""
    return type(model) is keras.Sequential or type(model) is _functional_class()


def graph_of(model: keras.Model) -> Any:
    """The functional graph of a built Sequential or functional model (a functional subclass too); ``None`` for a
    model without one (an unbuilt Sequential, a subclassed model)."""
    if isinstance(model, keras.Sequential):
        return getattr(model, "_functional", None)
    return model if isinstance(model, _functional_class()) else None


def graph_nodes(graph: Any) -> list[Any]:
    """The nodes of a functional graph that call a layer or an operation, in the order the graph computes them."""
    return [
        node
        for depth in sorted(graph._nodes_by_depth, reverse=True)
        for node in graph._nodes_by_depth[depth]
        if node.operation is not None and not node.is_input
    ]


def sublayers(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The layers ``layer`` tracks directly (as attributes, in lists or dicts, or as a graph's layers), input layers
    left out. A ``Bidirectional`` is one layer: it rebuilds its two RNNs from their configs and checks their
    attributes (``go_backwards``), which no wrapper has."""
    if isinstance(layer, keras.layers.Bidirectional):
        return []
    return [
        child
        for child in layer._flatten_layers(include_self=False, recursive=False)
        if not isinstance(child, keras.layers.InputLayer)
    ]


def _own_variables(layer: keras.layers.Layer) -> list[Any]:
    """The variables ``layer`` holds itself (not through a sublayer)."""
    return [*layer._trainable_variables, *layer._non_trainable_variables]


def _untracked_variable(layer: keras.layers.Layer) -> str | None:
    """The name of an attribute of ``layer`` holding a ``tf.Variable`` that Keras does not track (made with
    ``tf.Variable``, e.g. in ``call``): no transformation can reach it."""
    tracked = {id(getattr(v, "value", v)) for v in layer.weights}
    for name, value in vars(layer).items():
        if isinstance(value, tf.Variable) and not isinstance(value, keras.Variable) and id(value) not in tracked:
            return str(name)
    return None


def is_weight(variable: Any) -> bool:
    """Whether ``variable`` is a weight the transformations account for: of rank >= 2 and not a layer's bias (the
    variable Keras's layers name ``bias``: an ``EinsumDense`` bias can have two axes). A table whose name merely holds
    the word (Swin's ``relative_position_bias_table``) is a weight."""
    return len(variable.shape) >= 2 and _short_path(variable).split(":")[0] != "bias"


def _size(variable: Any) -> int:
    size = 1
    for dim in variable.shape:
        size *= int(dim)
    return size


# -- which layers a call selects ------------------------------------------------------------------------------------


def _name_test(pattern: re.Pattern[str]) -> Callable[[keras.layers.Layer], bool]:
    return lambda layer: pattern.search(layer.name) is not None


def _class_test(kind: type) -> Callable[[keras.layers.Layer], bool]:
    return lambda layer: isinstance(layer, kind)


def layer_filter(owner: str, filters: Any) -> Callable[[keras.layers.Layer], bool]:
    """The predicate behind a transformation's ``filters`` argument (the layers it may transform; Keras's
    ``model.quantize(filters=...)`` takes the same kinds): ``None`` (every layer), a regular expression matched
    with ``re.search`` against the layer's name, a layer class (``isinstance``), a callable ``layer -> bool``, or a
    list or tuple of those (any of them)."""
    if filters is None:
        return lambda layer: True
    items = list(filters) if isinstance(filters, (list, tuple)) else [filters]
    tests: list[Callable[[keras.layers.Layer], bool]] = []
    for item in items:
        if isinstance(item, str):
            try:
                pattern = re.compile(item)
            except re.error as error:
                raise ParameterError(
                    f"{owner}: filters holds {item!r}, which is not a regular expression ({error}). Fix: pass a "
                    f"pattern matched against layer names with re.search, e.g. filters='^(?!stem$)' or "
                    f"filters=lambda layer: layer.name != 'stem'."
                ) from None
            tests.append(_name_test(pattern))
        elif isinstance(item, type) and issubclass(item, keras.layers.Layer):
            tests.append(_class_test(item))
        elif callable(item) and not isinstance(item, keras.layers.Layer):
            tests.append(item)
        else:
            raise ParameterTypeError(
                f"{owner}: filters must be None, a regular expression for layer names, a Keras layer class, a "
                f"callable layer -> bool, or a list of those; received {item!r:.80} ({type(item).__name__}). Fix: "
                f"e.g. filters=lambda layer: layer.name != 'stem' to transform every layer but the stem."
            )

    def selected(layer: keras.layers.Layer) -> bool:
        return any(bool(test(layer)) for test in tests)

    return selected


# -- copies ---------------------------------------------------------------------------------------------------------


def _copy_error(owner: str, layer: Any, error: Exception) -> UnsupportedLayerError:
    kind = type(layer).__name__
    return UnsupportedLayerError(
        f"{owner}: cannot copy the layer '{layer.name}' ({kind}), which the transformation must do to leave the model "
        f"it was given unchanged: rebuilding it from its config raised {type(error).__name__}: {error}. Fix: give "
        f"{kind} a get_config() that returns every argument of its __init__ (Keras's rule for layers that can be "
        f"saved and cloned)."
    )


def _build_as(new: keras.layers.Layer, layer: keras.layers.Layer) -> None:
    """Build ``new`` as ``layer`` was built (a layer with several inputs, e.g. attention, needs every shape)."""
    config = layer.get_build_config() if layer.built else None
    if config:
        new.build_from_config(config)


def _classes(layer: keras.layers.Layer) -> dict[str, type]:
    """The classes of ``layer`` and of every layer inside it, by class name and registered name: what its config
    names, so that a copy finds a custom class that was never registered with Keras."""
    found: dict[str, type] = {}
    for inner in layer._flatten_layers(include_self=True):
        kinds = [type(inner)]  # and the serializable objects it holds (a pruning schedule, a quantizer of your own)
        kinds += [type(value) for value in vars(inner).values() if _serializable(value)]
        for kind in kinds:
            found[kind.__name__] = kind
            found[keras.saving.get_registered_name(kind)] = kind
    return found


def _serializable(value: Any) -> bool:
    return callable(getattr(value, "get_config", None)) and not isinstance(value, (type, keras.layers.Layer))


def _wrapped(layer: keras.layers.Layer) -> keras.layers.Layer | None:
    """The layer inside a training wrapper of ste (pruning, clustering: its class names the call that strips it),
    else ``None``."""
    inner = getattr(layer, "layer", None)
    wrapper = isinstance(getattr(type(layer), "strip_with", None), str)
    return inner if wrapper and isinstance(inner, keras.layers.Layer) else None


def pairs(source: keras.layers.Layer, target: keras.layers.Layer) -> list[tuple[Any, Any]]:
    """Each layer inside ``source`` with its counterpart inside ``target``, a copy of ``source`` made from its
    config: the same layers, tracked in the same order. A training wrapper of ``source`` that the config does not
    hold (a wrapper swapped into a model whose class keeps its own config) is paired with the plain counterpart of
    the layer it wraps. A counterpart whose name Keras made up anew (``dense_7`` for ``dense_3``) takes the
    original's name, so that the copy reads as the model it copies."""
    found: list[tuple[Any, Any]] = []
    seen: set[int] = set()

    def mismatch() -> UnsupportedLayerError:
        return UnsupportedLayerError(
            f"cannot match the layers of '{source.name}' ({type(source).__name__}) with those of a copy rebuilt from "
            f"its config, which holds other layers. Fix: give {type(source).__name__} a get_config() from which it "
            f"rebuilds the same layers."
        )

    def visit(a: keras.layers.Layer, b: keras.layers.Layer) -> None:
        left, right = sublayers(a), sublayers(b)
        if len(left) != len(right):
            raise mismatch()
        for one, other in zip(left, right):
            if id(one) in seen:
                continue
            seen.add(id(one))
            inner = _wrapped(one)
            if type(one) is not type(other):
                if inner is None or type(inner) is not type(other):
                    raise mismatch()
                found.append((one, other))
                if other.name != inner.name:
                    other.name = inner.name
                visit(inner, other)
                continue
            found.append((one, other))
            if other.name != one.name:
                other.name = one.name
            visit(one, other)

    visit(source, target)
    return found


def _transfer(source: keras.layers.Layer, target: keras.layers.Layer, matched: list[tuple[Any, Any]]) -> None:
    """Copy the values of every variable of ``source`` (its own, and each matched layer's) into ``target``'s."""
    for one, other in [(source, target), *matched]:
        inner = _wrapped(one) if type(one) is not type(other) else None
        mine, theirs = _own_variables(inner if inner is not None else one), _own_variables(other)
        if len(mine) != len(theirs):
            raise UnsupportedLayerError(
                f"cannot copy the weights of '{one.name}' ({type(one).__name__}): its copy rebuilt from its config "
                f"holds {len(theirs)} variable(s), it holds {len(mine)}. Fix: give {type(one).__name__} a "
                f"get_config() and a build() that make the same variables."
            )
        for variable, value in zip(theirs, mine):
            variable.assign(value.value)


def copy(layer: keras.layers.Layer, owner: str) -> tuple[keras.layers.Layer, list[tuple[Any, Any]]]:
    """A new layer (or model) computing what ``layer`` computes, rebuilt from its config, built as it is, with a
    copy of its weights, and the :func:`pairs` of their inner layers. A model's compile state is left out; a
    ``Lambda`` keeps its function object."""
    global _copying
    _copying += 1  # a layer changed in place gives its own config here (see _describe_swaps)
    try:
        if type(layer) is keras.layers.Lambda:
            new = keras.layers.Lambda(
                layer.function,
                output_shape=layer._output_shape,
                mask=layer.mask,
                arguments=dict(layer.arguments),
                name=layer.name,
                dtype=layer.dtype_policy,
            )
        elif isinstance(layer, keras.Model):
            config = keras.saving.serialize_keras_object(layer)
            config.pop("compile_config", None)
            new = keras.saving.deserialize_keras_object(config, custom_objects=_classes(layer), safe_mode=False)
        else:
            with keras.saving.custom_object_scope(_classes(layer)):
                new = type(layer).from_config(complete_config(layer, layer.get_config()))
        if getattr(layer, "_input_shape_arg", None) is not None:  # Dense(4, input_shape=(8,)) builds a Sequential
            new._input_shape_arg = layer._input_shape_arg
        if layer.built and not new.built:
            _build_as(new, layer)
    except Exception as error:  # a custom layer's own get_config/from_config/build: any exception
        raise _copy_error(owner, layer, error) from error
    finally:
        _copying -= 1
    matched = pairs(layer, new)
    _transfer(layer, new, matched)
    return new, matched


#: How many calls of :func:`copy` are under way: a layer changed in place gives its class's config to them only.
_copying = 0


def _describe_swaps(layer: keras.layers.Layer, owner: str, swapped: list[tuple[str, keras.layers.Layer]]) -> None:
    """Make ``layer``'s ``get_config`` (and so ``model.save`` to ``.keras``, ``keras.saving.save_model``,
    ``to_json``, pickling) raise :class:`~ste.errors.SerializationError` naming the fix: ``swapped`` layers
    (``(name, replacement)``) were swapped inside it in place, and its config, its class's constructor arguments,
    rebuilds the layers it had before, so a ``.keras`` file of it would not load its weights. :func:`copy` still reads
    the class's config, from which the rewriter pairs the layers of a copy (``strip_*`` of the model)."""
    kind = type(layer).__name__
    strips = sorted({str(getattr(new, "strip_with", "")) for _, new in swapped} - {""})
    name, example = swapped[0]
    strip = f"strip it first and save that ({strips[0]}(model).save('model.keras')), or " if strips else ""

    def get_config() -> dict[str, Any]:
        if _copying:
            config: dict[str, Any] = type(layer).get_config(layer)
            return config
        raise SerializationError(
            f"{owner}'s copy of the {kind} '{layer.name}' was changed in place (the model passed to it is "
            f"unchanged): {len(swapped)} layer(s) swapped inside the copy, e.g. '{name}' is now a "
            f"{type(example).__name__}, and its config ({kind}'s constructor arguments) rebuilds "
            f"the layers it had before: a .keras file of it (model.save, keras.saving.save_model, get_config) would "
            f"not load its weights. Fix: {strip}save its weights (model.save_weights('model.weights.h5')) and load "
            f"them into the same call made again on the same model (load_weights)."
        )

    object.__setattr__(layer, "get_config", get_config)


def copy_layer(layer: keras.layers.Layer, owner: str) -> keras.layers.Layer:
    """:func:`copy` without the pairs."""
    return copy(layer, owner)[0]


# -- swapping a layer inside a model -------------------------------------------------------------------------------


def _set_item(container: Any, key: Any, new: Any) -> None:
    """``container[key] = new``. TensorFlow's tracking list (``ListWrapper``) then refuses to be saved (it marks a
    replaced item as a mutation that a checkpoint could not restore when objects are created), so that a model
    changed in place could not be exported (``model.export``, ``ste.to_tflite``); the new item takes the old one's
    place for good, so the list is marked as unchanged again."""
    container[key] = new
    if getattr(container, "_non_append_mutation", False):
        container._non_append_mutation = False
        container._update_snapshot()


def _replace_in(container: Any, old: Any, new: Any) -> bool:
    """Replace ``old`` by ``new`` in a list or dict (and in the lists a dict holds); whether anything changed."""
    changed = False
    if isinstance(container, list):
        for index, value in enumerate(container):
            if value is old:
                _set_item(container, index, new)  # Keras's and TensorFlow's tracking lists keep their own books
                changed = True
    elif isinstance(container, dict):
        for key, value in list(container.items()):
            if value is old:
                _set_item(container, key, new)
                changed = True
            elif isinstance(value, list):
                changed = _replace_in(value, old, new) or changed
    return changed


_NOT_REFERENCES = frozenset({"_inbound_nodes", "_outbound_nodes", "_tracker", "_trainable_variables"})


def swap(root: keras.layers.Layer, old: keras.layers.Layer, new: keras.layers.Layer) -> None:
    """Make every reference to ``old`` inside ``root`` (``root`` included) a reference to ``new``: attributes, lists,
    dicts and tuples a layer holds, Keras's tracking of sublayers, and the nodes of functional graphs (``new`` takes
    ``old``'s place in the graph)."""
    for owner in root._flatten_layers(include_self=True, recursive=True):
        tracker = getattr(owner, "_tracker", None)
        if tracker is not None and tracker.is_in_store("layers", old):
            tracker.replace_tracked_value("layers", old, new)
        for name, value in list(vars(owner).items()):
            if name in _NOT_REFERENCES:
                continue
            if value is old:
                setattr(owner, name, new)  # Keras and TensorFlow track the new value under the same name
            elif isinstance(value, (list, dict)):
                _replace_in(value, old, new)
            elif isinstance(value, tuple) and any(item is old for item in value):
                object.__setattr__(owner, name, type(value)(new if item is old else item for item in value))
    offset = len(new._inbound_nodes)  # a layer the new model already calls (a shared one) keeps its own nodes
    for node in old._inbound_nodes:
        node.operation = new
        for index, tensor in enumerate(node.outputs):
            history = tensor._keras_history
            tensor._keras_history = type(history)(new, history[1] + offset, index)
    object.__setattr__(new, "_inbound_nodes", [*new._inbound_nodes, *old._inbound_nodes])
    object.__setattr__(new, "_outbound_nodes", [*new._outbound_nodes, *old._outbound_nodes])


# -- what a transformation says -------------------------------------------------------------------------------------


class LayerRewrite(abc.ABC):
    """What one transformation does to one layer (see the module docstring)."""

    #: The public call, for messages (``"ste.sparsity.prune_low_magnitude"``).
    owner: str = ""

    @abc.abstractmethod
    def claims(self, layer: keras.layers.Layer) -> bool:
        """Whether the transformation replaces ``layer`` (a layer of the model it was given; read only). A layer not
        claimed is kept, and its sublayers are asked in turn."""

    @abc.abstractmethod
    def computes_with(self, layer: keras.layers.Layer) -> list[Any]:
        """The weights of the claimed ``layer`` that its replacement computes through ste's op (quantized, masked,
        clustered); any other weight of rank >= 2 of the layer stays float and is named in the warning."""

    @abc.abstractmethod
    def replace(self, layer: keras.layers.Layer, original: keras.layers.Layer) -> keras.layers.Layer:
        """The layer that takes the place of the claimed ``original`` (a layer of the model given: read only).
        ``layer`` is a private copy of it, built as it is, with its weights, which the replacement may wrap or change
        (and return itself). A copy made from a model's config holds no training wrapper the config does not know:
        there ``layer`` is the plain counterpart of the layer ``original`` wraps."""

    @abc.abstractmethod
    def float_fix(self) -> str:
        """What a user does about a layer whose weights stay float (the sentence after "Fix:" in the warning)."""

    @abc.abstractmethod
    def unchanged(self) -> str:
        """What a weight the transformation does not cover stays, for messages: "float", "dense", "unclustered"."""

    def covers(self, layer: keras.layers.Layer, in_graph: bool) -> bool:
        """Whether leaving ``layer`` (not claimed, holding no sublayer; ``in_graph``: a node of a graph the rewriter
        rebuilds) as it is counts as covered. The default: it holds no weight (:func:`is_weight`)."""
        del in_graph
        return not any(is_weight(variable) for variable in layer.weights)

    def study(self, rewriter: Rewriter, model: keras.Model) -> None:
        """Called once before the plan, with the rewriter and the model given: a transformation that decides from
        a graph's structure (QAT's folds and fusions) does it here. The default does nothing."""
        del rewriter, model

    def planned(self, rewriter: Rewriter, model: keras.Model) -> None:
        """Called once after the plan (``rewriter.plan``), before anything is built: the last moment to refuse.
        The default does nothing."""
        del rewriter, model

    def check(self, layer: keras.layers.Layer, path: str) -> None:
        """Raise an ``ste.errors`` error if the claimed ``layer`` (at ``path``) cannot be transformed as asked;
        called for every claimed layer before anything is built. The default accepts every layer."""
        del layer, path


@dataclass
class Plan:
    """What a rewrite will do, decided before anything is built."""

    claimed: dict[int, keras.layers.Layer] = field(default_factory=dict)
    #: ``(path, class name, number of weights, number of values)`` of each layer the transformation does not cover,
    #: whose weights (:func:`is_weight`) stay as they are (not counting layers selected out by ``filters``).
    floats: list[tuple[str, str, int, int]] = field(default_factory=list)
    covered: int = 0  # values of rank >= 2 weights inside claimed layers' computation
    total: int = 0  # values of every rank >= 2 weight of the model
    seen: set[int] = field(default_factory=set)
    left: list[str] = field(default_factory=list)  # ``path (Class)`` of the claimable layers filters selected out

    @property
    def coverage(self) -> float:
        """The fraction of the model's rank >= 2 weight values that the transformation computes with."""
        return self.covered / self.total if self.total else 1.0

    def float_layers(self) -> list[str]:
        """``path (Class)`` of each layer the transformation does not cover, in model order."""
        return [f"{path} ({kind})" for path, kind, _, _ in self.floats]


# -- the rewriter ---------------------------------------------------------------------------------------------------


class Rewriter:
    """Rewrites one model with one :class:`LayerRewrite` (see the module docstring)."""

    graph_class: type[GraphRebuild]

    def __init__(
        self, transform: LayerRewrite, filters: Any = None, strict: bool = False, graph_class: Any = None
    ) -> None:
        self.transform = transform
        self.owner = transform.owner
        self.select = layer_filter(self.owner, filters)
        self.filters = filters
        self.strict = strict
        self.graph_class = graph_class or GraphRebuild
        self.plan = Plan()
        self.copies: dict[int, keras.layers.Layer] = {}  # id(original layer) → its layer in the new model
        self.calls: dict[int, int] = {}  # id(layer) → how often the graphs of the model call it
        #: id(layer) → the layer (a composite, a nested model without a graph) that holds it while a rebuilt graph
        #: also calls it (a tied language-model head: ``backbone.token_embedding(backbone(x), reverse=True)``)
        self.holders: dict[int, keras.layers.Layer] = {}

    # -- planning ---------------------------------------------------------------------------------------------------

    def claims(self, layer: keras.layers.Layer) -> bool:
        return id(layer) in self.plan.claimed

    def _count(self, layer: keras.layers.Layer, variables: list[Any], inside: set[int]) -> tuple[int, int]:
        """Count the weights among ``variables`` (each once): covered if in ``inside``; returns the number and the
        values of the others."""
        weights = values = 0
        for variable in variables:
            if not is_weight(variable) or id(variable) in self.plan.seen:
                continue
            self.plan.seen.add(id(variable))
            self.plan.total += _size(variable)
            if id(variable) in inside:
                self.plan.covered += _size(variable)
            else:
                weights, values = weights + 1, values + _size(variable)
        return weights, values

    def _visit(self, layer: keras.layers.Layer, path: str, in_graph: bool) -> None:
        """Plan ``layer`` (at ``path``; ``in_graph``: a node of a graph the rewriter rebuilds): claimed, left alone
        (claimable but selected out by ``filters``), or opened (its own weights counted, its sublayers planned in
        turn)."""
        if id(layer) in self.plan.seen:
            return
        self.plan.seen.add(id(layer))
        untracked = _untracked_variable(layer)
        if untracked is not None:
            raise UnsupportedLayerError(
                f"{self.owner}: the layer '{path}' ({type(layer).__name__}) holds a tf.Variable in its attribute "
                f"'{untracked}' that Keras does not track (made with tf.Variable, e.g. in call), so no transformation "
                f"can reach it. Fix: create it in the layer's build() with self.add_weight(...)."
            )
        if self.transform.claims(layer):
            if not self.select(layer):
                self._count(layer, layer.weights, set())
                self.plan.left.append(f"{path} ({type(layer).__name__})")
                return
            self.transform.check(layer, path)
            self.plan.claimed[id(layer)] = layer
            inside = {id(variable) for variable in self.transform.computes_with(layer)}
            weights, values = self._count(layer, layer.weights, inside)
            if weights:
                self.plan.floats.append((path, type(layer).__name__, weights, values))
            return
        children = sublayers(layer)
        if children and not self._claimable_inside(layer):  # nothing inside to transform: one float layer
            weights, values = self._count(layer, layer.weights, set())
            if not self.transform.covers(layer, in_graph) and self.select(layer):
                self.plan.floats.append((path, type(layer).__name__, weights, values))
            return
        weights, values = self._count(layer, _own_variables(layer), set())
        uncovered = bool(weights) if children else not self.transform.covers(layer, in_graph)
        if uncovered and self.select(layer):
            self.plan.floats.append((path, type(layer).__name__, weights, values))
        for child in children:
            self._visit(child, f"{path}/{child.name}", in_graph and is_graph_model(layer))

    def _claimable_inside(self, layer: keras.layers.Layer) -> bool:
        """Whether some layer inside ``layer`` is one the transformation would claim (selected or not)."""
        return any(self.transform.claims(inner) for _, inner in walk(layer))

    def make_plan(self, model: keras.Model) -> Plan:
        """Decide what the rewrite does (see :class:`Plan`); raises before anything is built."""
        self.plan.seen.add(id(model))
        weights, values = self._count(model, _own_variables(model), set())
        if weights:
            self.plan.floats.append((model.name, type(model).__name__, weights, values))
        graph = is_graph_model(model)
        for child in sublayers(model):
            self._visit(child, child.name, graph)
        if self.filters is not None and not self.plan.claimed and self.plan.left:
            names = ", ".join(self.plan.left[:8]) + (
                f" and {len(self.plan.left) - 8} more" if len(self.plan.left) > 8 else ""
            )
            raise ParameterError(
                f"{self.owner}: filters={self.filters!r:.80} selected none of the {len(self.plan.left)} layer(s) this "
                f"transformation can change ({names}), so the model would come back unchanged. A filter sees the "
                f"layers listed (an attention layer as a whole, not its projections). Fix: a filter that matches some "
                f"of them, or leave filters out."
            )
        if self.strict and self.plan.floats:
            raise UnsupportedLayerError(
                f"{self.owner}(strict=True): {self._float_sentence()}. Fix: {self.transform.float_fix()}; or pass "
                f"strict=False to keep them {self.transform.unchanged()} with a warning."
            )
        return self.plan

    def _float_sentence(self) -> str:
        weights = sum(count for _, _, count, _ in self.plan.floats)
        values = sum(size for _, _, _, size in self.plan.floats)
        share = values / self.plan.total if self.plan.total else 0.0
        held = f"{weights} weight(s) of rank >= 2, {values:,} values, {share:.1%} of the model's" if weights else ""
        return (
            f"{len(self.plan.floats)} layer(s) are not covered and stay {self.transform.unchanged()}"
            + (f" ({held})" if held else "")
            + f": {', '.join(self.plan.float_layers())}"
        )

    def warn(self, stacklevel: int) -> None:
        """One warning naming the layers whose weights stay float, if any."""
        if self.plan.floats:
            warnings.warn(
                f"{self.owner}: {self._float_sentence()}. Fix: {self.transform.float_fix()}; or pass strict=True to "
                f"make this an error.",
                UserWarning,
                stacklevel=stacklevel + 1,
            )

    # -- building ---------------------------------------------------------------------------------------------------

    def run(self, model: keras.Model) -> keras.Model:
        """The rewritten copy of ``model``, planned first (see :meth:`make_plan`)."""
        self.check_model(model)
        graph = is_graph_model(model) and graph_of(model) is not None
        if graph:
            count_calls(model, self.calls, set())
            self.holders = shared_inside(model)
        self.transform.study(self, model)
        self.make_plan(model)
        self.transform.planned(self, model)
        if graph:
            new: keras.Model = self.graph_class(self, model).run()
            return new
        if isinstance(model, keras.Sequential) and graph_of(model) is None:
            return keras.Sequential([self.layer(layer) for layer in model.layers], name=model.name)
        return self.in_place(model)

    def holds_claimed(self, layer: keras.layers.Layer) -> bool:
        """Whether a layer the transformation does not claim holds claimed layers (then the new model's layer for it
        is a copy with its claimed layers swapped inside)."""
        return any(id(inner) in self.plan.claimed for _, inner in walk(layer))

    def check_model(self, model: Any) -> None:
        if not isinstance(model, keras.Model):
            raise ParameterTypeError(
                f"{self.owner}: expected a Keras 3 model; received {type(model).__name__}. Fix: pass the keras.Model."
            )
        if isinstance(model, keras.Sequential) and graph_of(model) is None:
            return  # rebuilt layer by layer: each replacement is built when the new model is
        if not model.built:
            raise NotBuiltError(
                f"{self.owner}: the model '{model.name}' ({type(model).__name__}) is not built, so it has no weights "
                f"to transform yet. Fix: call it once on a batch of data, e.g. {_call_example(model)} (a functional "
                f"or Sequential model with keras.Input is built when it is made; model.build(input_shape) builds no "
                f"layer of a subclassed model)."
            )
        # model.build(input_shape) on a subclassed model marks it built and builds none of its layers
        unbuilt = [
            f"'{path}' ({type(layer).__name__})"
            for path, layer in walk(model)
            if not layer.built and (not model.weights or self.transform.claims(layer))
        ]
        if unbuilt:
            names = ", ".join(unbuilt[:5]) + (f" and {len(unbuilt) - 5} more" if len(unbuilt) > 5 else "")
            raise NotBuiltError(
                f"{self.owner}: the model '{model.name}' ({type(model).__name__}) is built but its layer(s) {names} "
                f"are not, so they have no weights to transform (model.build(input_shape) builds no layer of a "
                f"subclassed model). Fix: call the model once on a batch of data instead, e.g. "
                f"{_call_example(model)}."
            )

    def shares(self, layer: keras.layers.Layer) -> bool:
        """Whether a rebuilt graph calls ``layer`` while another layer holds it, or ``layer`` holds such a layer:
        then the new model's layer for it is :meth:`layer`'s, so that both uses keep one layer."""
        return id(layer) in self.holders or any(holder is layer for holder in self.holders.values())

    def layer(self, layer: keras.layers.Layer) -> keras.layers.Layer:
        """The new model's layer for ``layer`` (a layer of the model given), made once: its replacement if claimed,
        a copy otherwise (with its claimed sublayers swapped inside). A layer that another layer holds (see
        :attr:`holders`) is the one inside the new model's layer for its holder."""
        found = self.copies.get(id(layer))
        holder = self.holders.get(id(layer))
        if found is None and holder is not None:
            self.layer(holder)
            found = self.copies.get(id(layer))
            if found is None:
                raise UnsupportedLayerError(
                    f"{self.owner}: the layer '{layer.name}' ({type(layer).__name__}) is held by "
                    f"'{holder.name}' ({type(holder).__name__}) and called by the model's graph too, and the "
                    f"transformation cannot keep one layer for both uses. Fix: call it only through "
                    f"'{holder.name}', or build the model from '{holder.name}''s layers without nesting it."
                )
        if found is None:
            new, matched = copy(layer, self.owner)
            found = self.transform.replace(new, layer) if self.claims(layer) else self.inside(new, matched)
            self.copies[id(layer)] = found
        return found

    def inside(self, new: keras.layers.Layer, matched: list[tuple[Any, Any]]) -> keras.layers.Layer:
        """``new`` (a copy whose layers ``matched`` pairs with the original's) with each claimed layer swapped for
        its replacement. ``new`` then refuses to be saved by its config, which no longer describes it (see
        :func:`_describe_swaps`)."""
        swapped: list[tuple[str, keras.layers.Layer]] = []
        for source, target in matched:
            made = self.copies.get(id(source))
            if made is not None:  # a layer shared with the graph or another copy: the new model's one layer
                if made is not target:
                    swap(new, target, made)
                    swapped.append((target.name, made))
                continue
            self.copies[id(source)] = target
            if self.claims(source):
                replacement = self.transform.replace(target, source)
                self.copies[id(source)] = replacement
                if replacement is target:
                    continue
                if not replacement.built and target.built:
                    _build_as(replacement, target)  # no graph call will build it
                swap(new, target, replacement)
                swapped.append((target.name, replacement))
        if swapped:
            _describe_swaps(new, self.owner, swapped)
        return new

    def in_place(self, model: keras.Model) -> keras.Model:
        """A copy of ``model`` with its claimed layers swapped for their replacements."""
        return self.inside(*copy(model, self.owner))


def _call_example(model: keras.Model) -> str:
    """``model(np.zeros((1, ...)))`` with the input shape the model was built with, where it knows one."""
    shape = (model.get_build_config() or {}).get("input_shape") if model.built else None
    if isinstance(shape, (list, tuple)) and shape and all(isinstance(dim, (int, type(None))) for dim in shape):
        dims = ", ".join(str(dim) for dim in (1, *[dim or 1 for dim in shape[1:]]))
        return f"model(np.zeros(({dims}{',' if len(shape) == 1 else ''})))"
    return "model(np.zeros((1, *input_shape)))"


def _short_path(variable: Any) -> str:
    return str(getattr(variable, "path", variable.name)).rsplit("/", 1)[-1]


def count_calls(model: keras.Model, counts: dict[int, int], seen: set[int]) -> None:
    """How often each layer and nested graph model is called, over ``model``'s graph and the graphs of the plain
    models nested in it (each graph once)."""
    if id(model) in seen:
        return
    seen.add(id(model))
    graph = graph_of(model)
    if graph is None:
        return
    for node in graph_nodes(graph):
        operation = node.operation
        counts[id(operation)] = counts.get(id(operation), 0) + 1
        if isinstance(operation, keras.Model) and is_graph_model(operation):
            count_calls(operation, counts, seen)


def shared_inside(model: keras.Model) -> dict[int, keras.layers.Layer]:
    """The layers that the graphs of ``model`` (its own and its nested graph models') call while a layer those
    graphs call also holds them (a composite layer, a nested model without a graph): ``id`` → that holder."""
    called: dict[int, keras.layers.Layer] = {}
    seen: set[int] = set()

    def visit(graph_model: keras.Model) -> None:
        if id(graph_model) in seen:
            return
        seen.add(id(graph_model))
        for node in graph_nodes(graph_of(graph_model)):
            operation = node.operation
            if isinstance(operation, keras.Model) and is_graph_model(operation):
                visit(operation)
            elif isinstance(operation, keras.layers.Layer):
                called[id(operation)] = operation

    visit(model)
    holders: dict[int, keras.layers.Layer] = {}
    for layer in called.values():
        for _, inner in walk(layer):
            if id(inner) in called and id(inner) not in holders:
                holders[id(inner)] = layer
    return holders


class GraphRebuild:
    """One functional graph (a Sequential's or a functional model's) rebuilt node by node with the rewriter's layers:
    operation nodes called again as they are, nested graph models rebuilt once and called in their place, every
    other layer replaced by :meth:`Rewriter.layer`. QAT subclasses it to put activation quantizers on the graph's
    edges (:meth:`visit` and :meth:`visit_model`)."""

    def __init__(self, rewriter: Rewriter, model: keras.Model) -> None:
        self.rewriter = rewriter
        self.source = model
        self.graph = graph_of(model)
        self.nodes = graph_nodes(self.graph)
        self.inputs = [
            keras.Input(batch_shape=t.shape, dtype=t.dtype, name=t._keras_history[0].name) for t in self.graph.inputs
        ]
        self.tensors: dict[int, Any] = {id(t): new for t, new in zip(self.graph.inputs, self.inputs)}
        self.done: set[int] = set()

    def arguments(self, node: Any, value: Callable[[Any], Any] | None = None) -> tuple[Any, Any]:
        """The new graph's arguments of ``node`` (each tensor through ``value`` if given)."""
        lookup = value or (lambda tensor: self.tensors[id(tensor)])
        return node.arguments.fill_in({id(t): lookup(t) for t in node.input_tensors})  # type: ignore[no-any-return]

    def store(self, node: Any, outputs: Any) -> None:
        for tensor, new in zip(node.outputs, keras.tree.flatten(outputs)):
            self.tensors[id(tensor)] = new

    def visit(self, node: Any) -> None:
        """Rebuild one node: an operation called again, a nested graph model rebuilt, a layer replaced."""
        operation = node.operation
        if isinstance(operation, keras.Model) and is_graph_model(operation):
            self.visit_model(node)
            return
        args, kwargs = self.arguments(node)
        new = self.rewriter.layer(operation) if isinstance(operation, keras.layers.Layer) else operation
        self.store(node, new(*args, **kwargs))

    def visit_model(self, node: Any) -> None:
        model = node.operation
        found = self.rewriter.copies.get(id(model))
        if found is None:
            found = self.rewriter.copies[id(model)] = type(self)(self.rewriter, model).run()
        args, kwargs = self.arguments(node)
        self.store(node, found(*args, **kwargs))

    def outputs(self) -> Any:
        return [self.tensors[id(t)] for t in self.graph.outputs]

    def run(self) -> keras.Model:
        for node in self.nodes:
            if id(node) not in self.done:
                self.visit(node)
        outputs = keras.tree.pack_sequence_as(self.graph._outputs_struct, self.outputs())
        inputs = keras.tree.pack_sequence_as(self.graph._inputs_struct, self.inputs)
        name = self.source.name
        with _recursion_room(len(self.nodes)):
            if isinstance(self.source, keras.Sequential):
                return keras.Sequential([self.inputs[0], *_layers_in_order(inputs, outputs)], name=name)
            return keras.Model(inputs, outputs, name=name)


@contextlib.contextmanager
def _recursion_room(nodes: int) -> Iterator[None]:
    """Room on Python's stack for Keras to map a rebuilt graph of about ``nodes`` source operations: Keras walks a
    functional graph recursively, one frame per step of depth (``keras.src.ops.function._build_map_helper``), and a
    transformation that adds nodes (QAT's quantizers) takes a graph Keras built under the default limit of 1,000
    past it (EfficientNetV2L). The limit is raised for the build only, and restored."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, 4 * nodes + before))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def _layers_in_order(inputs: Any, outputs: Any) -> list[keras.layers.Layer]:
    graph = keras.Model(inputs, outputs)
    return [layer for layer in graph.layers if not isinstance(layer, keras.layers.InputLayer)]


def walk(model: keras.Model) -> Iterator[tuple[str, keras.layers.Layer]]:
    """``(path, layer)`` for every layer inside ``model`` at any depth, each once, in tracking order."""
    seen: set[int] = set()

    def visit(layer: keras.layers.Layer, prefix: str) -> Iterator[tuple[str, keras.layers.Layer]]:
        for child in sublayers(layer):
            if id(child) in seen:
                continue
            seen.add(id(child))
            path = f"{prefix}{child.name}"
            yield path, child
            yield from visit(child, f"{path}/")

    yield from visit(model, "")
