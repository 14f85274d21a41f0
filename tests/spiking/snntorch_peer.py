"""snnTorch's side of the NIR comparison: run inside a venv with snnTorch 1.0, torch, nir and nirtorch (never ste).

    /path/to/snntorch-venv/bin/python tests/spiking/snntorch_peer.py export GRAPH.nir INPUT.npy SPIKES.npy
    /path/to/snntorch-venv/bin/python tests/spiking/snntorch_peer.py import GRAPH.nir INPUT.npy SPIKES.npy

``export``: builds Linear 6→8, Leaky(β = 0.875, reset to zero), Linear 8→4, Leaky(β = 0.75) with weights that are
multiples of 1/8 (so both frameworks sum them exactly), writes snnTorch's ``export_to_nir`` graph to GRAPH.nir and
the output spikes for INPUT.npy ([batch, time, 6], time second as in ste) to SPIKES.npy. ``import``: loads GRAPH.nir
with ``import_from_nir`` and writes its output spikes for INPUT.npy. Started by tests/reliability/test_processes.py.
"""

from __future__ import annotations

import sys

import nir
import numpy as np
import snntorch as snn
import torch
from snntorch import utils
from snntorch.export_nir import export_to_nir
from snntorch.import_nir import import_from_nir


def _network() -> torch.nn.Module:
    rng = np.random.default_rng(11)
    fc1, fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 4)
    for fc in (fc1, fc2):
        fc.weight.data = torch.tensor(rng.integers(-8, 9, fc.weight.shape) / 8, dtype=torch.float32)
        fc.bias.data = torch.tensor(rng.integers(-2, 3, fc.bias.shape) / 8, dtype=torch.float32)
    lif1 = snn.Leaky(beta=torch.full((8,), 0.875), threshold=torch.ones(8), reset_mechanism="zero", init_hidden=True)
    lif2 = snn.Leaky(beta=torch.full((4,), 0.75), threshold=torch.ones(4), reset_mechanism="zero", init_hidden=True)
    return torch.nn.Sequential(fc1, lif1, fc2, lif2)


def _run(net: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    utils.reset(net)
    inputs = torch.tensor(x, dtype=torch.float32)
    with torch.no_grad():
        steps = [net(inputs[:, t]) for t in range(inputs.shape[1])]
    spikes = [s[0] if isinstance(s, tuple) else s for s in steps]
    return torch.stack(spikes, dim=1).numpy()


def main(argv: list[str]) -> None:
    action, graph_path, input_path, spikes_path = argv
    x = np.load(input_path)
    if action == "export":
        net = _network()
        nir.write(graph_path, export_to_nir(net, torch.zeros(6)))
    else:
        net = import_from_nir(nir.read(graph_path))
    np.save(spikes_path, _run(net, x))


if __name__ == "__main__":
    main(sys.argv[1:])
