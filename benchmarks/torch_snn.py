"""The spiking peer networks in snnTorch and SpikingJelly: run inside a venv with torch (never imports ste or TF).

    /path/to/venv/bin/python benchmarks/torch_snn.py '{"framework": "snntorch", "workload": "dense", ...}'

Prints one ``RESULT {json}`` line: the median seconds per training step over ``rounds`` timed steps (after
``warmup`` untimed ones) and the step's peak memory: the highest running sum of torch's CPU allocations minus frees
during one step, from ``torch.profiler``'s raw allocation records (torch keeps no allocator statistics on CPU). The
growth of the resident set's high-water mark is recorded too (``rss_peak_bytes``); after warm-up it is ~0, because
the allocator reuses pages it already holds.
The workloads are those of benchmarks/spiking_peers.py (its docstring defines them).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any


def _status(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def resident_peak(step: Any) -> int:
    """Bytes by which the resident set grew at its highest during ``step()`` (also used by the ste side)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # reset the resident-set high-water mark
    before = _status("VmRSS")
    step()
    return _status("VmHWM") - before


def _allocator_peak(step: Any) -> int:
    """The highest running sum of the bytes torch's CPU allocator handed out minus those freed during ``step()``.

    Read from the profiler's raw allocation records (one ``[memory]`` event per allocation or free, in time order).
    The per-op ``cpu_memory_usage`` of ``prof.events()`` is not used: it counts an allocation once for every op that
    encloses it, so nested ops (``aten::linear`` → ``aten::addmm``) double it.
    """
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    records = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    records.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for record in records:
        running += record.nbytes()
        peak = max(peak, running)
    return int(peak)


def _snntorch(workload: str, c: dict[str, Any]) -> tuple[Any, Any]:
    import snntorch as snn
    import torch

    def lif() -> Any:
        return snn.Leaky(beta=0.9)  # atan surrogate, reset by subtraction (snnTorch's defaults)

    if workload in ("dense", "onb"):
        sizes = (
            [(c["inputs"], c["hidden"]), (c["hidden"], c["outputs"])]
            if workload == "dense"
            else [(c["inputs"], c["hidden"])]
        )
        layers = torch.nn.ModuleList([torch.nn.Linear(a, b) for a, b in sizes])
        neurons = torch.nn.ModuleList([lif() for _ in sizes])

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layers, self.neurons = layers, neurons

            def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [T, B, F]
                mems = [n.init_leaky() for n in self.neurons]
                out = []
                for t in range(x.shape[0]):
                    h = x[t]
                    for i, (fc, n) in enumerate(zip(self.layers, self.neurons)):
                        h, mems[i] = n(fc(h), mems[i])
                    out.append(h)
                return torch.stack(out)

        return Net(), None

    class ConvNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = torch.nn.Conv2d(c["channels"], c["filters1"], 3, padding=1)
            self.c2 = torch.nn.Conv2d(c["filters1"], c["filters2"], 3, padding=1)
            self.fc = torch.nn.Linear(c["filters2"] * c["size"] ** 2, c["outputs"])
            self.l1, self.l2, self.l3 = lif(), lif(), lif()

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [T, B, C, H, W]
            m1, m2, m3 = self.l1.init_leaky(), self.l2.init_leaky(), self.l3.init_leaky()
            out = []
            for t in range(x.shape[0]):
                s1, m1 = self.l1(self.c1(x[t]), m1)
                s2, m2 = self.l2(self.c2(s1), m2)
                s3, m3 = self.l3(self.fc(s2.flatten(1)), m3)
                out.append(s3)
            return torch.stack(out)

    return ConvNet(), None


def _spikingjelly(workload: str, c: dict[str, Any]) -> tuple[Any, Any]:
    import torch
    from spikingjelly.activation_based import functional, layer, neuron, surrogate

    def lif() -> Any:  # β = 1 − 1/τ = 0.9 without input decay; soft reset (subtraction), detached; multi-step
        return neuron.LIFNode(
            tau=10.0,
            decay_input=False,
            v_reset=None,
            detach_reset=True,
            surrogate_function=surrogate.ATan(),
            step_mode="m",
        )

    if workload == "dense":
        net = torch.nn.Sequential(
            layer.Linear(c["inputs"], c["hidden"], step_mode="m"),
            lif(),
            layer.Linear(c["hidden"], c["outputs"], step_mode="m"),
            lif(),
        )
    elif workload == "onb":
        net = torch.nn.Sequential(layer.Linear(c["inputs"], c["hidden"], step_mode="m"), lif())
    else:
        net = torch.nn.Sequential(
            layer.Conv2d(c["channels"], c["filters1"], 3, padding=1, step_mode="m"),
            lif(),
            layer.Conv2d(c["filters1"], c["filters2"], 3, padding=1, step_mode="m"),
            lif(),
            layer.Flatten(step_mode="m"),
            layer.Linear(c["filters2"] * c["size"] ** 2, c["outputs"], step_mode="m"),
            lif(),
        )
    return net, functional.reset_net


def main(config: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(config["threads"])
    torch.set_num_interop_threads(config["threads"])
    torch.manual_seed(0)
    workload = config["workload"]
    build = _snntorch if config["framework"] == "snntorch" else _spikingjelly
    net, reset = build(workload, config)
    steps, batch = config["steps"], config["batch"]
    if workload == "conv":
        x = (torch.rand(steps, batch, config["channels"], config["size"], config["size"]) < 0.3).float()
    else:
        x = (torch.rand(steps, batch, config["inputs"]) < 0.3).float()
    y = torch.randint(0, config["outputs"], (batch,))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3) if workload != "onb" else None

    def step() -> None:
        if reset is not None:
            reset(net)
        spikes = net(x)
        if optimizer is None:  # the Open Neuromorphic benchmark: forward + backward of the summed output
            spikes.sum().backward()
            for p in net.parameters():
                p.grad = None
            return
        loss = torch.nn.functional.cross_entropy(spikes.sum(0), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(config["warmup"]):
        step()
    peak = resident_peak(step)
    allocator_peak = _allocator_peak(step)
    times = []
    for _ in range(config["rounds"]):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {
        "median_s": statistics.median(times),
        "peak_bytes": allocator_peak,
        "rss_peak_bytes": peak,
        "memory_method": "torch's CPU allocations during one step, from torch.profiler's raw allocation records "
        "(profile_memory=True, one [memory] event per allocation or free): the highest running sum; "
        "rss_peak_bytes: resident-set high-water mark growth",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
