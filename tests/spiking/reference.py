"""An independent numpy model of the spiking neurons: the equations forward, and BPTT written out by hand.

Nothing here uses ste or TensorFlow. One recursion covers LIF (scale = 0, rho = 0), IF (beta = 1) and ALIF:

    b[t] = rho·b[t−1] + (1 − rho)·S[t−1]          A[t] = theta + scale·b[t]
    U[t] = beta·U[t−1] + I[t] − A[t−1]·S[t−1]      (reset "subtract")
         = beta·(1 − S[t−1])·U[t−1] + I[t]         (reset "zero")
         = beta·U[t−1] + I[t]                      (reset "none")
    S[t] = 1[U[t] − A[t] > 0],   backward through S: d(U[t] − A[t]) (the surrogate)

with U[−1] = S[−1] = b[−1] = 0. The loss is L = Σ_t Σ G[t]·S[t] + Σ H·U[T−1]; ``backward`` returns dL/dI and the
derivatives with respect to beta, theta and the surrogate's parameter.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Surrogate:
    """d(x) and ∂P/∂a of the primitive P(x; a), for the entries the tests use."""

    name: str
    a: float

    def d(self, x: np.ndarray) -> np.ndarray:
        if self.name == "atan":  # P = arctan(π·a·x/2)/π + 1/2
            return (self.a / 2) / (1 + (np.pi * self.a * x / 2) ** 2)
        if self.name == "fast_sigmoid":  # P = x/(1 + a·|x|)
            return 1 / (1 + self.a * np.abs(x)) ** 2
        if self.name == "boxcar":  # width a
            return (np.abs(x) < self.a / 2) / self.a
        raise KeyError(self.name)

    def dp_da(self, x: np.ndarray) -> np.ndarray:
        if self.name == "atan":
            return (x / 2) / (1 + (np.pi * self.a * x / 2) ** 2)
        if self.name == "fast_sigmoid":  # d/da [x/(1 + a|x|)] = −x·|x|/(1 + a|x|)²
            return -x * np.abs(x) / (1 + self.a * np.abs(x)) ** 2
        raise KeyError(self.name)


@dataclass
class Neuron:
    beta: float = 0.9
    theta: float = 1.0
    reset: str = "subtract"
    detach: bool = True
    rho: float = 0.0
    scale: float = 0.0
    surrogate: Surrogate = Surrogate("atan", 2.0)


def forward(n: Neuron, current: np.ndarray) -> dict[str, np.ndarray]:
    """current: [batch, time, units] -> U, S, b, A (each [time, batch, units])."""
    steps = current.shape[1]
    shape = (current.shape[0], current.shape[2])
    u_prev, s_prev, b_prev = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    out: dict[str, list[np.ndarray]] = {"U": [], "S": [], "b": [], "A": []}
    for t in range(steps):
        b = n.rho * b_prev + (1 - n.rho) * s_prev
        a_prev = n.theta + n.scale * b_prev
        if n.reset == "subtract":
            u = n.beta * u_prev + current[:, t] - a_prev * s_prev
        elif n.reset == "zero":
            u = n.beta * (1 - s_prev) * u_prev + current[:, t]
        else:
            u = n.beta * u_prev + current[:, t]
        a = n.theta + n.scale * b
        s = (u - a > 0).astype(np.float64)
        for key, value in zip("USbA", (u, s, b, a)):
            out[key].append(value)
        u_prev, s_prev, b_prev = u, s, b
    return {key: np.stack(value) for key, value in out.items()}


def backward(n: Neuron, current: np.ndarray, g_spikes: np.ndarray, h_membrane: np.ndarray) -> dict[str, np.ndarray]:
    """Reverse-mode derivatives of L = Σ G[t]·S[t] + Σ H·U[T−1]; g_spikes is [batch, time, units]."""
    f = forward(n, current)
    steps = current.shape[1]
    zeros = np.zeros(f["U"][0].shape)
    g_u = [zeros.copy() for _ in range(steps)]
    g_s = [g_spikes[:, t].astype(np.float64).copy() for t in range(steps)]
    g_b = [zeros.copy() for _ in range(steps)]
    g_u[-1] += h_membrane
    g_current = np.zeros_like(current, dtype=np.float64)
    g_beta = g_theta = g_a = 0.0
    for t in reversed(range(steps)):
        x = f["U"][t] - f["A"][t]
        gx = g_s[t] * n.surrogate.d(x)
        if n.surrogate.name != "boxcar":
            g_a += float(np.sum(g_s[t] * n.surrogate.dp_da(x)))
        g_u[t] += gx
        g_theta -= float(np.sum(gx))  # A[t] = theta + scale·b[t]
        g_b[t] -= n.scale * gx
        # U[t] from U[t−1], S[t−1], b[t−1]
        g_current[:, t] = g_u[t]
        u_prev = f["U"][t - 1] if t else zeros
        s_prev = f["S"][t - 1] if t else zeros
        b_prev = f["b"][t - 1] if t else zeros
        if n.reset == "subtract":
            g_beta += float(np.sum(g_u[t] * u_prev))
            g_prev_u = n.beta * g_u[t]
            g_a_prev = -g_u[t] * s_prev  # ∂U/∂A[t−1]
            g_theta += float(np.sum(g_a_prev))
            g_prev_b = n.scale * g_a_prev
            g_prev_s = np.zeros_like(zeros) if n.detach else -g_u[t] * (n.theta + n.scale * b_prev)
        elif n.reset == "zero":
            g_beta += float(np.sum(g_u[t] * (1 - s_prev) * u_prev))
            g_prev_u = n.beta * (1 - s_prev) * g_u[t]
            g_prev_b = np.zeros_like(zeros)
            g_prev_s = np.zeros_like(zeros) if n.detach else -g_u[t] * n.beta * u_prev
        else:
            g_beta += float(np.sum(g_u[t] * u_prev))
            g_prev_u = n.beta * g_u[t]
            g_prev_b = np.zeros_like(zeros)
            g_prev_s = np.zeros_like(zeros)
        # b[t] = rho·b[t−1] + (1 − rho)·S[t−1] (never detached)
        g_prev_b = g_prev_b + n.rho * g_b[t]
        g_prev_s = g_prev_s + (1 - n.rho) * g_b[t] if n.scale else g_prev_s
        if t:
            g_u[t - 1] += g_prev_u
            g_s[t - 1] += g_prev_s
            g_b[t - 1] += g_prev_b
    return {
        "current": g_current,
        "beta": np.float64(g_beta),
        "threshold": np.float64(g_theta),
        "alpha": np.float64(g_a),
    }


# -- NIR's equations, simulated by Euler's rule (the reference for ste.spiking.from_nir) ---------------------------


def _conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, stride: Any, padding: Any, dilation: Any, groups: int):
    """PyTorch's convolution (cross-correlation), channels first: x [batch, C_in, *spatial]."""
    rank = weight.ndim - 2
    stride, dilation = (np.broadcast_to(np.atleast_1d(v), (rank,)).astype(int) for v in (stride, dilation))
    pads = np.broadcast_to(np.atleast_1d(padding), (rank,)).astype(int)
    x = np.pad(x, [(0, 0), (0, 0), *[(p, p) for p in pads]])
    kernel = weight.shape[2:]
    out_shape = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(x.shape[2:], kernel, stride, dilation)]
    c_in, c_out = weight.shape[1], weight.shape[0]
    out = np.zeros((x.shape[0], c_out, *out_shape))
    per_group = c_out // groups
    for o in range(c_out):
        g = o // per_group
        for position in np.ndindex(*out_shape):
            window = tuple(
                slice(p * s, p * s + d * (k - 1) + 1, d) for p, s, d, k in zip(position, stride, dilation, kernel)
            )
            patch = x[(slice(None), slice(g * c_in, (g + 1) * c_in), *window)]
            out[(slice(None), o, *position)] = np.sum(patch * weight[o], axis=tuple(range(1, rank + 2))) + bias[o]
    return out


def _pool(x: np.ndarray, kernel: Any, stride: Any, mean: bool) -> np.ndarray:
    kh, kw = (int(k) for k in np.broadcast_to(np.atleast_1d(kernel), (2,)))
    sh, sw = (int(s) for s in np.broadcast_to(np.atleast_1d(stride), (2,)))
    oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    out = np.zeros((*x.shape[:2], oh, ow))
    for i in range(oh):
        for j in range(ow):
            window = x[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw]
            out[:, :, i, j] = window.mean(axis=(2, 3)) if mean else window.sum(axis=(2, 3))
    return out


def _at_rest(node: Any, shape: tuple[int, ...]) -> np.ndarray:
    """What a node in a loop outputs before the first step (its input all zero): an Affine's bias, else 0."""
    bias = getattr(node, "bias", None) if type(node).__name__ == "Affine" else None
    return np.broadcast_to(np.asarray(bias if bias is not None else 0.0, np.float64), shape)


def _inlined(graph: Any) -> Any:
    """The graph with every subgraph node replaced by its nodes (named "subgraph.node"): an edge into a subgraph
    goes to what its Input feeds, an edge out of it leaves from what feeds its Output."""
    nodes: dict[str, Any] = {}
    edges = [tuple(edge) for edge in graph.edges]
    for name, node in graph.nodes.items():
        if type(node).__name__ != "NIRGraph":
            nodes[name] = node
            continue
        inner = _inlined(node)
        ends = {n for n, v in inner.nodes.items() if type(v).__name__ in ("Input", "Output")}
        nodes.update({f"{name}.{n}": v for n, v in inner.nodes.items() if n not in ends})
        entry = [f"{name}.{t}" for s, t in inner.edges if s in ends]
        exits = [f"{name}.{s}" for s, t in inner.edges if t in ends]
        edges = [(a, b) for s, t in edges for a in (exits if s == name else [s]) for b in (entry if t == name else [t])]
        edges += [(f"{name}.{s}", f"{name}.{t}") for s, t in inner.edges if s not in ends and t not in ends]
    return types.SimpleNamespace(nodes=nodes, edges=edges)


def simulate_nir(graph: Any, x: np.ndarray, dt: float) -> np.ndarray:
    """The output of a NIR graph with one input and one output, for x [batch, time, *features] (NIR's layout,
    channels first), by Euler's rule at step dt; every node sums the edges into it, a subgraph is its nodes.

    LIF: v ← v + (dt/τ)·(v_leak − v + R·I); z = 1[v > v_threshold]; v ← v_reset where z. IF: v ← v + dt·R·I, the
    same spike and reset. LI: v ← v + (dt/τ)·(v_leak − v + R·I), output v. I: v ← v + dt·R·I, output v.
    Threshold: 1[I > θ].
    """
    graph = _inlined(graph)
    names = list(graph.nodes)
    feeding = {name: [s for s, t in graph.edges if t == name] for name in names}
    order: list[str] = []
    while len(order) < len(names):  # a loop: its first node (in the graph's order) reads the last step's values
        ready = [n for n in names if n not in order and all(s in order for s in feeding[n])]
        order += ready or [next(n for n in names if n not in order)]
    state: dict[str, np.ndarray] = {}
    previous: dict[str, np.ndarray] = {}
    outputs = []
    for t in range(x.shape[1]):
        values: dict[str, np.ndarray] = {}
        for name in order:
            node = graph.nodes[name]
            kind = type(node).__name__
            if kind == "Input":
                values[name] = x[:, t].astype(np.float64)
                continue
            shape = next(v.shape for v in (values.get(s, previous.get(s)) for s in feeding[name]) if v is not None)
            i = sum(values.get(s, previous.get(s, _at_rest(graph.nodes[s], shape))) for s in feeding[name])
            if kind == "Output":
                outputs.append(i)
                values[name] = i
            elif kind == "Affine":
                values[name] = i @ np.asarray(node.weight, np.float64).T + node.bias
            elif kind == "Linear":
                values[name] = i @ np.asarray(node.weight, np.float64).T
            elif kind == "Scale":
                values[name] = i * node.scale
            elif kind == "Flatten":
                values[name] = i.reshape(i.shape[0], -1)
            elif kind in ("Conv1d", "Conv2d"):
                w = np.asarray(node.weight, np.float64)
                values[name] = _conv(i, w, node.bias, node.stride, node.padding, node.dilation, node.groups)
            elif kind in ("SumPool2d", "AvgPool2d"):
                values[name] = _pool(i, node.kernel_size, node.stride, mean=kind == "AvgPool2d")
            elif kind == "Threshold":
                values[name] = (i > node.threshold).astype(np.float64)
            elif kind == "CubaLIF":
                current, v = state.get(name + ".i", np.zeros_like(i)), state.get(name, np.zeros_like(i))
                current = current + dt / node.tau_syn * (-current + node.w_in * i)
                v = v + dt / node.tau_mem * (node.v_leak - v + node.r * current)
                z = (v > node.v_threshold).astype(np.float64)
                state[name], state[name + ".i"] = np.where(z > 0, node.v_reset, v), current
                values[name] = z
            elif kind in ("LIF", "IF", "LI", "I"):
                v = state.get(name, np.zeros_like(i))
                if kind in ("IF", "I"):
                    v = v + dt * node.r * i
                else:
                    v = v + dt / node.tau * (node.v_leak - v + node.r * i)
                if kind in ("LI", "I"):
                    values[name] = v
                else:
                    z = (v > node.v_threshold).astype(np.float64)
                    v = np.where(z > 0, node.v_reset, v)
                    values[name] = z
                state[name] = v
            else:
                raise KeyError(kind)
        previous = values
    return np.stack(outputs, axis=1)


# -- synaptic, recurrent and leaky-integrator neurons --------------------------------------------------------------
#
#     r[t] = S[t−1]·V + b   (all-to-all; one-to-one: V ⊙ S[t−1] + b; none: 0)
#     c[t] = alpha·c[t−1] + I[t] + r[t]                 (synaptic; otherwise the membrane input is I[t] + r[t])
#     U[t] = beta·U[t−1] + c[t] − theta·S[t−1]          (the resets as above)
#     S[t] = 1[U[t] − theta > 0];  a leaky integrator (spiking=False) has no S, no reset, and outputs U.
#
# The loss is L = Σ_t Σ G[t]·out[t] + Σ H·U[T−1], out = S (spiking) or U (leaky integrator).


@dataclass
class Synapse:
    beta: float = 0.9
    theta: float = 1.0
    alpha: float | None = None  # None: no synaptic current
    recurrent: np.ndarray | None = None  # [units, units] all-to-all, [units] one-to-one
    bias: np.ndarray | None = None
    reset: str = "subtract"
    detach: bool = True
    spiking: bool = True
    surrogate: Surrogate = Surrogate("atan", 2.0)


def _recurrent(n: Synapse, s: np.ndarray) -> np.ndarray:
    if n.recurrent is None:
        return np.zeros_like(s)
    out = s @ n.recurrent if n.recurrent.ndim == 2 else s * n.recurrent
    return out + (n.bias if n.bias is not None else 0.0)


def simulate(n: Synapse, current: np.ndarray) -> dict[str, np.ndarray]:
    """current: [batch, time, units] -> U, S, C (each [time, batch, units])."""
    shape = (current.shape[0], current.shape[2])
    u, s, c = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    out: dict[str, list[np.ndarray]] = {"U": [], "S": [], "C": []}
    for t in range(current.shape[1]):
        drive = current[:, t] + _recurrent(n, s)
        if n.alpha is not None:
            c = n.alpha * c + drive
            drive = c
        if not n.spiking or n.reset == "none":
            u = n.beta * u + drive
        elif n.reset == "subtract":
            u = n.beta * u + drive - n.theta * s
        else:
            u = n.beta * (1 - s) * u + drive
        s = (u - n.theta > 0).astype(np.float64) if n.spiking else np.zeros(shape)
        for key, value in zip("USC", (u, s, c)):
            out[key].append(value)
    return {key: np.stack(value) for key, value in out.items()}


def bptt(n: Synapse, current: np.ndarray, g_out: np.ndarray, h_membrane: np.ndarray) -> dict[str, np.ndarray]:
    """dL/dI, dL/dbeta, dL/dalpha, dL/dtheta, dL/da (surrogate), dL/dV and dL/db, by hand."""
    f = simulate(n, current)
    steps = current.shape[1]
    zeros = np.zeros(f["U"][0].shape)
    g_u = [zeros.copy() for _ in range(steps)]
    g_s = [zeros.copy() for _ in range(steps)]
    g_c = [zeros.copy() for _ in range(steps)]
    g_u[-1] += h_membrane
    grads = {"current": np.zeros_like(current, dtype=np.float64), "beta": 0.0, "alpha": 0.0, "threshold": 0.0}
    grads["surrogate"] = 0.0
    grads["recurrent"] = np.zeros_like(n.recurrent) if n.recurrent is not None else None
    grads["bias"] = np.zeros(zeros.shape[1])
    for t in reversed(range(steps)):
        if n.spiking:
            g_s[t] += g_out[:, t]
            x = f["U"][t] - n.theta
            gx = g_s[t] * n.surrogate.d(x)
            grads["surrogate"] += float(np.sum(g_s[t] * n.surrogate.dp_da(x)))
            g_u[t] += gx
            grads["threshold"] -= float(np.sum(gx))
        else:
            g_u[t] += g_out[:, t]
        u_prev = f["U"][t - 1] if t else zeros
        s_prev = f["S"][t - 1] if t else zeros
        c_prev = f["C"][t - 1] if t else zeros
        g_s_prev = zeros.copy()
        if n.spiking and n.reset == "subtract":
            grads["beta"] += float(np.sum(g_u[t] * u_prev))
            g_u_prev = n.beta * g_u[t]
            grads["threshold"] -= float(np.sum(g_u[t] * s_prev))
            if not n.detach:
                g_s_prev -= g_u[t] * n.theta
        elif n.spiking and n.reset == "zero":
            grads["beta"] += float(np.sum(g_u[t] * (1 - s_prev) * u_prev))
            g_u_prev = n.beta * (1 - s_prev) * g_u[t]
            if not n.detach:
                g_s_prev -= g_u[t] * n.beta * u_prev
        else:
            grads["beta"] += float(np.sum(g_u[t] * u_prev))
            g_u_prev = n.beta * g_u[t]
        g_drive = g_u[t]
        if n.alpha is not None:
            g_c[t] += g_u[t]
            grads["alpha"] += float(np.sum(g_c[t] * c_prev))
            if t:
                g_c[t - 1] += n.alpha * g_c[t]
            g_drive = g_c[t]
        grads["current"][:, t] = g_drive
        if n.recurrent is not None:
            if n.recurrent.ndim == 2:
                grads["recurrent"] += s_prev.T @ g_drive
                g_s_prev += g_drive @ n.recurrent.T
            else:
                grads["recurrent"] += np.sum(s_prev * g_drive, axis=0)
                g_s_prev += g_drive * n.recurrent
            grads["bias"] += np.sum(g_drive, axis=0)
        if t:
            g_u[t - 1] += g_u_prev
            g_s[t - 1] += g_s_prev
    return grads
