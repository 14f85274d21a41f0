"""The spiking peer comparison in alternating rounds: ``python -m benchmarks.spiking_rounds WORKLOAD ROUNDS VENV``.

Each round runs ste's fused network, SpikingJelly, ste's unfused network and snnTorch in turn, each in a fresh
process (``benchmarks.spiking_peers``' own measurement); it prints every round and the medians. On a machine whose
times vary from process to process (this VM: ±30%), the medians of a few rounds are steadier than one
``benchmarks.run`` pass, which brackets the peers with one ste run before and one after. ``VENV`` has torch,
snnTorch and SpikingJelly.
"""

from __future__ import annotations

import json
import statistics
import sys

from . import spiking_peers


def main(workload: str, rounds: int, venv: str) -> dict[str, float]:
    config = {**spiking_peers.WORKLOADS[workload], "workload": workload, "rounds": 15, "warmup": 3, "threads": 2}
    times: dict[str, list[float]] = {"ste": [], "spikingjelly": [], "ste_unfused": [], "snntorch": []}
    if workload == "dense":
        times["ste_fuse"] = []  # the plain Keras stack through ste.spiking.fuse
    for index in range(rounds):
        times["ste"].append(spiking_peers._ste({**config, "fused": True})["median_s"] * 1e3)
        times["spikingjelly"].append(spiking_peers._peer(venv, "spikingjelly", config)["median_s"] * 1e3)
        times["ste_unfused"].append(spiking_peers._ste(config)["median_s"] * 1e3)
        times["snntorch"].append(spiking_peers._peer(venv, "snntorch", config)["median_s"] * 1e3)
        if "ste_fuse" in times:
            times["ste_fuse"].append(spiking_peers._ste({**config, "fuse": True})["median_s"] * 1e3)
        print(index, json.dumps({name: round(values[-1], 1) for name, values in times.items()}), flush=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print("medians (ms)", json.dumps({name: round(value, 1) for name, value in medians.items()}), flush=True)
    return medians


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
