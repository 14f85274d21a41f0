"""``lq.models``: larq 0.14's ``summary`` and ``ModelProfile``, with larq's counting conventions.

These are larq's figures, so that a larq user's numbers do not change (``ste.summary`` keeps ste's own conventions;
docs/larq.md compares them):

- a batch normalization layer's ``beta`` and ``gamma`` are left out (its moving mean and variance stand for the
  folded offset and scale); every other variable counts at its kernel's quantizer precision, else 32 bits;
- MACs are counted for Dense, Conv1D/2D (and their transposes, which subclass them in tf.keras), DepthwiseConv2D and
  SeparableConv1D/2D: each kernel's size × the output pixels (``shape[1:3]`` of a 4-D output, ``shape[1]`` of a
  3-D one, 1 for a 2-D one), at ``max(input precision or 32, kernel bits)`` — the pointwise step of a separable
  convolution too;
- the compression ratio is quantized size ÷ float32 size (below 1);
- memory in the table is in kB of 8 × 1024 bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras

from ..errors import NotBuiltError, ParameterError
from ._arguments import check_bool
from .utils import memory_as_readable_str

__all__ = ["LayerProfile", "ModelProfile", "WeightProfile", "summary"]

_MAC_LAYERS = (
    keras.layers.Dense,
    keras.layers.Conv1D,
    keras.layers.Conv2D,
    keras.layers.Conv1DTranspose,
    keras.layers.Conv2DTranspose,
    keras.layers.DepthwiseConv2D,
    keras.layers.SeparableConv1D,
    keras.layers.SeparableConv2D,
)
_OP_COUNTED = (
    keras.layers.Flatten,
    keras.layers.BatchNormalization,
    keras.layers.MaxPooling1D,
    keras.layers.MaxPooling2D,
    keras.layers.AveragePooling1D,
    keras.layers.AveragePooling2D,
    *_MAC_LAYERS,
)


class WeightProfile:
    """One variable: its count and bit width (its quantizer's precision for a quantized kernel, else 32)."""

    def __init__(self, weight: Any, trainable: bool = True) -> None:
        self._weight = weight
        precision = getattr(weight, "precision", None)
        self.bitwidth: int = precision if isinstance(precision, int) else 32
        self.trainable = check_bool("WeightProfile", "trainable", trainable)

    @property
    def count(self) -> int:
        return math.prod(self._weight.shape)

    @property
    def memory(self) -> int:
        """In bits."""
        return self.bitwidth * self.count

    @property
    def fp_equivalent_memory(self) -> int:
        return 32 * self.count

    @property
    def int8_fp_weights_memory(self) -> int:
        """The memory with every weight wider than 8 bits stored in 8."""
        return self.count * min(self.bitwidth, 8)

    def is_bias(self) -> bool:
        return "bias" in self._weight.name


@dataclass
class OperationProfile:
    n: int
    precision: int
    op_type: str


def _normalize_shape(shape: Any) -> Any:
    return tuple(-1 if dim is None else dim for dim in shape)


class LayerProfile:
    """larq's per-layer figures."""

    def __init__(self, layer: Any) -> None:
        self._layer = layer
        self.name = layer.name
        weights = list(layer.weights)
        if isinstance(layer, keras.layers.BatchNormalization):  # folded: moving mean/variance stand for beta/gamma
            weights = [w for w in weights if not any(w is getattr(layer, n, None) for n in ("beta", "gamma"))]
        trainable = layer.trainable_weights
        self.weight_profiles = [WeightProfile(w, trainable=any(w is t for t in trainable)) for w in weights]
        self.op_profiles: list[OperationProfile] = []
        if isinstance(layer, _MAC_LAYERS) and self.output_pixels:
            for profile in self.weight_profiles:
                if not profile.is_bias():
                    precision = max(self.input_precision or 32, profile.bitwidth)
                    self.op_profiles.append(OperationProfile(profile.count * self.output_pixels, precision, "mac"))

    @property
    def memory(self) -> int:
        return sum(p.memory for p in self.weight_profiles)

    @property
    def int8_fp_weights_memory(self) -> int:
        return sum(p.int8_fp_weights_memory for p in self.weight_profiles)

    @property
    def fp_equivalent_memory(self) -> int:
        return sum(p.fp_equivalent_memory for p in self.weight_profiles)

    def weight_count(self, bitwidth: int | None = None, trainable: bool | None = None) -> int:
        return sum(
            p.count
            for p in self.weight_profiles
            if (bitwidth is None or p.bitwidth == bitwidth) and (trainable is None or p.trainable == trainable)
        )

    def op_count(self, op_type: str | None = None, precision: int | None = None) -> int | None:
        if op_type != "mac":
            raise ParameterError(f"op_count: only op_type='mac' is counted; received {op_type!r}.")
        if not isinstance(self._layer, _OP_COUNTED) or not self.output_pixels:
            return None
        return sum(op.n for op in self.op_profiles if precision is None or op.precision == precision)

    @property
    def input_precision(self) -> int | None:
        precision = getattr(getattr(self._layer, "input_quantizer", None), "precision", None)
        return precision if isinstance(precision, int) else None

    @property
    def output_shape(self) -> Any:
        shape = _output_shape(self._layer)
        if shape is None:
            return None
        if isinstance(shape, list):
            shapes = [_normalize_shape(s) for s in shape]
            return shapes[0] if len(shapes) == 1 else shapes
        return _normalize_shape(shape)

    @property
    def output_shape_str(self) -> str:
        return str(self.output_shape or "multiple")

    @property
    def output_pixels(self) -> int | None:
        """Pixels of one output feature map (1 for a fully connected output), as larq counts them."""
        shape = self.output_shape
        if not shape or isinstance(shape, list):
            return None
        if len(shape) == 4:
            return int(shape[1] * shape[2])
        if len(shape) == 3:
            return int(shape[1])
        return 1 if len(shape) == 2 else None

    @property
    def unique_param_bidtwidths(self) -> list[int]:
        return sorted({p.bitwidth for p in self.weight_profiles})

    @property
    def unique_op_precisions(self) -> list[int]:
        return sorted({op.precision for op in self.op_profiles})

    def generate_table_row(self, config: dict[str, Any]) -> list[Any]:
        row: list[Any] = [self.name, self.input_precision or "-", self.output_shape_str]
        row += [_entry(self.weight_count(bits), 1) for bits in config["param_bidtwidths"]]
        row.append(_entry(self.memory, config["memory_units"]))
        row += [_entry(self.op_count("mac", bits), 1) for bits in config["mac_precisions"]]
        return row


class ModelProfile(LayerProfile):
    """larq's figures for a model: one profile per layer (a nested model is one profile)."""

    def __init__(self, model: Any) -> None:
        self.name = model.name
        self.layer_profiles: list[LayerProfile] = [
            ModelProfile(layer) if isinstance(layer, keras.Model) else LayerProfile(layer) for layer in model.layers
        ]

    @property
    def memory(self) -> int:
        return sum(p.memory for p in self.layer_profiles)

    @property
    def int8_fp_weights_memory(self) -> int:
        return sum(p.int8_fp_weights_memory for p in self.layer_profiles)

    @property
    def fp_equivalent_memory(self) -> int:
        return sum(p.fp_equivalent_memory for p in self.layer_profiles)

    def weight_count(self, bitwidth: int | None = None, trainable: bool | None = None) -> int:
        return sum(p.weight_count(bitwidth, trainable) for p in self.layer_profiles)

    def op_count(self, op_type: str | None = None, precision: int | None = None) -> int:
        return sum(p.op_count(op_type, precision) or 0 for p in self.layer_profiles)

    @property
    def unique_param_bidtwidths(self) -> list[int]:
        return sorted({bits for p in self.layer_profiles for bits in p.unique_param_bidtwidths})

    @property
    def unique_op_precisions(self) -> list[int]:
        return sorted({bits for p in self.layer_profiles for bits in p.unique_op_precisions})

    @property
    def input_precision(self) -> int | None:
        return self.layer_profiles[0].input_precision if self.layer_profiles else None

    @property
    def output_shape(self) -> Any:
        return self.layer_profiles[-1].output_shape if self.layer_profiles else None

    def generate_table(self, include_macs: bool = True) -> list[list[Any]]:
        config: dict[str, Any] = {
            "param_bidtwidths": self.unique_param_bidtwidths,
            "mac_precisions": self.unique_op_precisions if include_macs else [],
            "memory_units": 8 * 1024,
        }
        header = [
            "Layer",
            "Input prec.\n(bit)",
            "Outputs",
            *(f"# {bits}-bit\nx 1" for bits in config["param_bidtwidths"]),
            "Memory\n(kB)",
            *(f"{bits}-bit MACs" for bits in config["mac_precisions"]),
        ]
        total: list[Any] = ["Total", "", ""]
        total += [_entry(self.weight_count(bits), 1) for bits in config["param_bidtwidths"]]
        total.append(_entry(self.memory, config["memory_units"]))
        total += [_entry(self.op_count("mac", bits), 1) for bits in config["mac_precisions"]]
        return [header, *(p.generate_table_row(config) for p in self.layer_profiles), total]

    def generate_summary(self, include_macs: bool = True) -> list[list[Any]]:
        rows: list[list[Any]] = [
            ["Total params", _number_as_readable_str(self.weight_count())],
            ["Trainable params", _number_as_readable_str(self.weight_count(trainable=True))],
            ["Non-trainable params", _number_as_readable_str(self.weight_count(trainable=False))],
            ["Model size", memory_as_readable_str(self.memory)],
            ["Model size (8-bit FP weights)", memory_as_readable_str(self.int8_fp_weights_memory)],
            ["Float-32 Equivalent", memory_as_readable_str(self.fp_equivalent_memory)],
            ["Compression Ratio of Memory", self.memory / max(1e-8, self.fp_equivalent_memory)],
        ]
        if include_macs:
            macs = self.op_count("mac")
            rows.append(["Number of MACs", _number_as_readable_str(macs)])
            for bits, kind in ((1, "binarized"), (2, "ternarized")):
                ratio = self.op_count("mac", bits) / max(1, macs)
                if ratio > 0:
                    rows.append([f"Ratio of MACs that are {kind}", f"{ratio:.4f}"])
        return rows


def _output_shape(layer: Any) -> Any:
    """The shape of ``layer``'s output (a list for several outputs); None for a layer called never or more than once."""
    try:
        output = layer.output
    except (AttributeError, ValueError):
        return None
    if isinstance(output, (list, tuple)):
        return [None if getattr(t, "shape", None) is None else tuple(t.shape) for t in output]
    return None if getattr(output, "shape", None) is None else tuple(output.shape)


def _layers(model: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every layer of ``model`` with its path (``outer/inner`` for the layers of a nested model)."""
    found: list[tuple[str, Any]] = []
    for layer in getattr(model, "layers", []):
        path = f"{prefix}{layer.name}"
        found += _layers(layer, f"{path}/") if isinstance(layer, keras.Model) else [(path, layer)]
    return found


def _check_built(model: Any) -> None:
    name = getattr(model, "name", model)
    if not getattr(model, "built", False):
        raise NotBuiltError(
            f"lq.models.summary(model): the model {name!r} is not built. Fix: give it a keras.Input or call it on a "
            f"batch first."
        )
    unbuilt = [path for path, layer in _layers(model) if not getattr(layer, "built", True)]
    if unbuilt:
        raise NotBuiltError(
            f"lq.models.summary(model): the model {name!r} is built but its layers {unbuilt} are not (model.build() "
            f"on a subclassed model does not build the layers its call creates or uses). Fix: call the model on a "
            f"batch first, e.g. model(numpy.zeros((1, *input_shape)))."
        )


def _entry(value: Any, units: int) -> Any:
    """A table cell: ``?`` for an unknown count, the value itself for 0 or unit 1, else value / units."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "?"
    return value if value == 0 or units == 1 else value / units


def _number_as_readable_str(num: float) -> str:
    """3 significant figures with k, M, B, T suffixes (``1.00E+16`` from 10^15 on), as larq prints counts."""
    num = float(f"{num:.3g}")
    if num < 1000:
        return str(num).rstrip("0").rstrip(".")
    if num >= 1e15:
        return f"{num:.2E}"
    magnitude = 0
    while abs(num) >= 1000 and magnitude < 4:
        magnitude, num = magnitude + 1, num / 1000.0
    return f"{num:.3g}".rstrip(".") + ["", " k", " M", " B", " T"][magnitude]


def _bitsize_as_str(bitsize: int) -> str:
    names = {8: "byte", 8 * 1024: "kB"}
    if bitsize not in names:
        raise NotImplementedError(f"no name for a unit of {bitsize} bits; larq names 8 (byte) and 8192 (kB).")
    return names[bitsize]


def _table(rows: Sequence[Sequence[Any]], title: str, *, layers: bool) -> str:
    """An ASCII table as larq prints it: no inner column borders, the title in the top border; the layers table
    has right-aligned columns after the first and borders under the heading and above the total."""
    cells = [[f"{v:.2f}" if type(v) is float else str(v) for v in row] for row in rows]
    widths = [max(len(line) for row in cells for line in row[i].split("\n")) for i in range(len(cells[0]))]
    inner = sum(widths) + 2 * len(widths)
    border = "+" + "-" * inner + "+"
    lines = ["+" + title + "-" * (inner - len(title)) + "+" if len(title) <= inner else border]
    for index, row in enumerate(cells):
        split = [cell.split("\n") for cell in row]
        for k in range(max(len(s) for s in split)):
            parts = []
            for i, s in enumerate(split):
                text = s[k] if k < len(s) else ""
                parts.append(" " + (text.ljust(widths[i]) if i == 0 or not layers else text.rjust(widths[i])) + " ")
            lines.append("|" + "".join(parts) + "|")
        if layers and index in (0, len(cells) - 2):
            lines.append(border)
    lines.append(border)
    return "\n".join(lines)


def summary(model: Any, print_fn: Callable[[str], Any] | None = None, include_macs: bool = True) -> ModelProfile:
    """Print larq's two tables for ``model`` with ``print_fn`` (default ``print``): per layer the input precision,
    outputs, weights by bit width, memory (kB) and MACs by precision, then the model's totals. Raises
    :class:`ste.errors.NotBuiltError` (a ``ValueError``, as larq) for a model that is not built.

    The figures follow larq's conventions (module docstring); ``ste.summary(model)`` gives ste's. Returns the
    :class:`ModelProfile` (larq returns ``None``).
    """
    include_macs = check_bool("ste.larq.models.summary", "include_macs", include_macs)
    _check_built(model)
    print_fn = print_fn or print
    profile = ModelProfile(model)
    # as larq: include_macs=False leaves the MACs out of the summary lines, not out of the layers table
    print_fn(_table(profile.generate_table(), f"{model.name} stats", layers=True))
    print_fn(_table(profile.generate_summary(include_macs), f"{model.name} summary", layers=False))
    return profile
