"""Training spiking networks in ste, snnTorch and SpikingJelly, side by side in separate processes.

Workloads (inputs are Bernoulli(0.3) spikes; β = 0.9, threshold 1, atan surrogate, reset by subtraction):

* ``dense``: Linear 64→256, LIF, Linear 256→10, LIF; 25 steps, batch 128; one BPTT step with Adam on the
  cross-entropy of the output spike counts.
* ``conv``: Conv 3×3 (1→8 channels, same padding), LIF, Conv 3×3 (8→16), LIF, Linear 4096→10, LIF on 16×16 inputs;
  25 steps, batch 32; the same loss and Adam. ste's unfused network folds time into the batch for the convolutions
  (one convolution over every step at once); snnTorch loops over the steps in Python (its usual form);
  SpikingJelly's multi-step layers fold time too.
* ``onb``: the Open Neuromorphic benchmark: Linear 512→512 and LIF, batch 16, 500 steps; forward and backward of
  the summed output spikes (no optimizer).

ste's row of every workload is ``ste.spiking.Fused`` (``SpikingConv2D`` and ``SpikingDense`` layers in one XLA-compiled
loop with a checkpointed backward pass); ``ste_fuse`` (dense) is the plain Keras stack below handed to
``ste.spiking.fuse``; ``ste_unfused`` is the same network of Keras layers (``Dense``, ``Conv2D`` over
the folded steps) and ``ste.spiking.LIF`` layers (not run in smoke mode, where the fused loop also runs without XLA, to
stay cheap). Each framework runs in its own process with the same thread count (``threads``); ste's variants run before
and after the peers (in reverse order) and each time is the mean of the two medians (with no peer they run once).
Step time: the median over ``rounds`` steps after ``warmup`` untimed ones. Peak memory of a step, the same way in
both: the highest running sum of the bytes requested minus those freed during one step, from each profiler's raw
allocation records: TensorFlow's (``host_tracer_level=2``, with ``TF_CPU_ALLOCATOR_USE_BFC=true`` set before
TensorFlow is imported; benchmarks/_allocations.py) and ``torch.profiler``'s (``profile_memory=True``). The BFC
allocator's own peak (``bfc_peak_bytes``) is recorded too; it counts whole chunks, which BFC hands out unsplit when
they are less than twice the request, so it reads up to ~20% above the requests and varies from run to run. The
growth of the resident set's high-water mark is recorded too, but after warm-up steps the allocators reuse pages
already resident, so it is near 0 for every framework. ste's peak also varies with the order in which TensorFlow's
two inter-op threads run the backward ops (whether Dense's weight gradient frees the spikes before the spike
gradient is transposed): each ste run measures three steps, and the figure is the highest of the six
(``requested_peak_range`` has each run's lowest and highest). The torch side is benchmarks/torch_snn.py."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ._allocations import requested_peak
from ._subprocess import result_of
from .torch_snn import resident_peak

__all__ = ["WORKLOADS", "run"]

ROOT = Path(__file__).resolve().parent.parent

WORKLOADS: dict[str, dict[str, Any]] = {
    "dense": {"steps": 25, "batch": 128, "inputs": 64, "hidden": 256, "outputs": 10},
    "conv": {"steps": 25, "batch": 32, "channels": 1, "size": 16, "filters1": 8, "filters2": 16, "outputs": 10},
    "onb": {"steps": 500, "batch": 16, "inputs": 512, "hidden": 512, "outputs": 512},
}
#: The workloads whose ste row runs ste.spiking.Fused (SpikingConv2D and SpikingDense layers in one loop).
FUSED = ("dense", "conv", "onb")
SMOKE_WORKLOADS: dict[str, dict[str, Any]] = {
    "dense": {"steps": 3, "batch": 4, "inputs": 8, "hidden": 16, "outputs": 4},
    "conv": {"steps": 3, "batch": 2, "channels": 1, "size": 6, "filters1": 2, "filters2": 2, "outputs": 4},
    "onb": {"steps": 5, "batch": 2, "inputs": 8, "hidden": 8, "outputs": 8},
}


def _ste_model(workload: str, c: dict[str, Any]) -> Any:
    import keras
    import tensorflow as tf

    import ste

    def lif() -> Any:
        return ste.spiking.LIF(beta=0.9)

    if c.get("fused"):  # ste.spiking.SpikingConv2D and SpikingDense, in one loop (ste.spiking.Fused)
        if workload == "conv":
            frame = (c["size"], c["size"], c["channels"])
            layers = [
                ste.spiking.SpikingConv2D(c["filters1"], 3, ste.spiking.LIFCell(beta=0.9), padding="same"),
                ste.spiking.SpikingConv2D(c["filters2"], 3, ste.spiking.LIFCell(beta=0.9), padding="same"),
                ste.spiking.SpikingDense(c["outputs"], ste.spiking.LIFCell(beta=0.9)),
            ]
        else:
            frame = (c["inputs"],)
            hidden = [c["hidden"], c["outputs"]] if workload == "dense" else [c["hidden"]]
            layers = [ste.spiking.SpikingDense(units, ste.spiking.LIFCell(beta=0.9)) for units in hidden]
        stack = ste.spiking.Fused(layers, segment=c.get("segment"), jit_compile=c.get("jit_compile", True))
        return keras.Sequential([keras.Input((c["steps"], *frame)), stack])
    if workload == "dense":
        plain = keras.Sequential(
            [
                keras.Input((c["steps"], c["inputs"])),
                keras.layers.Dense(c["hidden"]),
                lif(),
                keras.layers.Dense(c["outputs"]),
                lif(),
            ]
        )
        # ste_fuse: the plain stack as a user writes it, handed to ste.spiking.fuse
        return ste.spiking.fuse(plain, jit_compile=c.get("jit_compile", True)) if c.get("fuse") else plain
    if workload == "onb":
        return keras.Sequential([keras.Input((c["steps"], c["inputs"])), keras.layers.Dense(c["hidden"]), lif()])

    size, steps = c["size"], c["steps"]

    class ConvNet(keras.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.c1 = keras.layers.Conv2D(c["filters1"], 3, padding="same")
            self.c2 = keras.layers.Conv2D(c["filters2"], 3, padding="same")
            self.fc = keras.layers.Dense(c["outputs"])
            self.l1, self.l2, self.l3 = lif(), lif(), lif()

        def call(self, x: Any) -> Any:  # [B, T, H, W, C]; the convolutions see every step at once
            batch = tf.shape(x)[0]
            h = self.c1(tf.reshape(x, (-1, size, size, c["channels"])))
            s = self.l1(tf.reshape(h, (batch, steps, -1)))
            h = self.c2(tf.reshape(s, (-1, size, size, c["filters1"])))
            s = self.l2(tf.reshape(h, (batch, steps, -1)))
            return self.l3(self.fc(s))

    return ConvNet()


def measure_ste(config: dict[str, Any]) -> dict[str, Any]:
    """One ste measurement (in this process; ``main`` runs it in a fresh one)."""
    import tensorflow as tf

    threads = config["threads"]
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    import keras

    workload = config["workload"]
    steps, batch = config["steps"], config["batch"]
    rng = tf.random.Generator.from_seed(0)
    shape = (
        (batch, steps, config["size"], config["size"], config["channels"])
        if workload == "conv"
        else (batch, steps, config["inputs"])
    )
    x = tf.cast(rng.uniform(shape) < 0.3, tf.float32)
    y = rng.uniform((batch,), 0, config["outputs"], dtype=tf.int32)
    model = _ste_model(workload, config)
    model(x[:1])
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            spikes = model(x, training=True)
            loss = tf.reduce_sum(spikes) if workload == "onb" else loss_fn(y, tf.reduce_sum(spikes, axis=1))
        grads = tape.gradient(loss, model.trainable_variables)
        if workload != "onb":
            optimizer.apply(grads, model.trainable_variables)
        return loss

    for _ in range(config["warmup"]):
        step().numpy()
    tf.config.experimental.reset_memory_stats("CPU:0")
    in_use = tf.config.experimental.get_memory_info("CPU:0")["current"]
    rss_peak = resident_peak(lambda: step().numpy())
    bfc_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - in_use
    peaks = [requested_peak(lambda: step().numpy()) for _ in range(3)]  # it varies with the ops' order
    requested = max(peaks)
    times = []
    for _ in range(config["rounds"]):
        start = time.perf_counter()
        step().numpy()
        times.append(time.perf_counter() - start)
    return {
        "median_s": statistics.median(times),
        "peak_bytes": int(requested),
        "requested_peak_bytes": int(requested),
        "requested_peak_range": [int(min(peaks)), int(max(peaks))],
        "bfc_peak_bytes": int(bfc_peak),
        "rss_peak_bytes": rss_peak,
        "memory_method": "the bytes TensorFlow's ops requested during one step, from the profiler's allocation "
        "records (host_tracer_level=2): the highest running sum; bfc_peak_bytes: the BFC allocator's peak minus the "
        "bytes in use before the step (whole chunks, up to 2x a request); rss_peak_bytes: resident-set high-water "
        "mark growth",
        "tensorflow": tf.__version__,
    }


def _environment(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TF_CPU_ALLOCATOR_USE_BFC="true",
        TF_CPP_MIN_LOG_LEVEL="3",
        OMP_NUM_THREADS=str(threads),
        PYTHONPATH=str(ROOT),
    )
    return env


def _ste(config: dict[str, Any]) -> dict[str, Any]:
    argv = [sys.executable, "-m", "benchmarks.spiking_peers", json.dumps(config)]
    return result_of(argv, env=_environment(config["threads"]), timeout=3600, cwd=str(ROOT))


def _peer(venv: str, framework: str, config: dict[str, Any]) -> dict[str, Any]:
    argv = [
        str(Path(venv) / "bin" / "python"),
        str(ROOT / "benchmarks" / "torch_snn.py"),
        json.dumps({**config, "framework": framework}),
    ]
    env = {k: v for k, v in _environment(config["threads"]).items() if k != "PYTHONPATH"}
    return result_of(argv, env=env, timeout=3600, cwd=str(ROOT))


def run(
    smoke: bool = False,
    snntorch_venv: str | None = None,
    spikingjelly_venv: str | None = None,
    rounds: int = 15,
    warmup: int = 3,
    threads: int = 2,
    workloads: tuple[str, ...] = ("dense", "conv", "onb"),
) -> dict[str, Any]:
    """Every workload in ste and in each peer whose venv is given; times and memory as ratios to ste."""
    table = SMOKE_WORKLOADS if smoke else WORKLOADS
    peers = {name: venv for name, venv in (("snntorch", snntorch_venv), ("spikingjelly", spikingjelly_venv)) if venv}
    out: dict[str, Any] = {"threads": threads, "rounds": rounds, "workloads": {}}
    for workload in workloads:
        config = {**table[workload], "workload": workload, "rounds": rounds, "warmup": warmup, "threads": threads}
        variants = {"ste": config}
        if workload in FUSED:  # ste's row is the fused layers; the unfused network is measured too (not in smoke)
            variants["ste"] = {**config, "fused": True, "jit_compile": not smoke}
            if not smoke:
                variants["ste_unfused"] = config
                if workload == "dense":
                    variants["ste_fuse"] = {**config, "fuse": True}
        before = {name: _ste(variant) for name, variant in variants.items()}
        results = {name: _peer(venv, name, config) for name, venv in peers.items()}
        # ste brackets the peers (in reverse order); alone it runs once
        after = {name: _ste(variants[name]) for name in reversed(variants)} if results else before
        entry: dict[str, Any] = {"config": config}
        for name in variants:
            entry[name] = {
                **after[name],
                "median_s": (before[name]["median_s"] + after[name]["median_s"]) / 2,
                "peak_bytes": max(before[name]["requested_peak_bytes"], after[name]["requested_peak_bytes"]),
                "median_s_before_after": [before[name]["median_s"], after[name]["median_s"]],
            }
        ste_time, ste_peak = entry["ste"]["median_s"], entry["ste"]["peak_bytes"]
        for name in ("ste_unfused", "ste_fuse"):
            if name in entry:
                entry[name]["ste_time_ratio"] = ste_time / entry[name]["median_s"]
                entry[name]["ste_memory_ratio"] = ste_peak / entry[name]["peak_bytes"]
        for name, result in results.items():
            entry[name] = {
                **result,
                "ste_time_ratio": ste_time / result["median_s"],
                "ste_memory_ratio": ste_peak / result["peak_bytes"] if result["peak_bytes"] > 0 else None,
            }
            if "ste_fuse" in entry:  # the plain Keras stack through ste.spiking.fuse, against this peer
                entry[name]["ste_fuse_time_ratio"] = entry["ste_fuse"]["median_s"] / result["median_s"]
        out["workloads"][workload] = entry
        print(f"benchmarks: spiking peers {workload} done", file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(measure_ste(json.loads(sys.argv[1]))), flush=True)
