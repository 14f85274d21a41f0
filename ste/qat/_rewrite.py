"""What QAT does to a model, on the model rewriter (:mod:`ste._keras._rewrite`): the scheme's rules for a functional
graph the rewriter rebuilds, and its replacement for a compute layer found anywhere else.

**In a graph** (a Sequential or functional model, and the graph models nested in it), walked node by node in its own
order, each tensor of the new graph carries one flag: whether it is fake-quantized. A layer whose role (see
:mod:`ste.qat._scheme`) needs quantized inputs gets them, one activation quantizer per unquantized tensor, shared by
all its consumers; a quantizing layer's output gets its own quantizer. The inputs and the output of a Concatenate form
one range group: one quantizer layer (one min/max pair) quantizes all of them, as TFLite's CONCATENATION needs one
scale, so that the converter adds no requantize op. Layers that are not covered stay float: fresh copies with the
trained weights; operation nodes (``x + y``, ``x[:, 0]``) are called again as they are, on float tensors. An integer
tensor that a quantized layer computes with (the scheme's :meth:`~ste.qat.Scheme.casts_integers`: all but Embedding,
whose integers are indices) is cast to that layer's float dtype first, as the float layer's own arithmetic promotes
it, then quantized.

Sharing is kept: a layer or a nested model that the float model calls more than once becomes one layer (one
model) of the new graph, called as often, so that its calls share their variables. A shared compute layer is
quantized without fusions (each call's output gets its own quantizer); a shared nested model is rewritten once, as
if its inputs were float (it quantizes them itself where its layers need it). A compute layer that the graph calls
while a layer outside it holds it too (a tied language-model head, ``backbone.token_embedding(backbone(x),
reverse=True)``) is the one quantized layer of that holder, quantizing its own input as there.

Fusions, only where the intermediate tensors have no other consumer and each layer is called once: a covered
convolution + BatchNormalization becomes one folded layer; a compute layer's ReLU/ReLU6 (its ``activation``, or a
following ``ReLU``/``Activation`` layer) runs before its output quantizer. An activation the scheme does not fuse
(softmax, sigmoid) runs as its own layer between two quantizers. The fusions are decided before anything is built
(a folded batch norm or a fused activation layer is covered by its compute layer).

**Anywhere else** (a compute layer inside a composite layer such as a transformer block, or in a model the rewriter
copies and changes in place, such as a KerasHub backbone), no graph edge can hold a quantizer: the compute layer
becomes the scheme's quantized layer with its input quantized inside it (its ``input_quantizer``), its activation
fused where the scheme fuses it.

Names: the layer that replaces a compute layer (folded or not) is named ``prefix + name`` of that layer (the batch
norm and activation folded or fused into it have no layer of their own); an activation run as its own layer is
``<layer>_activation``; an activation quantizer is ``<producer>_quant_<k>``, k counting quantizers from 1 in the
order the rewrite visits tensors (the same for the same model); a cast of an integer tensor is ``<producer>_cast_<k>``.
Every other layer keeps its name. With TFMOT's prefix ``"quant_"``, the quantizer of a model input is TFMOT's
``quantize_layer`` (``quantize_layer_1``, ... for more inputs).
"""

from __future__ import annotations

from typing import Any

import keras

from .._keras._rewrite import (
    GraphRebuild,
    LayerRewrite,
    Rewriter,
    copy_layer,
    graph_nodes,
    graph_of,
    is_graph_model,
    is_weight,
)
from ..errors import NotBuiltError, UnsupportedLayerError
from ._config import QuantizeConfig
from ._outside import quantize_outside
from ._scheme import InputFeed, Role, Scheme
from ._signs import non_negative_feeds

__all__ = ["ANNOTATION", "FIX_INPUTS", "Quantize", "QuantizedGraph", "adapted_layers", "quantize"]

ANNOTATION = "_ste_qat_annotation"
TFMOT_PREFIX = "quant_"  # TFMOT's default quantized_layer_name_prefix


def _activation_of(layer: Any) -> Any:
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


class Quantize(LayerRewrite):
    """QAT with one scheme (see the module docstring): its name prefix for quantized layers, whether a layer whose
    input the scheme adapts (:meth:`~ste.qat.Scheme.adapt_input`) is an error (``strict``), the adapted layers (one
    line each), and what the rewrite has built so far (shared by the nested models' graphs)."""

    def __init__(self, scheme: Scheme, prefix: str = "", owner: str = "ste.quantize_model", strict: bool = False):
        self.scheme = scheme
        self.prefix = prefix
        self.owner = owner
        self.strict = strict
        self.adapted: list[tuple[str, str]] = []
        self.counter = 0
        self.input_quantizers = 0
        self.absorbed: set[int] = set()  # layers folded or fused into a compute layer of a graph
        self.replacements: dict[int, tuple[keras.layers.Layer, Any]] = {}
        self.models: dict[int, tuple[keras.Model, list[bool]]] = {}

    def config(self, layer: Any) -> Any:
        return getattr(layer, ANNOTATION, None)

    def role(self, layer: Any) -> Role | None:
        """The layer's role: its annotation's, else the scheme's (operation nodes: none)."""
        if not isinstance(layer, keras.layers.Layer):
            return None
        config = self.config(layer)
        if isinstance(config, QuantizeConfig):
            return config.role()
        return self.scheme.role(layer)

    def scheme_for(self, layer: keras.layers.Layer) -> Scheme:
        """The scheme that quantizes the compute layer ``layer``: its config's, if it carries its own quantizers."""
        config = self.config(layer)
        return config.scheme(self.scheme) if isinstance(config, QuantizeConfig) else self.scheme

    # -- LayerRewrite -------------------------------------------------------------------------------------------

    def claims(self, layer: keras.layers.Layer) -> bool:
        return self.role(layer) == "compute"

    def computes_with(self, layer: keras.layers.Layer) -> list[Any]:
        config = self.config(layer)
        if isinstance(config, QuantizeConfig) and config.carries_quantizers:
            # a config that carries its own quantizers decides in the wrapper, which checks what it returns (and
            # warns if it quantizes no weight): its layer counts as covered
            return [variable for variable in layer.weights if is_weight(variable)]
        return self.scheme_for(layer).computed_weights(layer)

    def check(self, layer: keras.layers.Layer, path: str) -> None:
        self.scheme_for(layer).check(layer, path, self.owner)

    def covers(self, layer: keras.layers.Layer, in_graph: bool) -> bool:
        config = self.config(layer)
        if isinstance(config, QuantizeConfig) and config.float:  # kept float on purpose: no warning
            return True
        if in_graph:  # a float layer in a graph leaves a float op between int8 ones
            return self.role(layer) is not None or id(layer) in self.absorbed
        return super().covers(layer, in_graph)

    def replace(self, layer: keras.layers.Layer, original: keras.layers.Layer) -> keras.layers.Layer:
        """A compute layer outside a rebuilt graph: the scheme's quantized layer, quantizing its own input."""
        scheme = self.scheme_for(original)
        activation = getattr(original, "activation", None) or keras.activations.linear
        inside = activation if scheme.fuses_into(original, activation) else keras.activations.linear
        if inside is not activation:  # no graph edge for a separate activation: it runs inside, after the kernel
            inside = activation
        new = scheme.quantize(layer if scheme.quantizes_in_place(original) else original, None, inside)
        new.name = f"{self.prefix}{original.name}"
        if original.built:
            config = original.get_build_config()
            if config and not new.built:
                new.build_from_config(config)
            scheme.copy_weights(new, original, None)
            quantize_outside(new, scheme)  # no graph edge holds a quantizer: it quantizes its inputs and output
        return new

    def study(self, rewriter: Rewriter, model: keras.Model) -> None:
        if isinstance(model, keras.Sequential) and graph_of(model) is None:
            raise NotBuiltError(
                f"{self.owner}: the Sequential model '{model.name}' is not built, so it has no graph to quantize. "
                f"Fix: give it an input, keras.Sequential([keras.Input(shape), ...]), or call "
                f"model.build(input_shape) first."
            )
        if is_graph_model(model):
            QuantizedGraph(rewriter, model).absorb()

    def planned(self, rewriter: Rewriter, model: keras.Model) -> None:
        compute = [layer for layer in rewriter.plan.claimed.values() if self.scheme_for(layer) is self.scheme]
        self.scheme.prepare(compute)
        _adapt_inputs(model, self, compute)

    def float_fix(self) -> str:
        return (
            "annotate each such layer before quantizing, ste.qat.quantize_annotate_layer(layer, "
            "config=ste.qat.QuantizeConfig(quantize_output=True)) to quantize around it, or "
            "config=ste.qat.QuantizeConfig(float=True) to keep it float"
        )

    def unchanged(self) -> str:
        return "float"


# -- the graph rules --------------------------------------------------------------------------------------------


class QuantizedGraph(GraphRebuild):
    """One functional graph rebuilt with the scheme's rules (see the module docstring)."""

    def __init__(
        self, rewriter: Rewriter, model: keras.Model, input_flags: list[bool] | None = None, prefix: str = ""
    ) -> None:
        super().__init__(rewriter, model)
        self.q: Quantize = rewriter.transform  # type: ignore[assignment]
        self.prefix = prefix
        flags = input_flags if input_flags is not None else [False] * len(self.inputs)
        self.flags: dict[int, bool] = {id(t): flag for t, flag in zip(self.graph.inputs, flags)}
        self.consumers: dict[int, list[Any]] = {}
        for node in self.nodes:
            for tensor in node.input_tensors:
                self.consumers.setdefault(id(tensor), []).append(node)
        self.graph_outputs = {id(t) for t in self.graph.outputs}
        self.groups: dict[int, int] = {}  # tensor → another tensor of its range group (union-find)
        for node in self.nodes:
            if self.role(node.operation) == "shared":
                members: list[Any] = [*node.input_tensors, *node.outputs]
                for tensor in members[1:]:
                    a, b = self.root(id(tensor)), self.root(id(members[0]))
                    if a != b:
                        self.groups[a] = b
        self.group_quantizers: dict[int, Any] = {}
        self.casts: dict[tuple[int, str], Any] = {}

    # -- the graph's structure ------------------------------------------------------------------------------

    def role(self, layer: Any) -> Role | None:
        """The role of a selected layer (``None``: it stays float, as do operation nodes)."""
        if not isinstance(layer, keras.layers.Layer) or not self.rewriter.select(layer):
            return None
        return self.q.role(layer)

    def sole_consumer(self, tensor: Any) -> Any:
        users = self.consumers.get(id(tensor), [])
        if len(users) != 1 or id(tensor) in self.graph_outputs or self.rewriter.calls[id(users[0].operation)] != 1:
            return None
        return users[0]

    def fusion(self, node: Any) -> tuple[Any, Any, Any]:
        """What a compute node takes in: (the node whose outputs it produces, the batch norm folded into it or
        None, its activation)."""
        layer = node.operation
        scheme = self.q.scheme_for(layer)
        shared = self.rewriter.calls[id(layer)] > 1 or self.rewriter.shares(layer)
        tail, batch_norm = node, None
        follower = self.sole_consumer(node.outputs[0]) if len(node.outputs) == 1 and not shared else None
        if (
            follower is not None
            and isinstance(follower.operation, keras.layers.Layer)
            and self.rewriter.select(follower.operation)
            and scheme.folds(layer, follower.operation)
        ):
            tail, batch_norm = follower, follower.operation
        activation = getattr(layer, "activation", None) or keras.activations.linear  # Embedding, attention: none
        if (activation is keras.activations.linear or batch_norm is not None) and not shared:
            follower = self.sole_consumer(tail.outputs[0])
            fused = _activation_of(follower.operation) if follower is not None else None
            if fused is not None and scheme.fuses_into(layer, fused) and self.rewriter.select(follower.operation):
                tail, activation = follower, fused
        return tail, batch_norm, activation

    def absorb(self) -> None:
        """Mark the layers folded or fused into compute layers, in this graph and the graph models nested in it
        (planning: nothing is built)."""
        for node in self.nodes:
            operation = node.operation
            if isinstance(operation, keras.Model) and is_graph_model(operation):
                type(self)(self.rewriter, operation).absorb()
            elif self.role(operation) == "compute":
                tail, _, _ = self.fusion(node)
                if tail is not node:
                    self.q.absorbed.add(id(tail.operation))
                    follower = self.sole_consumer(node.outputs[0])
                    if follower is not None and follower is not tail:
                        self.q.absorbed.add(id(follower.operation))

    def root(self, key: int) -> int:
        while key in self.groups:
            key = self.groups[key]
        return key

    # -- building the new graph -----------------------------------------------------------------------------

    def next_name(self, base: str, kind: str) -> str:
        self.q.counter += 1
        return f"{base}_{kind}_{self.q.counter}"

    def producer(self, tensor: Any) -> str:
        return str(tensor._keras_history[0].name)

    def input_quantizer_name(self, tensor: Any) -> str | None:
        """TFMOT's name for the quantizer of a model input, ``quantize_layer`` (then ``quantize_layer_1``, ...), where
        the prefix is TFMOT's (``"quant_"``): code written for TFMOT looks it up by that name."""
        if self.q.prefix != TFMOT_PREFIX or self.prefix or not any(tensor is t for t in self.graph.inputs):
            return None
        count = self.q.input_quantizers
        self.q.input_quantizers += 1
        return "quantize_layer" if count == 0 else f"quantize_layer_{count}"

    def quantize(self, tensor: Any, new: Any, base: str, after: Any = None) -> Any:
        """``new`` (the new graph's ``tensor``, computed by the activation ``after`` if known) after a new activation
        quantizer, or its range group's."""
        root = self.root(id(tensor))
        if root == id(tensor) and id(tensor) not in self.groups.values():
            name = self.input_quantizer_name(tensor)
            if name is not None:
                quantizer = self.q.scheme.activation_quantizer(name, after)
                return new if quantizer is None else quantizer(new)
            return self.apply_quantizer(new, base, after)
        if root not in self.group_quantizers:
            name = self.next_name(base, "quant")
            self.group_quantizers[root] = self.q.scheme.activation_quantizer(name, after)
        quantizer = self.group_quantizers[root]
        return new if quantizer is None else quantizer(new)

    def apply_quantizer(self, new: Any, base: str, after: Any = None) -> Any:
        """``new`` after a new activation quantizer of the scheme (unchanged if the scheme has none)."""
        quantizer = self.q.scheme.activation_quantizer(self.next_name(base, "quant"), after)
        return new if quantizer is None else quantizer(new)

    def quantized(self, tensor: Any, dtype: Any = None) -> Any:
        """The new tensor for ``tensor``, fake-quantized (once per tensor, shared by its consumers). Integer and
        boolean tensors (indices, masks) are not quantized, unless ``dtype`` is given: then an integer tensor is
        cast to that float dtype (once per tensor and dtype), and the cast is quantized."""
        new = self.tensors[id(tensor)]
        if self.flags.get(id(tensor), False):
            return new
        if not keras.backend.is_float_dtype(tensor.dtype):
            if dtype is None or not keras.backend.is_int_dtype(tensor.dtype):
                return new
            key = (id(tensor), str(dtype))
            if key not in self.casts:
                base = self.producer(tensor)
                as_float = keras.layers.Rescaling(1.0, name=self.next_name(base, "cast"), dtype=dtype)(new)
                self.casts[key] = self.apply_quantizer(as_float, base)
            return self.casts[key]
        quantized = self.quantize(tensor, new, self.producer(tensor))
        self.tensors[id(tensor)], self.flags[id(tensor)] = quantized, True
        return quantized

    def put(self, tensors: list[Any], outputs: Any, flag: bool, quantize: bool, name: str, after: Any = None) -> None:
        for tensor, new in zip(tensors, keras.tree.flatten(outputs)):
            if quantize:
                new, flag = self.quantize(tensor, new, name, after), True
            self.tensors[id(tensor)], self.flags[id(tensor)] = new, flag

    def outputs_with_flags(self) -> tuple[keras.Model, list[bool]]:
        return self.run(), [self.flags.get(id(t), False) for t in self.graph.outputs]

    def visit(self, node: Any) -> None:
        operation = node.operation
        if isinstance(operation, keras.Model) and is_graph_model(operation):
            self.visit_model(node)
            return
        role = self.role(operation)
        if role == "compute":
            self.visit_compute(node)
            return
        quantize = role in ("output", "shared")
        args, kwargs = self.arguments(node, self.quantized if quantize else None)
        if not isinstance(operation, keras.layers.Layer):
            new: Any = operation  # an operation node: called again as it is
        elif self.rewriter.holds_claimed(operation) or self.rewriter.shares(operation):
            new = self.rewriter.layer(operation)  # a composite layer: its compute layers quantized inside
        else:
            new = self.copy(operation)
        outputs = new(*args, **kwargs)
        flag = role == "passthrough" and all(self.flags.get(id(t), False) for t in node.input_tensors)
        self.put(node.outputs, outputs, flag, quantize, name=operation.name, after=_activation_of(operation))

    def copy(self, layer: keras.layers.Layer) -> keras.layers.Layer:
        """A float copy of ``layer`` with its weights (one per layer, so that a shared layer stays shared)."""
        found = self.rewriter.copies.get(id(layer))
        if found is None:
            found = self.q.scheme.float_layer(layer, self.q.owner)
            if layer.built:
                config = layer.get_build_config()
                if config:
                    found.build_from_config(config)
                if layer.weights:
                    found.set_weights(layer.get_weights())
            self.rewriter.copies[id(layer)] = found
        return found

    def visit_model(self, node: Any) -> None:
        """A nested graph model: rewritten once (as if its inputs were float when it is called more than once),
        then called in its place."""
        layer = node.operation
        built = self.q.models.get(id(layer))
        if built is None:
            if self.rewriter.calls[id(layer)] > 1:
                flags = [False] * len(graph_of(layer).inputs)
            else:
                flags = [self.flags.get(id(t), False) for t in node.input_tensors]
            inner = type(self)(self.rewriter, layer, flags, f"{self.prefix}{layer.name}/")
            built = self.q.models[id(layer)] = inner.outputs_with_flags()
        model, out_flags = built
        args, kwargs = self.arguments(node)
        outputs = model(*args, **kwargs)
        for tensor, new, flag in zip(node.outputs, keras.tree.flatten(outputs), out_flags):
            self.tensors[id(tensor)], self.flags[id(tensor)] = new, flag

    def visit_compute(self, node: Any) -> None:
        layer = node.operation
        if self.rewriter.shares(layer):  # also held by a layer outside the graph: one layer, quantizing its input
            args, kwargs = self.arguments(node)
            self.put(node.outputs, self.rewriter.layer(layer)(*args, **kwargs), False, False, name=layer.name)
            return
        scheme = self.q.scheme_for(layer)
        tail, batch_norm, activation = self.fusion(node)
        self.done.update(id(n) for n in self._absorbed_nodes(node, tail))
        inside = activation if scheme.fuses_into(layer, activation) else keras.activations.linear
        replacement = self.q.replacements.get(id(layer))
        first = replacement is None
        if replacement is None:
            source = copy_layer(layer, self.q.owner) if scheme.quantizes_in_place(layer) else layer
            new = scheme.quantize(source, batch_norm, inside)
            new.name = f"{self.q.prefix}{layer.name}"
            separate = None
            if inside is not activation:  # e.g. softmax: quantized linear output, the activation, quantized again
                separate = keras.layers.Activation(activation, name=f"{layer.name}_activation")
            replacement = self.q.replacements[id(layer)] = (new, separate)
        new, separate = replacement
        cast = new.compute_dtype if scheme.casts_integers(layer) else None
        args, kwargs = self.arguments(node, lambda tensor: self.quantized(tensor, cast))
        outputs = new(*args, **kwargs)
        if first:
            scheme.copy_weights(new, layer, batch_norm)
        if separate is not None:
            outputs = separate(self.apply_quantizer(outputs, layer.name))
        decided = scheme.output_quantized(new)
        if decided is None:
            self.put(tail.outputs, outputs, False, quantize=True, name=tail.operation.name, after=activation)
        else:
            self.put(tail.outputs, outputs, decided, quantize=False, name=tail.operation.name)

    def _absorbed_nodes(self, node: Any, tail: Any) -> list[Any]:
        """The nodes between ``node`` and ``tail`` (its folded batch norm, its fused activation), ``tail`` included."""
        found = []
        current = node
        while current is not tail:
            current = self.sole_consumer(current.outputs[0])
            found.append(current)
        return found

    def outputs(self) -> Any:
        return [self.tensors[id(t)] for t in self.graph.outputs]


# -- the whole rewrite ------------------------------------------------------------------------------------------

FIX_INPUTS = (
    'put a BatchNormalization, or a sign-symmetric activation such as ste.activations.hard_tanh ("hard_tanh"), '
    "between the activation and each such layer, as larq's networks do, so that the layer's input takes both signs"
)


def quantize(model: keras.Model, job: Quantize, select: Any, strict: bool) -> keras.Model:
    """The quantized copy of ``model`` (see the module docstring), planned before anything is built (compute layers,
    fusions, the layers not covered, the inputs the scheme adapts); one warning for what stays float, or an error
    under ``strict=True``."""
    rewriter = Rewriter(job, select, strict, graph_class=QuantizedGraph)
    new = rewriter.run(model)
    rewriter.warn(stacklevel=3)
    return new


def _adapt_inputs(model: keras.Model, job: Quantize, compute: list[keras.layers.Layer]) -> None:
    """Ask the scheme, for each of its compute layers, whether its input quantizer suits what feeds it; record the
    layers it adapts in ``job.adapted``, or refuse them (``job.strict``) before anything is built."""
    feeds = non_negative_feeds(model, graph_of, graph_nodes) if graph_of(model) is not None else {}
    for layer in compute:
        _, path, sources = feeds.get(id(layer), (layer, layer.name, []))
        note = job.scheme.adapt_input(layer, InputFeed(bool(sources), tuple(sources)))
        if note is not None:
            after = f" (after {', '.join(sources)})" if sources else ""
            job.adapted.append((f"'{path}'{after}", note))
    if job.strict and job.adapted:
        raise UnsupportedLayerError(
            f"{job.owner}(strict=True): the scheme '{job.scheme.name}' cannot quantize the input of "
            f"{len(job.adapted)} layer(s) as it quantizes the others, because a non-negative activation feeds "
            f"them: {adapted_layers(job)}. Fix: {FIX_INPUTS}; or pass strict=False to accept this with a "
            f"warning."
        )


def adapted_layers(job: Quantize) -> str:
    """The layers in ``job.adapted``, grouped by what the scheme does to them."""
    notes: dict[str, list[str]] = {}
    for label, note in job.adapted:
        notes.setdefault(note, []).append(label)
    return "; ".join(f"{', '.join(labels)}: {note}" for note, labels in notes.items())
