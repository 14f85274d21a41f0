"""The graph rewrite behind :func:`ste.quantize_model` and :func:`ste.qat.quantize_apply`.

A functional model is walked node by node in its own order (a Sequential model through its functional graph; a
nested model is rewritten recursively and called in its place). Each tensor of the new graph carries one flag:
whether it is fake-quantized. A layer whose role (see :mod:`ste.qat._scheme`) needs quantized inputs gets them,
one activation quantizer per unquantized tensor, shared by all its consumers; a quantizing layer's output gets its
own quantizer. The inputs and the output of a Concatenate form one range group: one quantizer layer (one min/max
pair) quantizes all of them, as TFLite's CONCATENATION needs one scale, so that the converter adds no requantize op.
Layers that are not covered stay float: fresh copies with the trained weights. An integer tensor that a quantized
layer computes with (the scheme's :meth:`~ste.qat.Scheme.casts_integers`: all but Embedding, whose integers are
indices) is cast to that layer's float dtype first, as the float layer's own arithmetic promotes it, then quantized.

Sharing is kept: a layer or a nested model that the float model calls more than once becomes one layer (one
model) of the new graph, called as often, so that its calls share their variables. A shared compute layer is
quantized without fusions (each call's output gets its own quantizer); a shared nested model is rewritten once, as
if its inputs were float (it quantizes them itself where its layers need it).

Fusions, only where the intermediate tensors have no other consumer and each layer is called once: a covered
convolution + BatchNormalization becomes one folded layer; a compute layer's ReLU/ReLU6 (its ``activation``, or a
following ``ReLU``/``Activation`` layer) runs before its output quantizer. An activation the scheme does not fuse
(softmax, sigmoid) runs as its own layer between two quantizers.

Names: the layer that replaces a compute layer (folded or not) is named ``prefix + name`` of that layer (the batch
norm and activation folded or fused into it have no layer of their own); an activation run as its own layer is
``<layer>_activation``; an activation quantizer is ``<producer>_quant_<k>``, k counting quantizers from 1 in the
order the rewrite visits tensors (the same for the same model); a cast of an integer tensor is ``<producer>_cast_<k>``.
Every other layer keeps its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras

from ..errors import NotBuiltError, UnsupportedLayerError
from ._config import QuantizeConfig
from ._scheme import InputFeed, Role, Scheme
from ._signs import non_negative_feeds

__all__ = ["ANNOTATION", "Rewrite", "rewrite"]

ANNOTATION = "_ste_qat_annotation"


def _functional(model: keras.Model) -> Any:
    if isinstance(model, keras.Sequential):
        graph = getattr(model, "_functional", None)
        if graph is None:
            raise NotBuiltError(
                f"ste.quantize_model: the Sequential model '{model.name}' is not built, so it has no graph to "
                f"quantize. Fix: give it an input, keras.Sequential([keras.Input(shape), ...]), or call "
                f"model.build(input_shape) first."
            )
        return graph
    if not hasattr(model, "_nodes_by_depth"):
        raise NotBuiltError(
            f"ste.quantize_model: {type(model).__name__} '{model.name}' is a subclassed model, whose call is Python "
            f"code without a graph to rewrite. Fix: build it as a functional or Sequential model, or quantize its "
            f"layers yourself with ste.layers and ste.qat.ActivationFakeQuant."
        )
    return model


def _nodes(graph: Any) -> list[Any]:
    """The nodes of ``graph`` that call a layer, in the order the model computes them."""
    return [
        node
        for depth in sorted(graph._nodes_by_depth, reverse=True)
        for node in graph._nodes_by_depth[depth]
        if node.operation is not None and not node.is_input
    ]


def _count_calls(model: keras.Model, counts: dict[int, int], seen: set[int]) -> None:
    """How often each layer and nested model is called, over ``model`` and every model nested in it (each graph
    once)."""
    if id(model) in seen:
        return
    seen.add(id(model))
    for node in _nodes(_functional(model)):
        layer = node.operation
        counts[id(layer)] = counts.get(id(layer), 0) + 1
        if isinstance(layer, keras.Model):
            _count_calls(layer, counts, seen)


def walk(model: keras.Model) -> list[keras.layers.Layer]:
    """Every layer of ``model`` and of the models nested in it (each once), not the nested models themselves."""
    found: dict[int, keras.layers.Layer] = {}
    seen: set[int] = set()

    def visit(graph_model: keras.Model) -> None:
        if id(graph_model) in seen:
            return
        seen.add(id(graph_model))
        for node in _nodes(_functional(graph_model)):
            layer = node.operation
            if isinstance(layer, keras.Model):
                visit(layer)
            else:
                found.setdefault(id(layer), layer)

    visit(model)
    return list(found.values())


def _activation_of(layer: keras.layers.Layer) -> Any:
    """The activation function a ReLU-like layer applies (``None`` for other layers)."""
    if type(layer) is keras.layers.ReLU:
        if layer.negative_slope == 0 and layer.threshold == 0 and layer.max_value in (None, 6, 6.0):
            return keras.activations.relu if layer.max_value is None else keras.activations.relu6
        return None
    if type(layer) is keras.layers.Activation:
        return layer.activation
    if type(layer) is keras.layers.Softmax:
        return keras.activations.softmax
    return None


@dataclass
class Rewrite:
    """One rewrite: the scheme, which layers to quantize, the name prefix of quantized layers, whether a layer
    whose input the scheme adapts (:meth:`~ste.qat.Scheme.adapt_input`) is an error (``strict``), the layers left
    float (by path), the adapted layers (one line each), and what the walk has built so far (shared by the nested
    models' graphs)."""

    scheme: Scheme
    select: Callable[[keras.layers.Layer], bool]
    prefix: str = ""
    owner: str = "ste.quantize_model"
    strict: bool = False
    uncovered: list[str] = field(default_factory=list)
    adapted: list[tuple[str, str]] = field(default_factory=list)
    counter: int = 0
    calls: dict[int, int] = field(default_factory=dict)
    copies: dict[int, keras.layers.Layer] = field(default_factory=dict)
    replacements: dict[int, tuple[keras.layers.Layer, Any]] = field(default_factory=dict)
    models: dict[int, tuple[keras.Model, list[bool]]] = field(default_factory=dict)

    def config(self, layer: keras.layers.Layer) -> Any:
        return getattr(layer, ANNOTATION, None)

    def role(self, layer: keras.layers.Layer, path: str | None = None) -> Role | None:
        """The layer's role; a selected layer the scheme does not cover is recorded (under ``path``, if given)."""
        if not self.select(layer):
            return None
        config = self.config(layer)
        if isinstance(config, QuantizeConfig):
            return config.role()
        role = self.scheme.role(layer)
        if role is None and path is not None:
            self.uncovered.append(f"{path} ({type(layer).__name__})")
        return role

    def scheme_for(self, layer: keras.layers.Layer) -> Scheme:
        """The scheme that quantizes the compute layer ``layer``: its config's, if it carries its own quantizers."""
        config = self.config(layer)
        return config.scheme(self.scheme) if isinstance(config, QuantizeConfig) else self.scheme

    def copy(self, layer: keras.layers.Layer) -> keras.layers.Layer:
        """A float copy of ``layer`` (one per layer, so that a shared layer stays shared)."""
        found = self.copies.get(id(layer))
        if found is None:
            found = self.scheme.float_layer(layer, self.owner)
            self.copies[id(layer)] = found
        return found


class _Graph:
    def __init__(self, model: keras.Model, rewrite: Rewrite, input_flags: list[bool], prefix: str) -> None:
        self.source = model
        self.graph = _functional(model)
        self.rewrite = rewrite
        self.prefix = prefix
        self.nodes = _nodes(self.graph)
        self.consumers: dict[int, list[Any]] = {}
        for node in self.nodes:
            for tensor in node.input_tensors:
                self.consumers.setdefault(id(tensor), []).append(node)
        self.outputs = {id(t) for t in self.graph.outputs}
        self.calls = rewrite.calls
        self.inputs = [
            keras.Input(batch_shape=t.shape, dtype=t.dtype, name=t._keras_history[0].name) for t in self.graph.inputs
        ]
        self.tensors: dict[int, tuple[Any, bool]] = {
            id(t): (new, flag) for t, new, flag in zip(self.graph.inputs, self.inputs, input_flags)
        }
        self.groups: dict[int, int] = {}  # tensor → another tensor of its range group (union-find)
        for node in self.nodes:
            if self.rewrite.role(node.operation) == "shared":
                members: list[Any] = [*node.input_tensors, *node.outputs]
                for tensor in members[1:]:
                    a, b = self.root(id(tensor)), self.root(id(members[0]))
                    if a != b:
                        self.groups[a] = b
        self.group_quantizers: dict[int, Any] = {}
        self.done: set[int] = set()
        self.casts: dict[tuple[int, str], Any] = {}

    # -- the graph's structure ------------------------------------------------------------------------

    def sole_consumer(self, tensor: Any) -> Any:
        users = self.consumers.get(id(tensor), [])
        if len(users) != 1 or id(tensor) in self.outputs or self.calls[id(users[0].operation)] != 1:
            return None
        return users[0]

    def root(self, key: int) -> int:
        while key in self.groups:
            key = self.groups[key]
        return key

    # -- building the new graph -----------------------------------------------------------------------

    def next_name(self, base: str, kind: str) -> str:
        self.rewrite.counter += 1
        return f"{base}_{kind}_{self.rewrite.counter}"

    def quantize(self, tensor: Any, new: Any, base: str, after: Any = None) -> Any:
        """``new`` (the new graph's ``tensor``, computed by the activation ``after`` if known) after a new activation
        quantizer, or its range group's."""
        root = self.root(id(tensor))
        if root == id(tensor) and id(tensor) not in self.groups.values():
            return self.apply_quantizer(new, base, after)
        if root not in self.group_quantizers:
            name = self.next_name(base, "quant")
            self.group_quantizers[root] = self.rewrite.scheme.activation_quantizer(name, after)
        quantizer = self.group_quantizers[root]
        return new if quantizer is None else quantizer(new)

    def apply_quantizer(self, new: Any, base: str, after: Any = None) -> Any:
        """``new`` after a new activation quantizer of the scheme (unchanged if the scheme has none)."""
        quantizer = self.rewrite.scheme.activation_quantizer(self.next_name(base, "quant"), after)
        return new if quantizer is None else quantizer(new)

    def quantized(self, tensor: Any, dtype: Any = None) -> Any:
        """The new tensor for ``tensor``, fake-quantized (once per tensor, shared by its consumers). Integer and
        boolean tensors (indices, masks) are not quantized, unless ``dtype`` is given: then an integer tensor is
        cast to that float dtype (once per tensor and dtype), and the cast is quantized."""
        new, flag = self.tensors[id(tensor)]
        if flag:
            return new
        if not keras.backend.is_float_dtype(tensor.dtype):
            if dtype is None or not keras.backend.is_int_dtype(tensor.dtype):
                return new
            key = (id(tensor), str(dtype))
            if key not in self.casts:
                base = tensor._keras_history[0].name
                as_float = keras.layers.Rescaling(1.0, name=self.next_name(base, "cast"), dtype=dtype)(new)
                self.casts[key] = self.apply_quantizer(as_float, base)
            return self.casts[key]
        quantized = self.quantize(tensor, new, tensor._keras_history[0].name)
        self.tensors[id(tensor)] = (quantized, True)
        return quantized

    def arguments(self, node: Any, quantize: bool, cast: Any = None) -> tuple[Any, Any]:
        """The new graph's arguments of ``node``; quantized if ``quantize`` (integer tensors cast to ``cast``
        first, if given)."""
        values = {id(t): self.quantized(t, cast) if quantize else self.tensors[id(t)][0] for t in node.input_tensors}
        return node.arguments.fill_in(values)  # type: ignore[no-any-return]

    def store(self, tensors: list[Any], outputs: Any, flag: bool, quantize: bool, name: str, after: Any = None) -> None:
        for tensor, new in zip(tensors, keras.tree.flatten(outputs)):
            if quantize:
                new, flag = self.quantize(tensor, new, name, after), True
            self.tensors[id(tensor)] = (new, flag)

    def run(self) -> tuple[keras.Model, list[bool]]:
        for node in self.nodes:
            if id(node) in self.done:
                continue
            self.visit(node)
        outputs = [self.tensors[id(t)] for t in self.graph.outputs]
        structure = keras.tree.pack_sequence_as(self.graph._outputs_struct, [new for new, _ in outputs])
        inputs = keras.tree.pack_sequence_as(self.graph._inputs_struct, self.inputs)
        name = self.source.name
        if isinstance(self.source, keras.Sequential):
            model = keras.Sequential([self.inputs[0], *_layers_in_order(inputs, structure)], name=name)
        else:
            model = keras.Model(inputs, structure, name=name)
        return model, [flag for _, flag in outputs]

    def visit(self, node: Any) -> None:
        layer = node.operation
        path = f"{self.prefix}{layer.name}"
        if isinstance(layer, keras.Model):
            self.visit_model(node, path)
            return
        role = self.rewrite.role(layer, path)
        if role == "compute":
            self.visit_compute(node)
            return
        args, kwargs = self.arguments(node, quantize=role in ("output", "shared"))
        copy = self.rewrite.copy(layer)
        outputs = copy(*args, **kwargs)
        if layer.weights and not getattr(copy, "_ste_weights_copied", False):
            copy.set_weights(layer.get_weights())
            copy._ste_weights_copied = True
        flag = role == "passthrough" and all(self.tensors[id(t)][1] for t in node.input_tensors)
        quantize = role in ("output", "shared")
        self.store(node.outputs, outputs, flag, quantize, name=layer.name, after=_activation_of(layer))

    def visit_model(self, node: Any, path: str) -> None:
        """A nested model: rewritten once (as if its inputs were float when it is called more than once), then
        called in its place."""
        layer = node.operation
        built = self.rewrite.models.get(id(layer))
        if built is None:
            if self.calls[id(layer)] > 1:
                flags = [False] * len(_functional(layer).inputs)
            else:
                flags = [self.tensors[id(t)][1] for t in node.input_tensors]
            built = self.rewrite.models[id(layer)] = _Graph(layer, self.rewrite, flags, f"{path}/").run()
        inner, out_flags = built
        args, kwargs = self.arguments(node, quantize=False)
        outputs = inner(*args, **kwargs)
        for tensor, new, flag in zip(node.outputs, keras.tree.flatten(outputs), out_flags):
            self.tensors[id(tensor)] = (new, flag)

    def visit_compute(self, node: Any) -> None:
        layer = node.operation
        scheme = self.rewrite.scheme_for(layer)
        shared = self.calls[id(layer)] > 1
        tail, batch_norm = node, None
        follower = self.sole_consumer(node.outputs[0]) if len(node.outputs) == 1 and not shared else None
        if follower is not None and self.rewrite.select(follower.operation) and scheme.folds(layer, follower.operation):
            tail, batch_norm = follower, follower.operation
            self.done.add(id(follower))
        activation = getattr(layer, "activation", None) or keras.activations.linear  # Embedding, attention: none
        if (activation is keras.activations.linear or batch_norm is not None) and not shared:
            follower = self.sole_consumer(tail.outputs[0])
            fused = _activation_of(follower.operation) if follower is not None else None
            if fused is not None and scheme.fuses_into(layer, fused) and self.rewrite.select(follower.operation):
                tail, activation = follower, fused
                self.done.add(id(follower))
        inside = activation if scheme.fuses_into(layer, activation) else keras.activations.linear
        replacement = self.rewrite.replacements.get(id(layer))
        first = replacement is None
        if replacement is None:
            new = scheme.quantize(layer, batch_norm, inside)
            new.name = f"{self.rewrite.prefix}{layer.name}"
            separate = None
            if inside is not activation:  # e.g. softmax: quantized linear output, the activation, quantized again
                separate = keras.layers.Activation(activation, name=f"{layer.name}_activation")
            replacement = self.rewrite.replacements[id(layer)] = (new, separate)
        new, separate = replacement
        cast = new.compute_dtype if scheme.casts_integers(layer) else None
        args, kwargs = self.arguments(node, quantize=True, cast=cast)
        outputs = new(*args, **kwargs)
        if first:
            scheme.copy_weights(new, layer, batch_norm)
        if separate is not None:
            outputs = separate(self.apply_quantizer(outputs, layer.name))
        decided = scheme.output_quantized(new)
        if decided is None:
            self.store(tail.outputs, outputs, False, quantize=True, name=tail.operation.name, after=activation)
        else:
            self.store(tail.outputs, outputs, decided, quantize=False, name=tail.operation.name)


def _layers_in_order(inputs: Any, outputs: Any) -> list[keras.layers.Layer]:
    graph = keras.Model(inputs, outputs)
    return [layer for layer in graph.layers if not isinstance(layer, keras.layers.InputLayer)]


def rewrite(model: keras.Model, rewrite: Rewrite) -> keras.Model:
    """The quantized copy of ``model`` (see the module docstring); ``rewrite.uncovered`` lists the float layers."""
    graph = _functional(model)
    _count_calls(model, rewrite.calls, set())
    compute = _compute_layers(model, rewrite)
    rewrite.scheme.prepare(compute)
    _adapt_inputs(model, rewrite, compute)
    new, _ = _Graph(model, rewrite, [False] * len(graph.inputs), "").run()
    return new


FIX_INPUTS = (
    'put a BatchNormalization, or a sign-symmetric activation such as ste.activations.hard_tanh ("hard_tanh"), '
    "between the activation and each such layer, as larq's networks do, so that the layer's input takes both signs"
)


def _adapt_inputs(model: keras.Model, rewrite: Rewrite, compute: list[keras.layers.Layer]) -> None:
    """Ask the scheme, for each of its compute layers, whether its input quantizer suits what feeds it; record the
    layers it adapts in ``rewrite.adapted``, or refuse them (``rewrite.strict``) before anything is built."""
    feeds = non_negative_feeds(model, _functional, _nodes)
    for layer in compute:
        _, path, sources = feeds.get(id(layer), (layer, layer.name, []))
        note = rewrite.scheme.adapt_input(layer, InputFeed(bool(sources), tuple(sources)))
        if note is not None:
            after = f" (after {', '.join(sources)})" if sources else ""
            rewrite.adapted.append((f"'{path}'{after}", note))
    if rewrite.strict and rewrite.adapted:
        raise UnsupportedLayerError(
            f"{rewrite.owner}(strict=True): the scheme '{rewrite.scheme.name}' cannot quantize the input of "
            f"{len(rewrite.adapted)} layer(s) as it quantizes the others, because a non-negative activation feeds "
            f"them: {adapted_layers(rewrite)}. Fix: {FIX_INPUTS}; or pass strict=False to accept this with a "
            f"warning."
        )


def adapted_layers(rewrite: Rewrite) -> str:
    """The layers in ``rewrite.adapted``, grouped by what the scheme does to them."""
    notes: dict[str, list[str]] = {}
    for label, note in rewrite.adapted:
        notes.setdefault(note, []).append(label)
    return "; ".join(f"{', '.join(labels)}: {note}" for note, labels in notes.items())


def _compute_layers(model: keras.Model, rewrite: Rewrite) -> list[keras.layers.Layer]:
    """The layers of ``model`` (nested models included) that the rewrite's own scheme quantizes as compute layers,
    in the order they compute."""
    graph = _functional(model)
    found: list[keras.layers.Layer] = []
    for node in _nodes(graph):
        layer = node.operation
        if isinstance(layer, keras.Model):
            found.extend(inner for inner in _compute_layers(layer, rewrite) if inner not in found)
        elif rewrite.role(layer) == "compute" and rewrite.scheme_for(layer) is rewrite.scheme and layer not in found:
            found.append(layer)
    return found
