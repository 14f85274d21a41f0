"""Run the benchmark suite and write the results as Markdown and JSON.

    python -m benchmarks.run                  # full sizes (several minutes on 2 cores)
    python -m benchmarks.run --smoke          # tiny sizes, seconds: checks that the suite runs (CI)
    python -m benchmarks.run --update-docs    # also copy the table into docs/performance.md

Results go to ``benchmarks/results/`` (git-ignored): ``latest.json`` / ``latest.md`` and a time-stamped copy.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import tensorflow as tf

import ste

from . import binary_net, elementwise, latency, memory, qat, spiking, tracing, training
from ._allocator import require_statistics
from ._report import markdown, side_by_side
from ._timing import LoadSampler, load_average

__all__ = ["FULL", "SMOKE", "main"]

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python -m benchmarks.run"

FULL: dict[str, dict[str, Any]] = {
    "elementwise": {"size": 2**22, "rounds": 20, "inner": 3, "dtypes": elementwise.DTYPES},
    "latency": {"size": 1000, "rounds": 48, "inner": 100},
    "tracing": {"calls": 1000, "size": 1000, "repeats": 7},
    "training": {"batch": 64, "width": 32, "rounds": 20, "inner": 3},
    "memory": {"size": 2**22, "length": 50, "subprocesses": True},
    "binary_net": {
        "batch": 64,
        "blocks": 8,
        "width": 32,
        "size": 32,
        "rounds": 10,
        "inner": 2,
        "larq_rounds": 5,  # with --larq-venv: alternating ste and larq processes per oneDNN setting
        "larq_steps": 15,
        "profile": 3,  # profiled steps per process (op classes)
    },
    "spiking": {
        "steps": 25,
        "batch": 64,
        "units": 256,
        "rounds": 12,
        "inner": 3,
        "memory_steps": 25,
        "memory_units": 1024,
        "peer_rounds": 15,
    },
    "qat": {"epochs": 40, "qat_epochs": 10, "repeats": 4},  # examples/qat_digits.py's epochs
}
SMOKE: dict[str, dict[str, Any]] = {
    "elementwise": {
        "size": 1024,
        "rounds": 2,
        "inner": 1,
        "dtypes": ("float32",),
        "warmup": 1,
    },
    "latency": {"size": 1000, "rounds": 2, "inner": 3, "warmup": 1},
    "tracing": {"calls": 10, "size": 16, "repeats": 1},
    "training": {"batch": 2, "width": 4, "rounds": 2, "inner": 1, "warmup": 1},
    "memory": {"size": 2**16, "length": 5, "subprocesses": False},
    "binary_net": {
        "batch": 2,
        "blocks": 2,
        "width": 4,
        "size": 8,
        "rounds": 2,
        "inner": 1,
        "warmup": 1,
        "larq_rounds": 1,
        "larq_steps": 2,
        "profile": 1,
    },
    "spiking": {
        "steps": 3,
        "batch": 2,
        "units": 8,
        "rounds": 2,
        "inner": 1,
        "warmup": 1,
        "memory_steps": 3,
        "memory_units": 64,
        "peer_rounds": 2,
        "peer_smoke": True,
    },
    "qat": {"epochs": 1, "qat_epochs": 1, "repeats": 1, "train_samples": 128},
}
SECTIONS = tuple(FULL)
READS_ALLOCATOR = frozenset({"memory", "binary_net", "spiking"})  # sections with allocator figures


def _cpuinfo(key: str) -> str | None:
    """The value of the first ``key`` line of ``/proc/cpuinfo``; None where there is no such file or line."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def _memory_total() -> str:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _avx512() -> bool | None:
    """Whether the CPU has AVX-512 (without it TensorFlow leaves oneDNN off by default); None where it cannot say."""
    flags = _cpuinfo("flags")
    return None if flags is None else "avx512f" in flags.split()


def _git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip()


def machine() -> dict[str, Any]:
    """What the results were measured on."""
    return {
        "cpu": _cpu_model(),
        "avx512": _avx512(),
        "logical_cpus": os.cpu_count(),
        "memory": _memory_total(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
        "ste": ste.__version__,
        "git_commit": _git_commit(),
    }


def run(
    smoke: bool,
    sections: Sequence[str] = SECTIONS,
    larq_venv: str | None = None,
    snntorch_venv: str | None = None,
    spikingjelly_venv: str | None = None,
    tfmot_venv: str | None = None,
) -> dict[str, Any]:
    """Run the chosen sections; returns the JSON-ready results."""
    config = {name: dict(entry) for name, entry in (SMOKE if smoke else FULL).items()}
    if larq_venv:
        config["binary_net"]["larq_venv"] = larq_venv
    if tfmot_venv:
        config["qat"]["tfmot_venv"] = tfmot_venv
    for key, venv in (("snntorch_venv", snntorch_venv), ("spikingjelly_venv", spikingjelly_venv)):
        if venv:
            config["spiking"][key] = venv
    if set(sections) & READS_ALLOCATOR:
        require_statistics()
    started = time.time()
    results: dict[str, Any] = {
        "mode": "smoke" if smoke else "full",
        "command": COMMAND + (" --smoke" if smoke else ""),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load_average_start": load_average(),
        "config": {
            name: {k: list(v) if isinstance(v, tuple) else v for k, v in config[name].items()} for name in sections
        },
    }
    runners = {
        "elementwise": elementwise.run,
        "latency": latency.run,
        "tracing": tracing.run,
        "training": training.run,
        "memory": memory.run,
        "binary_net": binary_net.run,
        "spiking": spiking.run,
        "qat": qat.run,
    }
    with LoadSampler() as sampler:
        for name in sections:
            section_start = time.time()
            results[name] = runners[name](**config[name])
            results[name]["seconds"] = round(time.time() - section_start, 1)
            print(f"benchmarks: {name} done in {results[name]['seconds']} s", file=sys.stderr, flush=True)
    results["load_average_1min_during_run"] = sampler.summary()
    results["load_average_end"] = load_average()
    results["seconds"] = round(time.time() - started, 1)
    return results


def write(results: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``latest.json``/``latest.md`` and time-stamped copies into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(results, indent=2, sort_keys=False)
    table = markdown(results)
    for stem in ("latest", f"{results['mode']}-{stamp}"):
        (out / f"{stem}.json").write_text(text + "\n")
        (out / f"{stem}.md").write_text(table)
    return out / "latest.json", out / "latest.md"


START, END = "<!-- benchmark-results:start -->", "<!-- benchmark-results:end -->"
#: the binarized network against larq (``--larq-venv``), kept in its own section of docs/performance.md
LARQ_START, LARQ_END = "<!-- larq-side-by-side:start -->", "<!-- larq-side-by-side:end -->"


def _replace(text: str, start: str, end: str, table: str, path: Path) -> str:
    head, sep, rest = text.partition(start)
    _, sep2, tail = rest.partition(end)
    if not sep or not sep2:
        raise SystemExit(f"{path} lacks the markers {start} / {end}")
    return f"{head}{start}\n{table}\n{end}{tail}"


def _cpu(machine: dict[str, Any]) -> str:
    """The CPU, and whether it has AVX-512 where the results say (TensorFlow's default oneDNN setting follows it)."""
    flag = {True: ", AVX-512", False: ", without AVX-512"}.get(machine.get("avx512"), "")
    return f"{machine['cpu']}{flag}"


def update_docs(table: str, path: Path, results: dict[str, Any] | None = None, whole: bool = True) -> None:
    """Replace the generated part of ``docs/performance.md`` (between the two markers) with ``table`` (``whole``: a
    run of every section), and where ``results`` hold the binarized network against larq, that section too."""
    text = path.read_text()
    if whole:
        text = _replace(text, START, END, table, path)
    larq = ((results or {}).get("binary_net") or {}).get("larq")
    if larq:
        generated = "\n".join(
            [
                f"Generated from `{results['command']}` ({results['date_utc']}, commit "  # type: ignore[index]
                f"{results['machine']['git_commit']}, {_cpu(results['machine'])}).",  # type: ignore[index]
                "",
                *side_by_side(larq, profile=False),  # the op classes stay in the report (latest.md)
            ]
        )
        text = _replace(text, LARQ_START, LARQ_END, generated, path)
    path.write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and few rounds (seconds; for CI)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="output directory")
    parser.add_argument(
        "--update-docs",
        action="store_true",
        help="copy the table into docs/performance.md (a run of some sections only: only the larq side-by-side)",
    )
    parser.add_argument(
        "--larq-venv",
        metavar="PATH",
        help="a virtual environment with larq 0.14, tensorflow-cpu and tf-keras: also run the binary_net network "
        "with larq there (a subprocess, TF_USE_LEGACY_KERAS=1)",
    )
    parser.add_argument(
        "--tfmot-venv",
        metavar="PATH",
        help="a virtual environment with tensorflow-model-optimization 0.8, tensorflow-cpu and tf-keras: also train "
        "the qat section's network with TFMOT there (a subprocess, TF_USE_LEGACY_KERAS=1; benchmarks/qat.py)",
    )
    for peer in ("snntorch", "spikingjelly"):
        parser.add_argument(
            f"--{peer}-venv",
            metavar="PATH",
            help=f"a virtual environment with torch and {peer}: also train the spiking section's networks with "
            f"{peer} there (a subprocess; benchmarks/torch_snn.py)",
        )
    args = parser.parse_args(argv)
    results = run(args.smoke, args.only, args.larq_venv, args.snntorch_venv, args.spikingjelly_venv, args.tfmot_venv)
    if list(args.only) != list(SECTIONS):
        results["command"] += " --only " + " ".join(args.only)
    for peer in ("larq", "tfmot", "snntorch", "spikingjelly"):
        if getattr(args, f"{peer}_venv"):
            results["command"] += f" --{peer}-venv PATH"
    json_path, md_path = write(results, args.out)
    print(md_path.read_text())
    print(f"written: {json_path} and {md_path}", file=sys.stderr)
    if args.update_docs:
        whole = set(args.only) == set(SECTIONS)  # a partial run rewrites only its own generated section
        update_docs(md_path.read_text(), ROOT / "docs" / "performance.md", results, whole)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
