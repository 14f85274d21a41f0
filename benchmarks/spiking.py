"""Item 14.5: BPTT through ``ste.spiking.LIF`` against a hand-written LIF loop, and the memory its reset keeps.

Time: forward + backward (``tape.gradient`` of a weighted sum of the spikes with respect to the input currents)
through ``steps`` × ``batch`` × ``units`` LIF neurons (β = 0.9, ϑ = 1, reset by subtraction, detached, atan
surrogate with alpha = 2), inside ``tf.function``:

* ``hand-written``: a ``tf.range`` loop with a ``tf.custom_gradient`` spike function (the baseline);
* ``ste.spiking.LIF``: the Keras layer (a ``keras.layers.RNN`` over ``LIFCell``);
* ``hand-written, second copy``: the baseline again (A/A: the noise floor).

Memory: what the forward pass keeps for the backward pass, i.e. the growth of the TensorFlow CPU allocator's
``current`` bytes across a ``tf.function`` forward call under a ``GradientTape`` (its output plus every tensor saved
for the gradient; deterministic, unlike the peak of forward + backward, which depends on when two threads free
buffers). Layers: a zero-reset LIF (its backward pass needs last step's spikes at every step) with the spikes kept
as booleans (``tf.where`` on ``S > 0``, what ``LIFCell`` does with a detached reset) and, for comparison, as floats
(``(1 − S)·β·U``); ``reset="none"``, which keeps no spikes (the difference to it is what the spikes cost); and the
hand-written loop.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

import ste

from . import spiking_peers
from ._timing import alternate, summarize

__all__ = ["run"]

BETA, THRESHOLD = 0.9, 1.0


@tf.custom_gradient
def _spike(x: tf.Tensor) -> Any:
    def grad(dy: tf.Tensor) -> tf.Tensor:
        return dy / (1 + (math.pi * x) ** 2)  # atan, alpha = 2: (alpha/2)/(1 + (pi·alpha·x/2)²)

    return tf.cast(x > 0, x.dtype), grad


def _hand_written(currents: tf.Tensor) -> tf.Tensor:
    steps = currents.shape[1]
    inputs = tf.TensorArray(currents.dtype, size=steps).unstack(tf.transpose(currents, [1, 0, 2]))  # time-major
    u = tf.zeros_like(currents[:, 0])
    s = tf.zeros_like(u)
    out = tf.TensorArray(currents.dtype, size=steps)
    for t in tf.range(steps):
        u = BETA * u + inputs.read(t) - THRESHOLD * tf.stop_gradient(s)
        s = _spike(u - THRESHOLD)
        out = out.write(t, s)
    return tf.transpose(out.stack(), [1, 0, 2])


class _FloatSpikeLIFCell(ste.spiking.LIFCell):
    """A LIFCell whose zero reset multiplies by (1 − S): the loop keeps the spikes as floats."""

    def integrate(self, decayed: tf.Tensor, inputs: tf.Tensor, spikes: tf.Tensor, drop: tf.Tensor) -> tf.Tensor:
        return decayed * (1 - tf.stop_gradient(spikes)) + inputs


def _bptt(layer: Any) -> Any:
    @tf.function(autograph=True)
    def step(currents: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(currents)
            loss = tf.reduce_sum(layer(currents) * weights)
        return tape.gradient(loss, currents)

    return step


def _kept_bytes(layer: Any, currents: tf.Tensor) -> int:
    forward = tf.function(lambda x: layer(x), autograph=True)
    info = tf.config.experimental.get_memory_info
    kept = []
    for _ in range(3):  # the first call traces
        base = info("CPU:0")["current"]
        with tf.GradientTape() as tape:
            tape.watch(currents)
            output = forward(currents)
            kept.append(info("CPU:0")["current"] - base)
        del output, tape
    return int(min(kept[1:]))


def run(
    steps: int,
    batch: int,
    units: int,
    rounds: int,
    inner: int,
    memory_steps: int,
    memory_units: int,
    warmup: int = 2,
    peer_rounds: int = 15,
    peer_smoke: bool = False,
    snntorch_venv: str | None = None,
    spikingjelly_venv: str | None = None,
) -> dict[str, Any]:
    rng = tf.random.Generator.from_seed(0)
    currents = rng.normal((batch, steps, units), mean=0.5)
    weights = rng.normal((batch, steps, units))
    cases = {
        "hand_written": _bptt(_hand_written),
        "ste": _bptt(ste.spiking.LIF(beta=BETA, threshold=THRESHOLD)),
        "hand_written_copy": _bptt(_hand_written),
    }
    reference = cases["hand_written"](currents, weights)
    gradient_difference = float(tf.reduce_max(tf.abs(cases["ste"](currents, weights) - reference)))
    samples = alternate(
        {name: (lambda f=f: f(currents, weights).numpy()) for name, f in cases.items()},
        rounds=rounds,
        inner=inner,
        warmup=warmup,
    )
    results = summarize(samples, "hand_written")

    mem_currents = rng.normal((batch, memory_steps, memory_units), mean=0.5)
    layers = {
        "bool": ste.spiking.LIF(beta=BETA, reset="zero"),
        "float": keras.layers.RNN(_FloatSpikeLIFCell(BETA, reset="zero"), return_sequences=True),
        "none": ste.spiking.LIF(beta=BETA, reset="none"),
        "hand_written": tf.function(_hand_written),
    }
    kept = {name: _kept_bytes(layer, mem_currents) for name, layer in layers.items()}
    spike_cost_float = kept["float"] - kept["none"]
    peers = spiking_peers.run(
        peer_smoke,
        snntorch_venv,
        spikingjelly_venv,
        rounds=peer_rounds,
        warmup=1 if peer_smoke else 3,
        workloads=("dense",) if peer_smoke else tuple(spiking_peers.WORKLOADS),  # smoke: two short processes
    )
    return {
        "peers": peers,
        "steps": steps,
        "batch": batch,
        "units": units,
        "rounds": rounds,
        "inner": inner,
        "results": results,
        "max_gradient_difference": gradient_difference,
        "memory": {
            "steps": memory_steps,
            "units": memory_units,
            "kept_bytes": kept,
            "float_tensor_bytes": 4 * batch * memory_steps * memory_units,
            "total_ratio": kept["bool"] / kept["float"] if kept["float"] > 0 else None,
            "spike_ratio": (kept["bool"] - kept["none"]) / spike_cost_float if spike_cost_float > 0 else None,
        },
    }
