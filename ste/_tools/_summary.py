"""``ste.summary(model)``: per layer, precisions, parameters by bit width, memory and multiply-accumulates.

What is counted:

* A parameter's bit width is its quantizer's ``precision`` for a quantized kernel, else the bit width of the
  variable's dtype (32 for float32). Memory is ``count × bits / 8`` bytes; "float32 memory" is ``count × 4``.
  A magnitude-aware sign's per-channel scales are computed from the latent kernel and not counted.
* Multiply-accumulates (MACs) per sample of Dense, Conv1D/2D/3D, Conv1D/2D/3DTranspose (input positions × kernel
  size), DepthwiseConv2D and SeparableConv1D/2D layers (ste and Keras), at the bit width
  ``max(input bits, kernel bits)``; a float input counts as the compute dtype's bits.
  In a separable convolution the pointwise step reads the depthwise step's float output. Other layers count 0.
* Every variable is counted (``params``, split into trainable and non-trainable). The *deployment view*
  (``deployment_params``) counts what an inference engine keeps, the way ``larq.models.summary`` does: a batch
  normalization layer folds into a scale and an offset per channel, so its ``gamma`` and ``beta`` are dropped and its
  moving mean and variance stand for those two values. larq-zoo's published parameter counts and sizes are this view.
* The compression ratio is float32 size ÷ quantized size (above 1); ``larq.models.summary`` prints the reciprocal.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import keras

from .._common._arguments import check_bool
from ..errors import NotBuiltError
from ..layers import QuantLayerMixin
from ..spiking import SpikingCell
from ._export import walk_layers

__all__ = ["LayerSummary", "ModelSummary", "summary"]


@dataclass(frozen=True)
class LayerSummary:
    """One row of :func:`summary`."""

    name: str
    kind: str
    input_bits: int | None  # None: the layer does no arithmetic on its input (or it is unknown)
    kernel_bits: tuple[int, ...]
    params: dict[int, int]  # bit width -> number of parameters (every variable)
    macs: dict[int, int]  # bit width -> multiply-accumulates per sample
    output_shape: Any = None  # tuple (None for the batch axis), a list of them, or None when unknown
    trainable_params: int = 0
    deployment_params: dict[int, int] = field(default_factory=dict)  # batch norm folded, as larq counts
    neurons: int = 0  # spiking neurons (a layer whose cell is an ste.spiking.SpikingCell); 0 for other layers

    @property
    def non_trainable_params(self) -> int:
        return sum(self.params.values()) - self.trainable_params

    @property
    def memory_bytes(self) -> float:
        return sum(count * bits for bits, count in self.params.items()) / 8

    @property
    def float32_bytes(self) -> float:
        return sum(self.params.values()) * 4.0


def _sum_by_bits(counts: Iterable[dict[int, int]]) -> dict[int, int]:
    total: Counter[int] = Counter()
    for count in counts:
        total.update(count)
    return dict(sorted(total.items()))


@dataclass(frozen=True)
class ModelSummary:
    """What :func:`summary` found; ``str()`` gives the table."""

    name: str
    layers: list[LayerSummary] = field(default_factory=list)

    @property
    def params(self) -> dict[int, int]:
        """Parameters by bit width, all layers."""
        return _sum_by_bits(layer.params for layer in self.layers)

    @property
    def macs(self) -> dict[int, int]:
        """Multiply-accumulates per sample by bit width, all layers."""
        return _sum_by_bits(layer.macs for layer in self.layers)

    @property
    def total_params(self) -> int:
        """Every variable's values, all layers (what ``model.count_params()`` counts)."""
        return sum(self.params.values())

    @property
    def trainable_params(self) -> int:
        return sum(layer.trainable_params for layer in self.layers)

    @property
    def non_trainable_params(self) -> int:
        return self.total_params - self.trainable_params

    @property
    def deployment_params(self) -> dict[int, int]:
        """Parameters by bit width with batch normalization folded (``larq.models.summary``'s count)."""
        return _sum_by_bits(layer.deployment_params for layer in self.layers)

    @property
    def deployment_params_total(self) -> int:
        return sum(self.deployment_params.values())

    @property
    def deployment_memory_bytes(self) -> float:
        """Model size in the deployment view (larq-zoo's published "Memory")."""
        return sum(count * bits for bits, count in self.deployment_params.items()) / 8

    @property
    def memory_bytes(self) -> float:
        """Model size with every parameter at its bit width."""
        return sum(layer.memory_bytes for layer in self.layers)

    @property
    def float32_bytes(self) -> float:
        """Model size with every parameter in float32."""
        return sum(layer.float32_bytes for layer in self.layers)

    @property
    def spiking_layers(self) -> int:
        """Number of spiking layers (``ste.spiking`` neurons, or ``keras.layers.RNN`` over a spiking cell)."""
        return sum(1 for layer in self.layers if layer.neurons)

    @property
    def neurons(self) -> int:
        """Spiking neurons in all spiking layers."""
        return sum(layer.neurons for layer in self.layers)

    @property
    def compression_ratio(self) -> float:
        """float32 size ÷ quantized size (above 1 when quantized; ``larq.models.summary`` prints the reciprocal)."""
        return self.float32_bytes / self.memory_bytes if self.memory_bytes else 1.0

    def __str__(self) -> str:
        return _render(self)


def _dtype_bits(dtype: Any) -> int:
    name = keras.backend.standardize_dtype(dtype)
    digits = "".join(ch for ch in name if ch.isdigit())
    return int(digits) if digits else (8 if name == "bool" else 32)


def _by_bits(pairs: list[tuple[int, int]]) -> dict[int, int]:
    counter: Counter[int] = Counter()
    for bits, count in pairs:
        if count:
            counter[bits] += count
    return dict(sorted(counter.items()))


def _shape(tensor_or_none: Any) -> tuple[int | None, ...] | None:
    shape = getattr(tensor_or_none, "shape", None)
    return None if shape is None else tuple(shape)


def _io_shapes(layer: Any) -> tuple[Any, Any]:
    try:
        return _shape(layer.input), _shape(layer.output)
    except (AttributeError, ValueError):
        return None, None


def _spatial(shape: tuple[int | None, ...], channels_last: bool) -> int | None:
    dims = shape[1:-1] if channels_last else shape[2:]
    if any(d is None for d in dims):
        return None
    return math.prod(d for d in dims if d is not None)


def _channels(shape: tuple[int | None, ...], channels_last: bool) -> int | None:
    return shape[-1] if channels_last else shape[1]


def _macs(layer: Any) -> list[tuple[str, int]]:
    """(kernel attribute, MACs per sample) for the layer's arithmetic; empty when unknown or not counted."""
    in_shape, out_shape = _io_shapes(layer)
    if in_shape is None or out_shape is None:
        return []
    if isinstance(layer, keras.layers.Dense):  # applied to the last axis at every position of the others
        leading = in_shape[1:-1]
        if any(d is None for d in leading):
            return []
        return [("kernel", math.prod(d for d in leading if d is not None) * math.prod(layer.kernel.shape))]
    channels_last = getattr(layer, "data_format", "channels_last") == "channels_last"
    positions = _spatial(out_shape, channels_last)
    if positions is None:
        return []
    if isinstance(layer, (keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose, keras.layers.Conv3DTranspose)):
        inputs = _spatial(in_shape, channels_last)  # every input position scatters the whole kernel
        return [] if inputs is None else [("kernel", inputs * math.prod(layer.kernel.shape))]
    if isinstance(layer, (keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)):
        in_ch = _channels(in_shape, channels_last) or 0
        depthwise = positions * math.prod(layer.depthwise_kernel.shape)
        pointwise = positions * in_ch * layer.depth_multiplier * layer.filters
        return [("depthwise_kernel", depthwise), ("pointwise_kernel", pointwise)]
    if isinstance(layer, keras.layers.DepthwiseConv2D):
        return [("kernel", positions * math.prod(layer.kernel.shape))]
    if isinstance(layer, (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)):
        return [("kernel", positions * math.prod(layer.kernel.shape))]
    return []


def _folded_batch_norm(layer: Any) -> set[int]:
    """ids of the batch-norm variables that fold away at inference (``gamma``, ``beta``), as larq drops them."""
    if not isinstance(layer, keras.layers.BatchNormalization):
        return set()
    return {id(getattr(layer, name)) for name in ("gamma", "beta") if getattr(layer, name, None) is not None}


def _output_shape(layer: Any) -> Any:
    try:
        output = layer.output
    except (AttributeError, ValueError):  # never called, or called more than once
        return None
    if isinstance(output, (list, tuple)):
        return [_shape(t) for t in output]
    return _shape(output)


def _layer_summary(path: str, layer: Any) -> LayerSummary:
    compute_bits = _dtype_bits(getattr(layer, "compute_dtype", "float32"))
    quantized = isinstance(layer, QuantLayerMixin)
    kernel_bits: dict[str, int] = {}
    kernel_ids: dict[int, str] = {}
    if quantized:
        for attribute, bits in layer.kernel_precisions.items():
            if bits is not None:
                kernel_bits[attribute] = bits
                kernel_ids[id(getattr(layer, attribute))] = attribute
    bits_and_counts = [
        (kernel_bits[kernel_ids[id(w)]] if id(w) in kernel_ids else _dtype_bits(w.dtype), math.prod(w.shape))
        for w in layer.weights
    ]
    params = _by_bits(bits_and_counts)
    folded = _folded_batch_norm(layer)
    deployment = _by_bits([pair for pair, w in zip(bits_and_counts, layer.weights) if id(w) not in folded])
    trainable = sum(math.prod(w.shape) for w in layer.trainable_weights)
    input_bits = (layer.input_precision if quantized else None) or compute_bits
    pointwise_input = compute_bits  # a separable conv's pointwise step reads the float depthwise output
    macs = _by_bits(
        [
            (
                max(
                    pointwise_input if attribute == "pointwise_kernel" else input_bits,
                    kernel_bits.get(attribute, compute_bits),
                ),
                count,
            )
            for attribute, count in _macs(layer)
        ]
    )
    shown_kernel_bits = tuple(sorted(set(kernel_bits.values())))
    cell = getattr(layer, "cell", None)
    return LayerSummary(
        name=path,
        kind=type(layer).__name__,
        input_bits=input_bits if (macs or quantized) else None,
        kernel_bits=shown_kernel_bits,
        params=params,
        macs=macs,
        output_shape=_output_shape(layer),
        trainable_params=trainable,
        deployment_params=deployment,
        neurons=int(cell.units or 0) if isinstance(cell, SpikingCell) else 0,
    )


def _fmt_counts(counts: dict[int, int]) -> str:
    return ", ".join(f"{bits}b:{count:,}" for bits, count in counts.items()) or "-"


def _fmt_bytes(value: float) -> str:
    """Binary prefixes, as larq prints sizes (1 KiB = 1024 bytes)."""
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:,.2f} {unit}"
        value /= 1024
    return f"{value:,.2f} GiB"


def _fmt_shape(shape: Any) -> str:
    if shape is None:
        return "?"
    if isinstance(shape, list):
        return ", ".join(_fmt_shape(s) for s in shape)
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")"


def _render(summary: ModelSummary, include_macs: bool = True) -> str:
    header = ["Layer", "Type", "Output shape", "Input bits", "Kernel bits", "Params by bits", "Memory", "MACs by bits"]
    rows = [
        [
            layer.name,
            layer.kind,
            _fmt_shape(layer.output_shape),
            "-" if layer.input_bits is None else str(layer.input_bits),
            ", ".join(str(b) for b in layer.kernel_bits) or "-",
            _fmt_counts(layer.params),
            _fmt_bytes(layer.memory_bytes),
            _fmt_counts(layer.macs),
        ]
        for layer in summary.layers
    ]
    total = ["Total", "", "", "", "", _fmt_counts(summary.params), _fmt_bytes(summary.memory_bytes)]
    total.append(_fmt_counts(summary.macs))
    if not include_macs:
        header, total = header[:-1], total[:-1]
        rows = [row[:-1] for row in rows]
    widths = [max(len(str(row[i])) for row in [header, *rows, total]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

    rule = "-" * len(line(header))
    out = [f"ste.summary: {summary.name}", rule, line(header), rule, *(line(r) for r in rows), rule, line(total), rule]
    out.append(
        f"Parameters: {summary.total_params:,} (trainable {summary.trainable_params:,}, "
        f"non-trainable {summary.non_trainable_params:,})"
    )
    ratio = summary.compression_ratio
    out.append(
        f"Model size: {_fmt_bytes(summary.memory_bytes)} at the quantized bit widths, "
        f"{_fmt_bytes(summary.float32_bytes)} in float32; compression ratio {ratio:.2f}x "
        f"(float32 size / quantized size; larq prints the reciprocal, {1 / ratio:.4f})"
    )
    out.append(
        f"Deployment view (batch norm folded into a scale and an offset per channel, as larq counts): "
        f"{summary.deployment_params_total:,} parameters, {_fmt_bytes(summary.deployment_memory_bytes)}"
    )
    macs = sum(summary.macs.values())
    if include_macs and macs:
        binary = summary.macs.get(1, 0) / macs
        out.append(f"MACs per sample: {macs:,}, of which {binary:.2%} binary (1-bit)")
    if summary.spiking_layers:
        out.append(f"Spiking layers: {summary.spiking_layers}, with {summary.neurons:,} neurons in all")
    return "\n".join(out)


def _check_built(model: Any, layers: list[tuple[str, Any]]) -> None:
    name = getattr(model, "name", model)
    if not getattr(model, "built", False):
        raise NotBuiltError(
            f"ste.summary(model): the model {name!r} is not built. Fix: give it a keras.Input or call it on a batch "
            f"first."
        )
    unbuilt = [path for path, layer in layers if not getattr(layer, "built", True)]
    if unbuilt:
        raise NotBuiltError(
            f"ste.summary(model): the model {name!r} is built but its layers {unbuilt} are not (model.build() on a "
            f"subclassed model does not build the layers its call creates or uses). Fix: call the model on a batch "
            f"first, e.g. model(numpy.zeros((1, *input_shape)))."
        )


def summary(model: Any, print_fn: Callable[[str], Any] | None = print, *, include_macs: bool = True) -> ModelSummary:
    """Summarise the quantization of a built Keras model; prints the table with ``print_fn`` (``None``: silent).

    Per layer: output shape, input and kernel bit widths, parameters by bit width, memory at those bit widths,
    multiply-accumulates per sample by bit width (``include_macs=False`` leaves that column out); then totals,
    trainable and non-trainable parameters, model size, the compression ratio (float32 ÷ quantized) and the
    deployment view (batch normalization folded, the count ``larq.models.summary`` and larq-zoo publish). Returns a
    :class:`ModelSummary` (its ``str()`` is the table). Raises :class:`ste.errors.NotBuiltError` if the model or one of
    its layers is not built.
    """
    include_macs = check_bool("summary", "include_macs", include_macs)
    layers = list(walk_layers(model))
    _check_built(model, layers)
    result = ModelSummary(name=model.name, layers=[_layer_summary(path, layer) for path, layer in layers])
    if print_fn is not None:
        print_fn(_render(result, include_macs))
    return result
