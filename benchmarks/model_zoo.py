"""Which weights ste's transformations reach on the models Keras 3 users start from: every ``keras.applications``
constructor and KerasHub's backbones (tiny configs, random weights, small inputs, nothing downloaded).

For each model and transformation (int8 QAT, int4 weight-only QAT, ternary QAT, pruning, clustering), the run
records whether it worked (else the error), the coverage (the values of the weights of rank >= 2, biases left out,
that ste's quantized, pruned or clustered computation reads, over all such values of the model: the model rewriter's
own count, ``Rewriter.plan``), the layers named in the warning of what stays as it is, and the wall time of the call.
Pruning and clustering are checked on the result as well, with numpy: after one training step at 50 % sparsity the
stripped model's kernels must hold half their values at zero, and after clustering into 4 clusters at most 4
distinct values; the share of the model's weight values in kernels that pass is the measured coverage.

Run: ``python -m benchmarks.model_zoo [--only NAME ...] [--transforms int8 prune ...] [--out PATH]`` (every model:
about an hour on 2 cores; KerasHub's backbones need ``pip install keras-hub tensorflow-text``). It writes the JSON
to ``benchmarks/results/model_zoo.json`` and prints the markdown table of docs/keras-hub.md.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np

import ste
from ste._keras import _rewrite

from ._timing import load_average

__all__ = ["TRANSFORMS", "models", "run", "table"]

RESULTS = Path(__file__).resolve().parent / "results" / "model_zoo.json"

# -- the models ----------------------------------------------------------------------------------------------------

#: the smallest input each keras.applications family accepts (the rest take 32 x 32)
_MIN_SIDE = {"Inception": 75, "Xception": 71, "NASNet": 32}


def _applications() -> Iterator[tuple[str, Callable[[], keras.Model]]]:
    names = sorted(name for name, value in vars(keras.applications).items() if callable(value) and name[0].isupper())
    for name in names:
        side = next((size for prefix, size in _MIN_SIDE.items() if name.startswith(prefix)), 32)
        constructor = getattr(keras.applications, name)
        yield (
            name,
            lambda constructor=constructor, side=side: constructor(
                weights=None, input_shape=(side, side, 3), classes=10
            ),
        )


_TEXT = {"vocabulary_size": 100, "num_layers": 2, "hidden_dim": 32, "intermediate_dim": 64}
_DECODER = {**_TEXT, "num_query_heads": 2, "num_key_value_heads": 1}


def _keras_hub() -> Iterator[tuple[str, Callable[[], keras.Model]]]:
    try:
        import keras_hub
    except ImportError:
        return
    models = keras_hub.models
    tiny: dict[str, Callable[[], keras.Model]] = {
        "BertBackbone": lambda: models.BertBackbone(**_TEXT, num_heads=2, max_sequence_length=16),
        "DistilBertBackbone": lambda: models.DistilBertBackbone(**_TEXT, num_heads=2, max_sequence_length=16),
        "RobertaBackbone": lambda: models.RobertaBackbone(**_TEXT, num_heads=2, max_sequence_length=16),
        "AlbertBackbone": lambda: models.AlbertBackbone(
            **{**_TEXT, "num_layers": 2},
            num_heads=2,
            embedding_dim=16,
            num_groups=1,
            num_inner_repetitions=1,
            max_sequence_length=16,
        ),
        "GPT2Backbone": lambda: models.GPT2Backbone(**_TEXT, num_heads=2, max_sequence_length=16),
        "GemmaBackbone": lambda: models.GemmaBackbone(**_DECODER, head_dim=16),
        "LlamaBackbone": lambda: models.LlamaBackbone(**_DECODER),
        "MistralBackbone": lambda: models.MistralBackbone(**_DECODER),
        "ViTBackbone": lambda: models.ViTBackbone(
            image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64
        ),
    }
    yield from tiny.items()


def models() -> dict[str, Callable[[], keras.Model]]:
    """Every model of the run, by name (KerasHub's only where keras-hub is installed)."""
    return dict([*_applications(), *_keras_hub()])


def _inputs(model: keras.Model, batch: int = 2) -> Any:
    """A batch for ``model``: token ids and masks for integer inputs, uniform noise for float ones."""
    rng = np.random.default_rng(0)

    def one(tensor: Any) -> np.ndarray:
        shape = (batch, *[dim or 8 for dim in tensor.shape[1:]])
        if "int" in str(tensor.dtype):
            return rng.integers(0, 2, shape).astype(str(tensor.dtype))
        return rng.uniform(0, 1, shape).astype("float32")

    if isinstance(model.input, dict):
        return {name: one(tensor) for name, tensor in model.input.items()}
    return one(model.inputs[0]) if len(model.inputs) == 1 else [one(t) for t in model.inputs]


# -- the transformations -------------------------------------------------------------------------------------------

S, C = ste.sparsity, ste.clustering
TRANSFORMS: dict[str, Callable[[keras.Model], keras.Model]] = {
    "int8": lambda model: ste.quantize_model(model),
    "int4 weights": lambda model: ste.quantize_model(model, ste.qat.NBitScheme(num_bits_weight=4)),
    "ternary": lambda model: ste.quantize_model(model, "ternary"),
    "prune": lambda model: S.prune_low_magnitude(model, S.ConstantSparsity(0.5, 0, frequency=1)),
    "cluster": lambda model: C.cluster_weights(model, 4, "LINEAR"),
}


def _kernels(model: keras.Model) -> list[np.ndarray]:
    return [w.numpy() for w in model.weights if _rewrite.is_weight(w)]


def _measured(name: str, model: keras.Model, result: keras.Model, x: Any) -> float | None:
    """The share of the model's weight values that numpy finds pruned or clustered in the stripped result."""
    total = sum(kernel.size for kernel in _kernels(model))
    if name == "prune":
        result.compile("sgd", "mse")
        y = keras.tree.map_structure(np.zeros_like, keras.tree.map_structure(np.asarray, result(x)))
        result.fit(x, y, epochs=1, verbose=0, callbacks=[S.UpdatePruningStep()])
        kept = _kernels(S.strip_pruning(result))
        return sum(k.size for k in kept if (k == 0).sum() >= k.size // 2) / total
    if name == "cluster":
        kept = _kernels(C.strip_clustering(result))
        return sum(k.size for k in kept if np.unique(k).size <= 4) / total
    return None


def _one(name: str, transform: str, make: Callable[[], keras.Model]) -> dict[str, Any]:
    plans: list[Any] = []
    run = _rewrite.Rewriter.run

    def recording(self: Any, model: keras.Model) -> keras.Model:
        plans.append(self.plan)
        return run(self, model)

    keras.utils.set_random_seed(0)
    model = make()
    x = _inputs(model)
    entry: dict[str, Any] = {"model": name, "transform": transform}
    _rewrite.Rewriter.run = recording  # type: ignore[method-assign]
    try:
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = TRANSFORMS[transform](model)
        entry["seconds"] = round(time.perf_counter() - start, 2)
        _rewrite.Rewriter.run = run  # type: ignore[method-assign]
        plan = plans[0]
        entry["coverage"] = round(plan.coverage, 4)
        entry["float_layers"] = plan.float_layers()
        entry["warnings"] = [str(w.message) for w in caught if str(w.message).startswith("ste")]
        keras.tree.map_structure(np.asarray, result(x))
        entry["measured"] = _measured(transform, model, result, x)
        entry["ok"] = True
    except Exception as error:  # a model the transformation cannot take: recorded, the run goes on
        entry["ok"] = False
        entry["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        entry["where"] = traceback.format_exc(limit=-3)[-600:]
    finally:
        _rewrite.Rewriter.run = run  # type: ignore[method-assign]
    return entry


def run(only: list[str] | None = None, transforms: list[str] | None = None, out: Path | None = None) -> dict[str, Any]:
    """Every chosen model (in the order of ``only``) through every chosen transformation; with ``out``, the JSON is
    written again after each row, so a run cut short keeps what it measured."""
    every = models()
    chosen = {name: every[name] for name in only if name in every} if only else every
    rows: list[dict[str, Any]] = []
    results = {"keras": keras.__version__, "load_average_end": load_average(), "rows": rows}
    for name, make in chosen.items():
        for transform in transforms or list(TRANSFORMS):
            rows.append(_one(name, transform, make))
            row = rows[-1]
            status = f"{row['coverage']:.1%}" if row["ok"] else row["error"][:100]
            if row.get("measured") is not None:
                status += f" (numpy: {row['measured']:.1%})"
            print(f"{name:24s} {transform:14s} {status} ({row.get('seconds', '-')} s)", flush=True)
            if out is not None:
                results["load_average_end"] = load_average()
                out.write_text(json.dumps(results, indent=1))
    return results


def table(results: dict[str, Any]) -> str:
    """The markdown table: one row per model, one column per transformation (coverage, or the error)."""
    transforms = list(dict.fromkeys(row["transform"] for row in results["rows"]))
    by_model: dict[str, dict[str, Any]] = {}
    for row in results["rows"]:
        by_model.setdefault(row["model"], {})[row["transform"]] = row
    lines = ["| model | " + " | ".join(transforms) + " |", "|---" * (len(transforms) + 1) + "|"]
    for model, cells in by_model.items():
        shown = []
        for transform in transforms:
            row = cells.get(transform)
            if row is None:
                shown.append("–")
            elif not row["ok"]:
                shown.append("error")
            else:
                measured = row.get("measured")
                shown.append(f"{row['coverage']:.1%}" + (f" ({measured:.1%})" if measured is not None else ""))
        lines.append(f"| {model} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="model names, run in this order (default: every model)")
    parser.add_argument("--transforms", nargs="*", choices=list(TRANSFORMS), help="default: every transformation")
    parser.add_argument("--out", default=str(RESULTS), help="where the JSON goes")
    arguments = parser.parse_args()
    Path(arguments.out).parent.mkdir(parents=True, exist_ok=True)
    results = run(arguments.only, arguments.transforms, Path(arguments.out))
    print(table(results))
