"""The graph rewrite behind :func:`ste.quantize_model` and :func:`ste.quantize_apply`.

A functional model is walked node by node in its own order (a Sequential model through its functional graph; a
nested model is rewritten recursively and called in its place). Each tensor of the new graph carries one flag:
whether it is fake-quantized. A layer whose role (see :mod:`ste.qat._scheme`) needs quantized inputs gets them,
one activation quantizer per unquantized tensor, shared by all its consumers; a quantizing layer's output gets its
own quantizer. The inputs and the output of a Concatenate form one range group: one quantizer layer (one min/max
pair) quantizes all of them, as TFLite's CONCATENATION needs one scale, so that the converter adds no requantize op.
Layers that are not covered stay float: fresh copies with the trained weights.

Fusions, only where the intermediate tensors have no other consumer and each layer is called once: a covered
convolution + BatchNormalization becomes one folded layer; a compute layer's ReLU/ReLU6 (its ``activation``, or a
following ``ReLU``/``Activation`` layer) runs before its output quantizer. An activation the scheme does not fuse
(softmax, sigmoid) runs as its own layer between two quantizers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras

from .._errors import NotBuiltError
from .._keras_versions import complete_config
from ._scheme import QuantizeConfig, Role, Scheme

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
    """One rewrite: the scheme, which layers to quantize, and the layers left float (by path)."""

    scheme: Scheme
    select: Callable[[keras.layers.Layer], bool]
    uncovered: list[str] = field(default_factory=list)
    counter: int = 0

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


class _Graph:
    def __init__(self, model: keras.Model, rewrite: Rewrite, input_flags: list[bool], prefix: str) -> None:
        self.source = model
        self.graph = _functional(model)
        self.rewrite = rewrite
        self.prefix = prefix
        self.nodes = [
            node
            for depth in sorted(self.graph._nodes_by_depth, reverse=True)
            for node in self.graph._nodes_by_depth[depth]
            if node.operation is not None and not node.is_input
        ]
        self.consumers: dict[int, list[Any]] = {}
        for node in self.nodes:
            for tensor in node.input_tensors:
                self.consumers.setdefault(id(tensor), []).append(node)
        self.outputs = {id(t) for t in self.graph.outputs}
        self.calls: dict[int, int] = {}
        for node in self.nodes:
            self.calls[id(node.operation)] = self.calls.get(id(node.operation), 0) + 1
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
        self.copies: dict[int, keras.layers.Layer] = {}

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

    def quantizer_name(self, base: str) -> str:
        self.rewrite.counter += 1
        return f"{base}_quant_{self.rewrite.counter}"

    def quantize(self, tensor: Any, new: Any, base: str, after: Any = None) -> Any:
        """``new`` (the new graph's ``tensor``, computed by the activation ``after`` if known) after a new activation
        quantizer, or its range group's."""
        root = self.root(id(tensor))
        if root == id(tensor) and id(tensor) not in self.groups.values():
            return self.apply_quantizer(new, base, after)
        if root not in self.group_quantizers:
            self.group_quantizers[root] = self.rewrite.scheme.activation_quantizer(self.quantizer_name(base), after)
        quantizer = self.group_quantizers[root]
        return new if quantizer is None else quantizer(new)

    def apply_quantizer(self, new: Any, base: str, after: Any = None) -> Any:
        """``new`` after a new activation quantizer of the scheme (unchanged if the scheme has none)."""
        quantizer = self.rewrite.scheme.activation_quantizer(self.quantizer_name(base), after)
        return new if quantizer is None else quantizer(new)

    def quantized(self, tensor: Any) -> Any:
        """The new tensor for ``tensor``, fake-quantized (once per tensor, shared by its consumers); integer and
        boolean tensors (indices, masks) are not quantized."""
        new, flag = self.tensors[id(tensor)]
        if flag or not keras.backend.is_float_dtype(tensor.dtype):
            return new
        quantized = self.quantize(tensor, new, tensor._keras_history[0].name)
        self.tensors[id(tensor)] = (quantized, True)
        return quantized

    def arguments(self, node: Any, quantize: bool) -> tuple[Any, Any]:
        values = {id(t): self.quantized(t) if quantize else self.tensors[id(t)][0] for t in node.input_tensors}
        return node.arguments.fill_in(values)  # type: ignore[no-any-return]

    def store(self, tensors: list[Any], outputs: Any, flag: bool, quantize: bool, name: str, after: Any = None) -> None:
        for tensor, new in zip(tensors, keras.tree.flatten(outputs)):
            if quantize:
                new, flag = self.quantize(tensor, new, name, after), True
            self.tensors[id(tensor)] = (new, flag)

    def copy(self, layer: keras.layers.Layer) -> keras.layers.Layer:
        """A float copy of ``layer`` (one per layer, so that a shared layer stays shared)."""
        found = self.copies.get(id(layer))
        if found is None:
            found = type(layer).from_config(complete_config(layer, layer.get_config()))
            self.copies[id(layer)] = found
        return found

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
            flags = [self.tensors[id(t)][1] for t in node.input_tensors]
            inner, out_flags = _Graph(layer, self.rewrite, flags, f"{path}/").run()
            args, kwargs = self.arguments(node, quantize=False)
            outputs = inner(*args, **kwargs)
            for tensor, new, flag in zip(node.outputs, keras.tree.flatten(outputs), out_flags):
                self.tensors[id(tensor)] = (new, flag)
            return
        role = self.rewrite.role(layer, path)
        if role == "compute" and self.calls[id(layer)] == 1:
            self.visit_compute(node)
            return
        if role == "compute":  # a shared weighted layer: quantized in place of a fusion
            self.rewrite.uncovered.append(f"{path} ({type(layer).__name__}, called {self.calls[id(layer)]} times)")
            role = None
        args, kwargs = self.arguments(node, quantize=role in ("output", "shared"))
        outputs = self.copy(layer)(*args, **kwargs)
        self.copy_float_weights(layer)
        flag = role == "passthrough" and all(self.tensors[id(t)][1] for t in node.input_tensors)
        quantize = role in ("output", "shared")
        self.store(node.outputs, outputs, flag, quantize, name=layer.name, after=_activation_of(layer))

    def copy_float_weights(self, layer: keras.layers.Layer) -> None:
        copy = self.copies[id(layer)]
        if layer.weights and not getattr(copy, "_ste_weights_copied", False):
            copy.set_weights(layer.get_weights())
            copy._ste_weights_copied = True

    def visit_compute(self, node: Any) -> None:
        scheme = self.rewrite.scheme
        layer = node.operation
        tail, batch_norm = node, None
        follower = self.sole_consumer(node.outputs[0]) if len(node.outputs) == 1 else None
        if follower is not None and self.rewrite.select(follower.operation) and scheme.folds(layer, follower.operation):
            tail, batch_norm = follower, follower.operation
            self.done.add(id(follower))
        activation = getattr(layer, "activation", None) or keras.activations.linear  # Embedding, attention: none
        if activation is keras.activations.linear or batch_norm is not None:
            follower = self.sole_consumer(tail.outputs[0])
            fused = _activation_of(follower.operation) if follower is not None else None
            if fused is not None and scheme.fuses_into(layer, fused) and self.rewrite.select(follower.operation):
                tail, activation = follower, fused
                self.done.add(id(follower))
        inside = activation if scheme.fuses_into(layer, activation) else keras.activations.linear
        new = scheme.quantize(layer, batch_norm, inside)
        args, kwargs = self.arguments(node, quantize=True)
        outputs = new(*args, **kwargs)
        scheme.copy_weights(new, layer, batch_norm)
        if inside is not activation:  # e.g. softmax: quantized linear output, the activation, quantized again
            outputs = self.apply_quantizer(outputs, layer.name)
            outputs = keras.layers.Activation(activation, name=f"{layer.name}_activation")(outputs)
        self.store(tail.outputs, outputs, False, quantize=True, name=tail.operation.name, after=activation)


def _layers_in_order(inputs: Any, outputs: Any) -> list[keras.layers.Layer]:
    graph = keras.Model(inputs, outputs)
    return [layer for layer in graph.layers if not isinstance(layer, keras.layers.InputLayer)]


def rewrite(model: keras.Model, rewrite: Rewrite) -> keras.Model:
    """The quantized copy of ``model`` (see the module docstring); ``rewrite.uncovered`` lists the float layers."""
    graph = _functional(model)
    rewrite.scheme.prepare(_compute_layers(model, rewrite))
    new, _ = _Graph(model, rewrite, [False] * len(graph.inputs), "").run()
    return new


def _compute_layers(model: keras.Model, rewrite: Rewrite) -> list[keras.layers.Layer]:
    """The layers of ``model`` (nested models included) that get the role ``"compute"``, in the order they compute."""
    graph = _functional(model)
    found: list[keras.layers.Layer] = []
    for depth in sorted(graph._nodes_by_depth, reverse=True):
        for node in graph._nodes_by_depth[depth]:
            layer = node.operation
            if isinstance(layer, keras.Model):
                found.extend(inner for inner in _compute_layers(layer, rewrite) if inner not in found)
            elif layer is not None and rewrite.role(layer) == "compute" and layer not in found:
                found.append(layer)
    return found
