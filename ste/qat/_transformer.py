"""The transformer layers of the int8 scheme: :class:`QuantEinsumDense`, :class:`QuantEmbedding`,
:class:`QuantReversibleEmbedding`, :class:`QuantMultiHeadAttention` (TFMOT never covered them: its issues #638, #942).

* :class:`QuantEinsumDense` is ``keras.layers.EinsumDense`` on the quantized input and the quantized kernel, as
  ``ste.layers.QuantDense`` is for Dense; an equation that is a dense product (:func:`einsum_layout`) is one 2-D
  matmul (one FULLY_CONNECTED in TFLite), and its kernel quantizer sees the kernel with its output axes last, so
  that it can quantize per output channel.
* :class:`QuantEmbedding` is ``keras.layers.Embedding`` looking its (integer) inputs up in the quantized table;
  :class:`QuantReversibleEmbedding` is ``keras.layers.ReversibleEmbedding``, whose reverse projection (tied or not)
  uses the quantized tables too.
* :class:`QuantMultiHeadAttention` is ``keras.layers.MultiHeadAttention`` whose query, key, value (and gate) and
  output projections are :class:`QuantEinsumDense` layers with quantized kernels (per output channel when its
  kernel quantizer is per channel), and whose activations inside are fake-quantized where TFLite's int8 kernels
  need a range (:func:`ste.qat._attention.explicit_attention`): the projected query (before and after its scaling
  by 1/√key_dim), key and value, the attention scores, the attention probabilities (TFLite's fixed softmax range
  [0, 255/256]) and the attention output before the output projection. Its inputs and its output are quantized by
  the graph rewrite, as every covered layer's. Without quantizers it computes what Keras's layer computes (the
  explicit-scores path of ``_compute_attention``, never the fused ``dot_product_attention``, so that the scores
  can be quantized).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

import keras

from .. import quantizers as ste_quantizers
from .._keras._matmul import flat_matmul, unflatten
from .._keras._signatures import forwarding_signature
from .._patches import apply as apply_patches
from ..layers import KernelSlot, QuantLayerMixin
from ..quantizers._sharing import claim
from ._attention import INNER, explicit_attention

__all__ = [
    "EinsumLayout",
    "QuantEinsumDense",
    "QuantEmbedding",
    "QuantMultiHeadAttention",
    "QuantReversibleEmbedding",
    "einsum_layout",
    "output_channel_axes",
]


@dataclass(frozen=True)
class EinsumLayout:
    """How an EinsumDense equation is one dense product: the input's last ``contracted`` axes times the kernel's
    contracted axes, the kernel's other axes (``out_axes`` of them) its output channels. ``kernel_order`` puts the
    kernel's axes in that order (contracted axes first, in the input's order, then output axes, in the output's
    order); ``None`` when they are already so."""

    contracted: int
    out_axes: int
    kernel_order: tuple[int, ...] | None


def einsum_layout(equation: str, bias_axes: str | None) -> EinsumLayout | None:
    """The :class:`EinsumLayout` of ``equation`` when it is a dense product ``<free><contracted>,<kernel>-><free>
    <out>`` (the kernel's axes: the contracted ones and the output ones, in any order) with a bias over all
    ``<out>`` axes or none; ``None`` for any other equation (a batch axis shared by input, kernel and output,
    an ellipsis, a sum over an axis of one operand only)."""
    match = re.fullmatch(r"([a-z]+),([a-z]+)->([a-z]+)", equation.replace(" ", ""))
    if match is None:
        return None
    x, kernel, out = match.groups()
    if any(len(set(axes)) != len(axes) for axes in (x, kernel, out)):
        return None
    inner = "".join(axis for axis in x if axis in kernel)
    free = x[: len(x) - len(inner)]
    tail = out[len(free) :]
    if not inner or not tail or x != free + inner or not out.startswith(free) or set(kernel) != set(inner + tail):
        return None
    if set(inner) & set(out) or set(free) & set(kernel):
        return None
    if bias_axes is not None and bias_axes != tail:
        return None
    order = tuple(kernel.index(axis) for axis in inner + tail)
    return EinsumLayout(len(inner), len(tail), None if order == tuple(range(len(kernel))) else order)


def output_channel_axes(layer: keras.layers.Layer) -> int:
    """The number of trailing kernel axes (in :class:`EinsumLayout` order) that index ``layer``'s output channels:
    1 for Dense, the output axes of an EinsumDense that is a dense product, 0 (per tensor) for any other
    equation."""
    if isinstance(layer, keras.layers.EinsumDense):
        layout = einsum_layout(layer.equation, layer.bias_axes)
        return 0 if layout is None else layout.out_axes
    return 1


@keras.saving.register_keras_serializable(package="ste")
class QuantEinsumDense(QuantLayerMixin, keras.layers.EinsumDense):  # type: ignore[misc]
    """``keras.layers.EinsumDense`` computing ``activation(einsum(equation, input_quantizer(x),
    kernel_quantizer(kernel)) + bias)`` (see ``ste.layers.QuantDense``).

    An equation that is a dense product (:func:`einsum_layout`) is computed as one 2-D matmul with the bias, as
    ``ste.layers.QuantDense`` computes Dense: TFLite's converter makes it one int8 FULLY_CONNECTED. Its kernel
    quantizer sees the kernel with its axes in that product's order (contracted axes first, output axes last), so
    that a per-channel quantizer (``WeightFakeQuant(channel_axes=k)``) has one range per output channel; the
    quantized kernel is read back in the kernel's own order.
    """

    slots = (KernelSlot("kernel_quantizer", "kernel", "kernel_constraint"),)

    def _layout(self) -> EinsumLayout | None:
        return einsum_layout(self.equation, self.bias_axes)

    def _quantized(self, slot: KernelSlot) -> Any:
        layout = self._layout()
        if layout is None or layout.kernel_order is None or getattr(self, slot.quantizer) is None:
            return super()._quantized(slot)
        kernel = getattr(self, slot.kernel)
        kernel = kernel.value if isinstance(kernel, keras.Variable) else kernel
        quantized = getattr(self, slot.quantizer)(keras.ops.transpose(kernel, layout.kernel_order))
        return keras.ops.transpose(quantized, [layout.kernel_order.index(axis) for axis in range(len(kernel.shape))])

    def call(self, inputs: Any, training: Any = None) -> Any:
        quantized = self.quantize_inputs(inputs)
        kernel = self.quantize_kernel(self.slots[0])
        layout = self._layout() if getattr(getattr(quantized, "shape", None), "rank", None) else None
        if layout is None:
            x = self.apply_to_quantized_input(lambda x, k: keras.ops.einsum(self.equation, x, k), quantized, [kernel])
            if self.bias is not None:
                x = keras.ops.add(x, self.bias)
        else:  # one 2-D product with the bias, as ste.layers.QuantDense: TFLite's converter makes it one int8 FC
            if layout.kernel_order is not None:
                kernel = keras.ops.transpose(kernel, layout.kernel_order)
            contracted = layout.contracted
            x = self.apply_to_quantized_input(lambda x, k: flat_matmul(x, k, contracted), quantized, [kernel])
            if self.bias is not None:
                x = keras.ops.add(x, keras.ops.reshape(self.bias, (-1,)))
            x = unflatten(x, quantized, contracted, tuple(kernel.shape[contracted:]))
        if self.activation is not None:
            x = self.activation(x)
        return x


@keras.saving.register_keras_serializable(package="ste")
class QuantEmbedding(QuantLayerMixin, keras.layers.Embedding):  # type: ignore[misc]
    """``keras.layers.Embedding`` looking its integer inputs up in ``embeddings_quantizer(embeddings)``; it has no
    input quantizer (its inputs are indices)."""

    slots = (KernelSlot("embeddings_quantizer", "embeddings", "embeddings_constraint"),)

    @classmethod
    def options(cls) -> dict[str, tuple[Any, str]]:
        return {name: value for name, value in super().options().items() if name != "input_quantizer"}

    def _apply_options(self, options: dict[str, Any]) -> None:
        super()._apply_options({**options, "input_quantizer": None})

    def _options_config(self) -> dict[str, Any]:
        return {name: value for name, value in super()._options_config().items() if name != "input_quantizer"}

    def quantize_inputs(self, inputs: Any) -> Any:
        return inputs  # indices: Embedding casts them to int32

    def call(self, inputs: Any) -> Any:
        if inputs.dtype not in ("int32", "int64"):
            inputs = keras.ops.cast(inputs, "int32")
        table = self.quantize_kernel(self.slots[0])
        return keras.ops.cast(keras.ops.take(table, inputs, axis=0), self.compute_dtype)


_ReversibleEmbedding: Any = getattr(keras.layers, "ReversibleEmbedding", None)  # Keras 3.13+


if _ReversibleEmbedding is not None:

    @keras.saving.register_keras_serializable(package="ste")
    class QuantReversibleEmbedding(QuantLayerMixin, _ReversibleEmbedding):  # type: ignore[misc]
        """``keras.layers.ReversibleEmbedding`` on quantized tables: a lookup (``reverse=False``) reads
        ``embeddings_quantizer(embeddings)``; the reverse projection (``reverse=True``, the logits of a language
        model) is ``input_quantizer(x)`` times the transposed quantized table (tied weights) or times
        ``reverse_embeddings_quantizer(reverse_embeddings)`` (``tie_weights=False``), as one 2-D matmul (one
        FULLY_CONNECTED in TFLite), then the optional soft cap. The input quantizer applies to the reverse
        projection only (a lookup's inputs are indices)."""

        slots = (
            KernelSlot("embeddings_quantizer", "embeddings", "embeddings_constraint"),
            KernelSlot("reverse_embeddings_quantizer", "reverse_embeddings", "reverse_embeddings_constraint"),
        )

        def _apply_options(self, options: dict[str, Any]) -> None:
            super()._apply_options(options)
            if self.tie_weights:  # no reverse_embeddings: one table, one slot
                object.__setattr__(self, "slots", type(self).slots[:1])

        def _options_config(self) -> dict[str, Any]:
            config = super()._options_config()
            config.setdefault("reverse_embeddings_quantizer", None)
            return config

        def call(self, inputs: Any, reverse: bool = False) -> Any:
            if not reverse:
                ids = inputs if inputs.dtype in ("int32", "int64") else keras.ops.cast(inputs, "int32")
                table = self.quantize_kernel(self.slots[0])
                result = keras.ops.cast(keras.ops.take(table, ids, axis=0), self.compute_dtype)
                if self.mask_zero:
                    from keras.src.backend import set_keras_mask  # what Keras's own layer calls (no public name)

                    set_keras_mask(result, keras.ops.not_equal(ids, 0))
                return result
            x = self.quantize_inputs(inputs)
            if self.tie_weights:
                kernel = keras.ops.transpose(self.quantize_kernel(self.slots[0]))
            else:
                kernel = self.quantize_kernel(self.slots[1])
            if self.reverse_dtype is not None:
                x, kernel = keras.ops.cast(x, self.reverse_dtype), keras.ops.cast(kernel, self.reverse_dtype)
            rank = getattr(getattr(x, "shape", None), "rank", None)
            if rank is not None and rank > 2:
                logits = unflatten(flat_matmul(x, kernel, 1), x, 1, (self.input_dim,))
            else:
                logits = keras.ops.matmul(x, kernel)
            if self.logit_soft_cap is not None:
                cap = self.logit_soft_cap
                logits = keras.ops.multiply(keras.ops.tanh(keras.ops.divide(logits, cap)), cap)
            return logits

    # inspect.signature shows Embedding's arguments that ReversibleEmbedding forwards in **kwargs too
    QuantReversibleEmbedding.__signature__ = forwarding_signature(
        inspect.signature(QuantReversibleEmbedding), [inspect.signature(keras.layers.Embedding)]
    )

else:  # pragma: no cover - Keras before 3.13
    QuantReversibleEmbedding = None  # type: ignore[assignment,misc]


_PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_gate_dense", "_output_dense")


@keras.saving.register_keras_serializable(package="ste")
class QuantMultiHeadAttention(keras.layers.MultiHeadAttention):  # type: ignore[misc]
    """``keras.layers.MultiHeadAttention`` with quantized projections and quantized activations inside (see the
    module docstring).

    ``kernel_quantizer`` quantizes each projection's kernel (a new copy per projection), ``activation_quantizer``
    each inner activation, ``probability_quantizer`` the attention probabilities: quantizer specs or configs
    (``ste.quantizers.get``), ``None`` for none.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        *,
        kernel_quantizer: Any = None,
        activation_quantizer: Any = None,
        probability_quantizer: Any = None,
        **kwargs: Any,
    ) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        super().__init__(num_heads, key_dim, **kwargs)
        self._specs = {
            "kernel_quantizer": ste_quantizers.serialize(ste_quantizers.get(kernel_quantizer)),
            "activation_quantizer": ste_quantizers.serialize(ste_quantizers.get(activation_quantizer)),
            "probability_quantizer": ste_quantizers.serialize(ste_quantizers.get(probability_quantizer)),
        }

    def _new(self, spec: str, name: str, channel_axes: int | None = None) -> Any:
        """A fresh quantizer from its spec, named ``name`` (each use gets its own variables). ``channel_axes``: a
        per-channel kernel quantizer's (a spec with ``channel_axes`` > 0) is set to the projection's output axes."""
        config = self._specs[spec]
        if isinstance(config, dict) and isinstance(config.get("config"), dict):
            inner = {**config["config"], "name": name}
            if channel_axes is not None and inner.get("channel_axes"):
                inner["channel_axes"] = channel_axes
            config = {**config, "config": inner}
        return ste_quantizers.get(config)

    def build(self, query_shape: Any, value_shape: Any, key_shape: Any = None) -> None:
        super().build(query_shape, value_shape, key_shape)
        for name in _PROJECTIONS:
            dense = getattr(self, name, None)
            if dense is None:
                continue
            axes = output_channel_axes(dense)
            kernel_quantizer = self._new("kernel_quantizer", f"{dense.name}_kernel_quantizer", axes)
            quantized = QuantEinsumDense(**dense.get_config(), kernel_quantizer=kernel_quantizer)
            quantized.build_from_config(dense.get_build_config())
            self._tracker.untrack(dense)  # the Keras projection is replaced, not kept beside the quantized one
            setattr(self, name, quantized)
        for name in INNER:
            spec = "probability_quantizer" if name == "probabilities" else "activation_quantizer"
            quantizer = self._new(spec, f"{name}_quantizer")
            if isinstance(quantizer, keras.layers.Layer):
                quantizer.build(None)
                claim(quantizer, self, name)
            setattr(self, f"_{name}_quantizer", quantizer)  # tracked: saved with the layer

    def _quantize(self, name: str, x: Any) -> Any:
        quantizer = getattr(self, f"_{name}_quantizer")
        return x if quantizer is None else quantizer(x)

    def _compute_attention(
        self,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any = None,
        training: Any = None,
        return_attention_scores: bool = False,
        use_causal_mask: bool = False,
    ) -> tuple[Any, Any]:
        return explicit_attention(
            self, self._quantize, query, key, value, attention_mask, training, return_attention_scores, use_causal_mask
        )

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._specs}


# inspect.signature shows Keras's arguments too (they travel in **kwargs)
_own = inspect.signature(QuantMultiHeadAttention.__init__)
QuantMultiHeadAttention.__signature__ = forwarding_signature(
    _own.replace(parameters=list(_own.parameters.values())[1:]), [inspect.signature(keras.layers.MultiHeadAttention)]
)
