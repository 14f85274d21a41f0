"""What ste's QAT and pruning add to a training step: the int8 QAT step and the pruning step of a model against its
float step, side by side in one process.

    python -m benchmarks.training_cost              # the ViT (keras-hub) and the CNN
    python -m benchmarks.training_cost --smoke      # tiny sizes, a few steps: checks that it runs
    python -m benchmarks.training_cost --only cnn --profile 5

Networks: ``vit``, the ``vit`` accuracy row's (KerasHub's ``ViTBackbone`` and a class-token head,
``benchmarks/_vit_accuracy.py``; skipped, saying so, where keras-hub is not installed), and ``cnn``, the ``int8_qat``
row's CNN (convolution, batch norm, depthwise and 1×1 convolutions, dense; ``_accuracy_worker.small_cnn``). Three
variants of each, with the same float weights, compiled with Adam and trained by ``model.fit`` (Keras's
``train_function``, a ``tf.function``; Keras leaves XLA off on CPU):

* ``float``: the model;
* ``qat``: ``ste.quantize_model(model)`` (int8);
* ``prune``: ``ste.sparsity.prune_low_magnitude(model)`` (``ConstantSparsity(0.5)``, the default, every prunable
  layer), with ``UpdatePruningStep``.

Timing: ``rounds`` rounds after a warm-up one; each round runs every variant once, in the rotating order of
``benchmarks._timing.alternate`` (every variant in every position, every other cycle reversed), as one ``fit`` over
``steps`` batches of random inputs. A variant's sample is the median step of its round (``on_train_batch_begin`` to
``on_train_batch_end``, the round's first step left out). Reported: each variant's median step over the rounds and
its range, and the per-round ratio to the float step: median, minimum, maximum. Targets: QAT at most 1.5× the float
step, pruning at most 1.15×.

``--profile N``: also N profiled steps of every variant (``benchmarks._op_profile``, TensorFlow's profiler): the
milliseconds of op time per op type, and the op types that add the most time over the float step.

Writes ``benchmarks/results/training_cost.json`` (git-ignored; ``--out``) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

import ste

from ._timing import LoadSampler, alternate, load_average

__all__ = ["FULL", "SMOKE", "TARGETS", "main", "measure"]

ROOT = Path(__file__).resolve().parent.parent
NETWORKS = ("vit", "cnn")
VARIANTS = ("float", "qat", "prune")
TARGETS = {"qat": 1.5, "prune": 1.15}
FULL: dict[str, Any] = {"batch": 128, "steps": 10, "rounds": 21, "vit": None}
SMOKE: dict[str, Any] = {
    "batch": 4,
    "steps": 3,
    "rounds": 2,
    "vit": {"patch_size": 7, "num_layers": 1, "num_heads": 2, "hidden_dim": 16, "mlp_dim": 32},
}
HUB = "keras-hub is not installed (pip install keras-hub; 0.32 tested)"


def _load_worker(name: str) -> Any:
    """A module of benchmarks/ that is written to run as a script (it imports its neighbours by their bare names)."""
    directory = str(Path(__file__).resolve().parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    import importlib

    return importlib.import_module(name)


def build(network: str, vit: dict[str, int] | None = None) -> keras.Model:
    """The float network, with seeded weights."""
    keras.utils.set_random_seed(0)
    if network == "vit":
        return _load_worker("_vit_accuracy").network(keras, "vit", vit)
    return _load_worker("_accuracy_worker").small_cnn(keras)


def variants(model: keras.Model) -> dict[str, tuple[keras.Model, list[Any]]]:
    """The float model, its int8 QAT copy and its pruned copy, each compiled, with its ``fit`` callbacks."""
    made = {
        "float": (model, []),
        "qat": (ste.quantize_model(model), []),
        "prune": (ste.sparsity.prune_low_magnitude(model), [ste.sparsity.UpdatePruningStep()]),
    }
    for variant, _ in made.values():
        variant.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return made


class _StepTimer(keras.callbacks.Callback):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.start = 0.0
        self.steps: list[float] = []

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.steps.append(time.perf_counter() - self.start)


def _spread(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(network: str, batch: int, steps: int, rounds: int, vit: dict[str, int] | None = None) -> dict[str, Any]:
    """Median step of each variant per round, alternating; the ratios to float per round."""
    model = build(network, vit)
    shape = tuple(model.inputs[0].shape[1:])
    x = np.random.default_rng(0).random((batch * steps, *shape), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 10, batch * steps).astype("int32")
    made = variants(model)
    samples: dict[str, list[float]] = {name: [] for name in made}

    def one_round(name: str) -> None:
        variant, callbacks = made[name]
        timer = _StepTimer()
        variant.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[timer, *callbacks])
        samples[name].append(statistics.median(timer.steps[1:] or timer.steps))

    load = load_average()
    alternate({name: functools.partial(one_round, name) for name in made}, rounds=rounds, inner=1, warmup=1)
    per_round = {name: values[1:] for name, values in samples.items()}  # the warm-up round is not kept
    result: dict[str, Any] = {
        "network": network,
        "parameters": int(model.count_params()),
        "batch": batch,
        "steps_per_round": steps,
        "rounds": rounds,
        "load_before": load,
        "step_ms": {name: _spread([1000 * v for v in values]) for name, values in per_round.items()},
        "per_round_ms": {name: [round(1000 * v, 3) for v in values] for name, values in per_round.items()},
    }
    result["ratio"] = {
        name: _spread([v / f for v, f in zip(per_round[name], per_round["float"])]) for name in made if name != "float"
    }
    result["targets_met"] = {name: result["ratio"][name]["median"] <= TARGETS[name] for name in TARGETS}
    result["_made"] = made  # for the profile; dropped before writing
    result["_batch"] = (x[:batch], y[:batch])
    return result


def profile(made: dict[str, tuple[keras.Model, list[Any]]], batch: tuple[Any, Any], steps: int) -> dict[str, Any]:
    """Op time per op type of each variant's step (medians over ``steps`` profiled steps), and the op types that add
    the most time over the float step."""
    from ._op_profile import profile_steps

    x, y = batch
    out: dict[str, Any] = {}
    for name, (variant, _) in made.items():
        variant.train_on_batch(x, y)  # traced before it is profiled
        run = profile_steps(functools.partial(variant.train_on_batch, x, y), steps)
        out[name] = {key: run[key] for key in ("step_ms", "op_time_ms", "idle_ms", "ops")}
        out[name]["op_types_ms"] = {
            k: round(v, 3) for k, v in sorted(run["op_types_ms"].items(), key=lambda kv: -kv[1])
        }
    base = out["float"]["op_types_ms"]
    for name in made:
        if name == "float":
            continue
        kinds = out[name]["op_types_ms"]
        extra = {k: kinds.get(k, 0.0) - base.get(k, 0.0) for k in set(kinds) | set(base)}
        out[name]["most_added_ms"] = dict(sorted(extra.items(), key=lambda kv: -kv[1])[:8])
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| network | float step | int8 QAT step | QAT ÷ float (target ≤ 1.5) | pruning step | "
        "pruning ÷ float (target ≤ 1.15) |",
        "|---|---|---|---|---|---|",
    ]

    def ms(s: dict[str, float]) -> str:
        return f"{s['median']:.1f} ms ({s['min']:.1f}–{s['max']:.1f})"

    def ratio(s: dict[str, float]) -> str:
        return f"**{s['median']:.2f}×** ({s['min']:.2f}–{s['max']:.2f})"

    for network, r in results["networks"].items():
        if "skipped" in r:
            lines.append(f"| {network} | skipped: {r['skipped']} | | | | |")
            continue
        t, q = r["step_ms"], r["ratio"]
        lines.append(
            f"| {network} ({r['parameters']:,} parameters, batch {r['batch']}) | {ms(t['float'])} | {ms(t['qat'])} | "
            f"{ratio(q['qat'])} | {ms(t['prune'])} | {ratio(q['prune'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.training_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps")
    parser.add_argument("--only", nargs="+", choices=NETWORKS, default=list(NETWORKS), help="networks to time")
    parser.add_argument("--profile", type=int, default=0, help="also profile N steps of every variant")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="output directory")
    args = parser.parse_args(argv)
    config = SMOKE if args.smoke else FULL
    from .run import machine

    started = datetime.datetime.now(datetime.UTC)
    results: dict[str, Any] = {
        "command": "python -m benchmarks.training_cost"
        + (" --smoke" if args.smoke else "")
        + (f" --only {' '.join(args.only)}" if list(args.only) != list(NETWORKS) else "")
        + (f" --profile {args.profile}" if args.profile else ""),
        "date_utc": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", ""),
        "config": {k: v for k, v in config.items()},
        "targets": TARGETS,
        "networks": {},
    }
    with LoadSampler() as sampler:
        for network in args.only:
            if network == "vit" and importlib.util.find_spec("keras_hub") is None:
                results["networks"][network] = {"skipped": HUB}
                continue
            r = measure(network, config["batch"], config["steps"], config["rounds"], config["vit"])
            made, batch = r.pop("_made"), r.pop("_batch")
            if args.profile:
                r["profile"] = profile(made, batch, args.profile)
            results["networks"][network] = r
            print(f"benchmarks.training_cost: {network} done", file=sys.stderr, flush=True)
    results["load_average_1min_during_run"] = sampler.summary()
    results["minutes"] = round((datetime.datetime.now(datetime.UTC) - started).total_seconds() / 60, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "training_cost.json").write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results))
    return results


if __name__ == "__main__":
    main()
