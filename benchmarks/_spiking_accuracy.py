"""One side of ``benchmarks.accuracy``'s spiking rows (``spiking_mlp``, ``spiking_cnn``): ste, or snnTorch in its own
venv, in a fresh process.

    python benchmarks/_spiking_accuracy.py '{"row": "spiking_mlp", "side": "snntorch", "data": "fashion.npz", ...}'

Only the standard library is imported at the top, so that snnTorch's venv (torch, snnTorch and numpy; no TensorFlow,
no ste) runs it too. Both sides build the same network from :data:`NETS` in the style of snnTorch's tutorials 5
(``spiking_mlp``: 784 → hidden → 10) and 6 (``spiking_cnn``: conv 5×5, max-pool 2, LIF; conv 5×5, max-pool 2, LIF;
dense, LIF). Direct coding: the image is the input current at every step (the tutorials' form); the output is read
as a rate: the loss is the cross-entropy of the output spikes at each step, averaged over the steps (snnTorch's
``ce_rate_loss``, ste's ``RateCrossEntropy``), the prediction is the output neuron with the most spikes.

Every neuron is snnTorch's ``Leaky`` / ste's ``LIF``: ``U[t] = β·U[t−1] + I[t] − ϑ·S[t−1]`` (reset by subtraction,
the reset term detached), ``S[t] = Θ(U[t] − ϑ)`` with ``Θ(x) = 1[x > 0]``, ϑ = 1, and the same surrogate
derivative (snnTorch's ``atan(alpha=2)``: ``(α/2)/(1 + (π·α·x/2)²)``, or ``fast_sigmoid(slope=25)``:
``1/(1 + k·|x|)²``; ste's registry entries of the same names compute the same formulas).

The sides start from the same weights: drawn here with numpy from the seed, as torch's default initialization
draws them (``U(−1/√fan_in, 1/√fan_in)`` for weights and biases), and laid out for each framework. They see the same
batches in the same order (a numpy permutation per epoch from the seed) and use Adam with the same learning rate,
β₁ = 0.9, β₂ = 0.999, ε = 1e-8. Before training each side reports, for the untrained network on the first test
images (``initial``), the loss, the output spike count and the norm of the loss's gradient with respect to each
weight and bias, in the network's order (the gradient goes through every layer's surrogate): equal figures show that
the two compute the same function, forward and backward.

ste's side is written as docs/spiking.md tells a user: a ``keras.Sequential`` of ``Dense`` /
``ste.spiking.TimeDistributed(Conv2D, MaxPooling2D)`` and ``ste.spiking.LIF`` layers, handed to
``ste.spiking.fuse`` (every ``Dense`` → ``LIF`` pair becomes one ``ste.spiking.Fused`` loop of ``SpikingDense``
layers, compiled with XLA; the convolutions stay ``TimeDistributed``, folded over time, because the fused
``SpikingConv2D`` offers no pooling), trained with ``model.fit``. snnTorch's side is its tutorials' loop over the
steps, with ``snn.Leaky``, ``ce_rate_loss`` and ``torch.optim.Adam``.

Under the parent's lockstep (``qat.WAIT`` / ``go`` / ``qat.DONE``) each side trains and evaluates an epoch while the
other waits, in an order that reverses every epoch. Step time: one training step (ste: ``fit``'s ``train_function``
from ``on_train_batch_begin`` to ``on_train_batch_end``; snnTorch: forward, loss, backward and the optimizer step),
the median over every epoch's steps but the first ``WARMUP``, so that the epochs of both orders count. Peak memory,
the same way on both sides, after training: the highest running sum of the bytes requested minus those freed during
one training step, from each framework's profiler (benchmarks/_allocations.py for TensorFlow,
``torch_snn._allocator_peak`` for torch, as the spiking speed benchmark measures it); the highest of three steps.
Prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from typing import Any

from _allocator import use_bfc  # this directory is on sys.path when run as a script

use_bfc()  # before TensorFlow is imported: the profiler's allocation records need the BFC allocator

from qat import DONE, _barrier  # noqa: E402  (qat.py imports only the standard library at the top)

BATCH = 128
#: The two networks. ``surrogate`` is written the same way in both libraries (snnTorch's factory, ste's registry).
NETS: dict[str, dict[str, Any]] = {
    "spiking_mlp": {"steps": 25, "beta": 0.95, "hidden": 256, "surrogate": ("atan", "alpha", 2.0)},
    "spiking_cnn": {
        "steps": 10,
        "beta": 0.5,
        "filters": (8, 16),
        "kernel": 5,
        "surrogate": ("fast_sigmoid", "slope", 25.0),
    },
}
PROBE = 256  # test images for the initial-function check
WARMUP = 5  # the first training steps, left out of the step time


def describe(row: str) -> str:
    """The network in words (for the results page)."""
    net = NETS[row]
    name, parameter, value = net["surrogate"]
    neuron = f"LIF β = {net['beta']}, ϑ = 1, reset by subtraction, {name}({parameter}={value:g})"
    if row == "spiking_mlp":
        return f"784 → Dense {net['hidden']} → LIF → Dense 10 → LIF; {net['steps']} steps, direct coding; {neuron}"
    f1, f2 = net["filters"]
    k = net["kernel"]
    return (
        f"Conv {k}×{k} ({f1}) → max-pool 2 → LIF → Conv {k}×{k} ({f2}) → max-pool 2 → LIF → Dense 10 → LIF; "
        f"{net['steps']} steps, direct coding; {neuron}"
    )


def initial_weights(row: str, seed: int) -> list[Any]:
    """torch-layout initial weights (Linear ``[out, in]``, Conv2d ``[out, in, kh, kw]``, then each bias), drawn as
    torch's default initialization draws them: ``U(−1/√fan_in, 1/√fan_in)``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    net = NETS[row]
    if row == "spiking_mlp":
        shapes = [(net["hidden"], 784), (10, net["hidden"])]
    else:
        (f1, f2), k = net["filters"], net["kernel"]
        side = ((28 - k + 1) // 2 - k + 1) // 2
        shapes = [(f1, 1, k, k), (f2, f1, k, k), (10, f2 * side * side)]
    weights = []
    for shape in shapes:
        bound = 1 / math.sqrt(int(np.prod(shape[1:])))
        weights.append(rng.uniform(-bound, bound, shape).astype("float32"))
        weights.append(rng.uniform(-bound, bound, shape[:1]).astype("float32"))
    return weights


def _order(seed: int, epoch: int, n: int) -> Any:
    import numpy as np

    return np.random.default_rng([seed, epoch + 1]).permutation(n)


def _load(config: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    import numpy as np

    data = np.load(config["data"])
    x_train = data["x_train"].astype("float32") / 255.0
    x_test = data["x_test"].astype("float32") / 255.0
    return x_train, data["y_train"].astype("int64"), x_test, data["y_test"].astype("int64")


def _ste_model(row: str, weights: list[Any]) -> tuple[Any, str]:
    import keras

    import ste

    net = NETS[row]
    steps, L = net["steps"], keras.layers
    name, parameter, value = net["surrogate"]

    def lif() -> Any:
        return ste.spiking.LIF(
            beta=net["beta"], threshold=1.0, reset="subtract", surrogate=f"{name}({parameter}={value})"
        )

    if row == "spiking_mlp":  # [batch, 784] -> the image at every step -> [batch, steps, 784]
        layers = [keras.Input((784,)), L.RepeatVector(steps), L.Dense(net["hidden"]), lif(), L.Dense(10), lif()]
        kernels = [w.T for w in weights[0::2]]
    else:  # [batch, 28, 28, 1] -> the image at every step -> [batch, steps, 28, 28, 1]
        (f1, f2), k = net["filters"], net["kernel"]
        td = ste.spiking.TimeDistributed
        layers = [
            keras.Input((28, 28, 1)),
            L.Flatten(),
            L.RepeatVector(steps),
            L.Reshape((steps, 28, 28, 1)),
            td(L.Conv2D(f1, k)),
            td(L.MaxPooling2D(2)),
            lif(),
            td(L.Conv2D(f2, k)),
            td(L.MaxPooling2D(2)),
            lif(),
            td(L.Flatten()),
            L.Dense(10),
            lif(),
        ]
        side = math.isqrt(weights[4].shape[1] // f2)
        dense = weights[4].reshape(10, f2, side, side).transpose(2, 3, 1, 0).reshape(-1, 10)  # CHW rows -> HWC
        kernels = [weights[0].transpose(2, 3, 1, 0), weights[2].transpose(2, 3, 1, 0), dense]
    plain = keras.Sequential(layers, name=row)
    with_weights = [layer for layer in plain.layers if layer.weights]
    for layer, kernel, bias in zip(with_weights, kernels, weights[1::2]):
        layer.set_weights([kernel, bias])
    fused = ste.spiking.fuse(plain)  # Dense -> LIF pairs as ste.spiking.Fused loops of SpikingDense (XLA)
    kinds = list(dict.fromkeys(type(layer).__name__ for layer in fused.layers))  # in the model's order
    return fused, f"ste.spiking.fuse: {', '.join(kinds)}"


def _ste_side(config: dict[str, Any]) -> dict[str, Any]:
    import keras
    import numpy as np
    import tensorflow as tf
    from _accuracy_worker import _epoch
    from _allocations import requested_peak

    import ste

    row, seed = config["row"], config["seed"]
    x_train, y_train, x_test, y_test = _load(config)
    if row == "spiking_cnn":
        x_train, x_test = x_train[..., None], x_test[..., None]
    else:
        x_train, x_test = x_train.reshape(-1, 784), x_test.reshape(-1, 784)
    keras.utils.set_random_seed(seed)
    model, form = _ste_model(row, initial_weights(row, seed))
    loss = ste.spiking.RateCrossEntropy()
    model.compile(keras.optimizers.Adam(config["learning_rate"], epsilon=1e-8), loss=loss)

    def predict(x: Any) -> Any:
        return ste.spiking.spike_count(model.predict(x, batch_size=1000, verbose=0)).numpy()

    with tf.GradientTape() as tape:
        probe = model(x_test[:PROBE], training=True)
        probe_loss = loss(y_test[:PROBE], probe)
    gradients = tape.gradient(probe_loss, model.trainable_weights)
    initial = {
        "loss": float(probe_loss),
        "output_spikes": int(np.sum(probe)),
        "gradient_norms": [float(tf.norm(g)) for g in gradients],
    }
    lockstep = config.get("lockstep", False)
    curve, steps = [], []
    for epoch in range(config["epochs"]):
        order = _order(seed, epoch, len(y_train))
        _barrier(lockstep)
        started = time.perf_counter()
        times = _epoch(keras, model, x_train[order], y_train[order], shuffle=False)
        seconds = time.perf_counter() - started
        steps.append(times)
        accuracy = float(np.mean(np.argmax(predict(x_test), axis=1) == y_test))
        curve.append({"epoch": epoch + 1, "test_accuracy": accuracy, "seconds": seconds})
        if lockstep:
            print(DONE, flush=True)
    _barrier(lockstep)  # the memory measurement runs with every side out of its timed epochs
    xb, yb = x_train[:BATCH], y_train[:BATCH]
    peak = max(requested_peak(lambda: model.train_on_batch(xb, yb)) for _ in range(3))
    return {
        "versions": f"ste {ste.__version__}, Keras {keras.__version__}, TensorFlow {tf.__version__}",
        "form": form,
        "parameters": int(model.count_params()),
        "initial": initial,
        "curve": curve,
        "steps": steps,
        "peak_bytes": int(peak),
    }


def _snntorch_side(config: dict[str, Any]) -> dict[str, Any]:
    # torch's OpenMP threads spin while they wait for work; on a machine shared with other jobs that made its steps
    # 5-10x slower (measured at a load of 20 on 2 cores), so they sleep instead (before torch loads libgomp)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numpy as np
    import snntorch as snn
    import snntorch.functional as SF
    import torch
    from snntorch import surrogate
    from torch_snn import _allocator_peak

    row, seed = config["row"], config["seed"]
    net = NETS[row]
    torch.manual_seed(seed)
    x_train, y_train, x_test, y_test = _load(config)
    if row == "spiking_cnn":
        x_train, x_test = x_train[:, None], x_test[:, None]
    else:
        x_train, x_test = x_train.reshape(-1, 784), x_test.reshape(-1, 784)
    name, parameter, value = net["surrogate"]
    spike_grad = getattr(surrogate, name)(**{parameter: value})

    def lif() -> Any:
        return snn.Leaky(beta=net["beta"], threshold=1.0, spike_grad=spike_grad, reset_mechanism="subtract")

    class MLP(torch.nn.Module):  # snnTorch's tutorial 5
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.lif1 = torch.nn.Linear(784, net["hidden"]), lif()
            self.fc2, self.lif2 = torch.nn.Linear(net["hidden"], 10), lif()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mem1, mem2 = self.lif1.init_leaky(), self.lif2.init_leaky()
            out = []
            for _ in range(net["steps"]):
                spk1, mem1 = self.lif1(self.fc1(x), mem1)
                spk2, mem2 = self.lif2(self.fc2(spk1), mem2)
                out.append(spk2)
            return torch.stack(out)  # [steps, batch, 10]

    class CNN(torch.nn.Module):  # snnTorch's tutorial 6
        def __init__(self) -> None:
            super().__init__()
            (f1, f2), k = net["filters"], net["kernel"]
            self.conv1, self.lif1 = torch.nn.Conv2d(1, f1, k), lif()
            self.conv2, self.lif2 = torch.nn.Conv2d(f1, f2, k), lif()
            side = ((28 - k + 1) // 2 - k + 1) // 2
            self.fc, self.lif3 = torch.nn.Linear(f2 * side * side, 10), lif()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mem1, mem2, mem3 = self.lif1.init_leaky(), self.lif2.init_leaky(), self.lif3.init_leaky()
            out = []
            for _ in range(net["steps"]):
                spk1, mem1 = self.lif1(torch.nn.functional.max_pool2d(self.conv1(x), 2), mem1)
                spk2, mem2 = self.lif2(torch.nn.functional.max_pool2d(self.conv2(spk1), 2), mem2)
                spk3, mem3 = self.lif3(self.fc(spk2.flatten(1)), mem3)
                out.append(spk3)
            return torch.stack(out)

    model = MLP() if row == "spiking_mlp" else CNN()
    with torch.no_grad():
        for parameter_, array in zip(model.parameters(), initial_weights(row, seed)):
            parameter_.copy_(torch.from_numpy(array))
    loss_fn = SF.ce_rate_loss()
    optimizer = torch.optim.Adam(model.parameters(), lr=config["learning_rate"], betas=(0.9, 0.999), eps=1e-8)
    x_train_t, y_train_t = torch.from_numpy(x_train), torch.from_numpy(y_train)
    x_test_t, y_test_t = torch.from_numpy(x_test), torch.from_numpy(y_test)

    def count(x: torch.Tensor) -> Any:
        with torch.no_grad():
            return torch.cat([model(x[i : i + 1000]).sum(0) for i in range(0, len(x), 1000)]).numpy()

    def step(xb: torch.Tensor, yb: torch.Tensor) -> None:
        loss = loss_fn(model(xb), yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    probe = model(x_test_t[:PROBE])
    probe_loss = loss_fn(probe, y_test_t[:PROBE])
    probe_loss.backward()
    initial = {
        "loss": float(probe_loss),
        "output_spikes": int(probe.sum()),
        "gradient_norms": [float(p.grad.norm()) for p in model.parameters()],
    }
    optimizer.zero_grad(set_to_none=True)
    lockstep = config.get("lockstep", False)
    curve, steps = [], []
    for epoch in range(config["epochs"]):
        order = torch.from_numpy(_order(seed, epoch, len(y_train)))
        x_epoch, y_epoch = x_train_t[order], y_train_t[order]
        _barrier(lockstep)
        started = time.perf_counter()
        times = []
        for i in range(0, len(y_epoch), BATCH):
            xb, yb = x_epoch[i : i + BATCH], y_epoch[i : i + BATCH]
            begin = time.perf_counter()
            step(xb, yb)
            times.append(time.perf_counter() - begin)
        seconds = time.perf_counter() - started
        steps.append(times)
        accuracy = float(np.mean(np.argmax(count(x_test_t), axis=1) == y_test))
        curve.append({"epoch": epoch + 1, "test_accuracy": accuracy, "seconds": seconds})
        if lockstep:
            print(DONE, flush=True)
    _barrier(lockstep)
    xb, yb = x_train_t[:BATCH], y_train_t[:BATCH]
    peak = max(_allocator_peak(lambda: step(xb, yb)) for _ in range(3))
    return {
        "versions": f"snnTorch {snn.__version__}, torch {torch.__version__}",
        "form": "snn.Leaky in a Python loop over the steps (snnTorch's tutorials)",
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "initial": initial,
        "curve": curve,
        "steps": steps,
        "peak_bytes": int(peak),
    }


def main(config: dict[str, Any]) -> dict[str, Any]:
    result = _snntorch_side(config) if config["side"] == "snntorch" else _ste_side(config)
    steps = result.pop("steps")
    flat = [t for epoch_times in steps for t in epoch_times]
    flat = flat[WARMUP:] or flat  # tracing and XLA compilation (ste), the allocator's first requests (torch)
    return {
        "row": config["row"],
        "side": config["side"],
        "network": describe(config["row"]),
        **result,
        "test_accuracy": result["curve"][-1]["test_accuracy"],
        "median_step_s": statistics.median(flat),
        "step_samples": len(flat),
        "memory_method": "the highest running sum of the bytes requested minus those freed during one training "
        "step, from the framework's profiler (the highest of three steps after training)",
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
