"""The transformer-block layers of the int8 scheme: :class:`QuantEinsumDense`, :class:`QuantEmbedding`,
:class:`QuantMultiHeadAttention` (TFMOT never covered them: its issues #638, #942).

* :class:`QuantEinsumDense` is ``keras.layers.EinsumDense`` on the quantized input and the quantized kernel, as
  ``ste.layers.QuantDense`` is for Dense.
* :class:`QuantEmbedding` is ``keras.layers.Embedding`` looking its (integer) inputs up in the quantized table.
* :class:`QuantMultiHeadAttention` is ``keras.layers.MultiHeadAttention`` whose query, key, value (and gate) and
  output projections are :class:`QuantEinsumDense` layers with quantized kernels, and whose activations inside are
  fake-quantized where TFLite's int8 kernels need a range: the projected query (before and after its scaling by
  1/√key_dim), key and value, the attention scores, the attention probabilities (TFLite's fixed softmax range
  [0, 255/256]) and the attention output before the output projection. Its inputs and its output are quantized by
  the graph rewrite, as every covered layer's. Without quantizers it computes what Keras's layer computes (the
  explicit-scores path of ``_compute_attention``, never the fused ``dot_product_attention``, so that the scores
  can be quantized).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import keras

from .. import quantizers as ste_quantizers
from .._keras._signatures import forwarding_signature
from ..layers._base import KernelSlot, QuantLayerMixin
from ..layers._dense import flat_matmul, unflatten
from ..quantizers._sharing import claim

__all__ = ["QuantEinsumDense", "QuantEmbedding", "QuantMultiHeadAttention"]


@keras.saving.register_keras_serializable(package="ste")
class QuantEinsumDense(QuantLayerMixin, keras.layers.EinsumDense):  # type: ignore[misc]
    """``keras.layers.EinsumDense`` computing ``activation(einsum(equation, input_quantizer(x),
    kernel_quantizer(kernel)) + bias)`` (see ``ste.layers.QuantDense``)."""

    slots = (KernelSlot("kernel_quantizer", "kernel", "kernel_constraint"),)

    def _contracted(self) -> int | None:
        """How many trailing input axes the equation contracts with the kernel's leading ones, when it is a dense
        product ``<free><contracted>,<contracted><out>-><free><out>`` with a bias over all ``<out>`` axes (or none);
        ``None`` for any other equation."""
        match = re.fullmatch(r"([a-z]+),([a-z]+)->([a-z]+)", self.equation)
        if match is None:
            return None
        x, kernel, out = match.groups()
        for contracted in range(1, len(x) + 1):
            free, inner = x[: len(x) - contracted], x[len(x) - contracted :]
            tail = kernel[contracted:]
            if kernel.startswith(inner) and out == free + tail and len(set(x + tail)) == len(x + tail):
                plain = self.bias_axes is None or self.bias_axes == tail
                return contracted if tail and plain else None
        return None

    def call(self, inputs: Any, training: Any = None) -> Any:
        quantized = self.quantize_inputs(inputs)
        kernel = self.quantize_kernel(self.slots[0])
        contracted = self._contracted() if getattr(getattr(quantized, "shape", None), "rank", None) else None
        if contracted is None:
            x = self.apply_to_quantized_input(lambda x, k: keras.ops.einsum(self.equation, x, k), quantized, [kernel])
            if self.bias is not None:
                x = keras.ops.add(x, self.bias)
        else:  # one 2-D product with the bias, as ste.layers.QuantDense: TFLite's converter makes it one int8 FC
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


_PROJECTIONS = ("_query_dense", "_key_dense", "_value_dense", "_gate_dense", "_output_dense")
_INNER = ("query", "scaled_query", "key", "value", "scores", "probabilities", "attention_output")


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
        super().__init__(num_heads, key_dim, **kwargs)
        self._specs = {
            "kernel_quantizer": ste_quantizers.serialize(ste_quantizers.get(kernel_quantizer)),
            "activation_quantizer": ste_quantizers.serialize(ste_quantizers.get(activation_quantizer)),
            "probability_quantizer": ste_quantizers.serialize(ste_quantizers.get(probability_quantizer)),
        }

    def _new(self, spec: str, name: str) -> Any:
        """A fresh quantizer from its spec, named ``name`` (each use gets its own variables)."""
        config = self._specs[spec]
        if isinstance(config, dict) and isinstance(config.get("config"), dict):
            config = {**config, "config": {**config["config"], "name": name}}
        return ste_quantizers.get(config)

    def build(self, query_shape: Any, value_shape: Any, key_shape: Any = None) -> None:
        super().build(query_shape, value_shape, key_shape)
        for name in _PROJECTIONS:
            dense = getattr(self, name, None)
            if dense is None:
                continue
            kernel_quantizer = self._new("kernel_quantizer", f"{dense.name}_kernel_quantizer")
            quantized = QuantEinsumDense(**dense.get_config(), kernel_quantizer=kernel_quantizer)
            quantized.build_from_config(dense.get_build_config())
            self._tracker.untrack(dense)  # the Keras projection is replaced, not kept beside the quantized one
            setattr(self, name, quantized)
        for name in _INNER:
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
        if use_causal_mask:  # Keras passes it only to its own _compute_attention; kept for a future Keras
            causal = self._compute_causal_mask(query, value)
            given = attention_mask
            attention_mask = causal if given is None else keras.ops.logical_and(keras.ops.cast(given, "bool"), causal)
        query = self._quantize("query", query)
        query = keras.ops.multiply(query, keras.ops.cast(self._inverse_sqrt_key_dim, query.dtype))
        query = self._quantize("scaled_query", query)
        key, value = self._quantize("key", key), self._quantize("value", value)
        scores = self._quantize("scores", keras.ops.einsum(self._dot_product_equation, key, query))
        scores = self._quantize("probabilities", self._masked_softmax(scores, attention_mask))
        dropped = self._dropout_layer(scores, training=training) if self._dropout > 0.0 else scores
        output = keras.ops.einsum(self._combine_equation, dropped, value)
        return self._quantize("attention_output", output), scores

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self._specs}


# inspect.signature shows Keras's arguments too (they travel in **kwargs)
_own = inspect.signature(QuantMultiHeadAttention.__init__)
QuantMultiHeadAttention.__signature__ = forwarding_signature(
    _own.replace(parameters=list(_own.parameters.values())[1:]), [inspect.signature(keras.layers.MultiHeadAttention)]
)
