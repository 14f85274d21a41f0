"""Import of NIR's neuron nodes ``LIF``, ``IF``, ``LI``, ``I`` and ``CubaLIF``: each node's decay, gain and threshold
(:class:`_Dynamics`), checked, and the ste neuron with an input scale where the gain is not 1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from ...errors import ConversionError
from .._if import IF
from .._li import LI
from .._lif import LIF
from .._synaptic import Synaptic
from ._discretization import _beta, _if_gain, _lif_gain
from ._graph import ALPHA_KEY, BETA_KEY
from ._import_context import _Import
from ._layers import ElementwiseScale
from ._layout import _channels_last


def _uniform(node: str, name: str, values: Any) -> float:
    flat = np.unique(np.asarray(values, np.float64))
    if flat.size != 1:
        raise ConversionError(
            f"from_nir: node '{node}' has {flat.size} different values of {name}; ste's neurons have one per layer. "
            f"Fix: give every neuron of the node the same {name}."
        )
    return float(flat[0])


def _resolution(values: Any) -> float:
    """The relative rounding of a parameter as stored: its float type's epsilon (float64's for an integer type,
    whose values are exact and computed with in float64)."""
    dtype = np.asarray(values).dtype
    return float(np.finfo(dtype if np.issubdtype(dtype, np.floating) else np.float64).eps)


def _scale_layers(ctx: _Import, gain: Any, *parameters: Any) -> list[keras.layers.Layer]:
    """An ``ElementwiseScale`` by the input gain, none where it is 1 up to the rounding of the ``parameters`` it is
    computed from (the node's own numbers).

    (An exporter that writes R = τ/dt, as snnTorch's, means a gain of 1; in the node's float32 numbers R·dt/τ comes
    out 1 ± a few ulps, which is the rounding of the file, not a feature of the model.)
    """
    gain = np.broadcast_to(np.asarray(gain, np.float64), ctx.shape)
    precision = min(_resolution(values) for values in parameters) if parameters else 0.0
    if np.all(np.abs(gain - 1.0) <= 4 * precision):
        return []
    return [ElementwiseScale(_channels_last(gain), name=ctx.layer_name("_input_scale"))]


def _neuron(layer: keras.layers.Layer, ctx: _Import) -> list[keras.layers.Layer]:
    return [layer]  # ste's neurons take [batch, time, ...features] as they come (feature maps too)


def _no_leak(node: Any, ctx: _Import) -> None:
    if np.any(np.asarray(node.v_leak) != 0):
        raise ctx.refuse(
            node,
            "has v_leak ≠ 0 (a constant drive ste's neurons have no term for)",
            "v_leak = 0, with the drive as a bias of the Affine node in front",
        )


def _reset_zero(node: Any, ctx: _Import) -> None:
    if np.any(np.asarray(node.v_reset) != 0):
        raise ctx.refuse(node, "resets to v_reset ≠ 0; ste's reset='zero' sets the membrane to 0", "v_reset = 0")


def _checked_decay(node: Any, ctx: _Import, tau: Any, key: str, name: str) -> float:
    """The decay ``1 − dt/τ`` of a node (``name``: "β = 1 − dt/τ", ...), ste's exact value from the metadata under
    ``key`` when the node's τ rounds it; refused outside [0, 1]."""
    decay = _uniform(ctx.name, name, _beta(ctx.dt, tau))
    exact = ctx.metadata.get(key)
    if isinstance(exact, (float, np.floating)) and abs(float(exact) - decay) <= 4 * np.finfo(np.float64).eps:
        decay = float(exact)  # ste's own value, which the τ in the node rounds
    if not 0.0 <= decay <= 1.0:
        raise ctx.refuse(
            node,
            f"has {name} = {decay} at dt = {ctx.dt}, outside [0, 1] (τ < dt)",
            "a smaller dt (snnTorch's graphs use dt=1e-4)",
        )
    return decay


@dataclass(frozen=True)
class _Dynamics:
    """A NIR neuron node as ste's discrete neuron: its decay per step, its input gain, the node's numbers the gain
    is computed from (whose rounding it carries) and its threshold (None: it never spikes)."""

    decay: float
    gain: Any
    parameters: tuple[Any, ...]
    threshold: float | None = None


def _integrator(node: Any, ctx: _Import, key: str = BETA_KEY, name: str = "β") -> _Dynamics:
    """LI, ``v[t] = (1 − dt/τ)·v[t−1] + (R·dt/τ)·x[t]``, or I, ``v[t] = v[t−1] + R·dt·x[t]`` (a decay of 1)."""
    if type(node).__name__ == "I":
        return _Dynamics(1.0, _if_gain(node.r, ctx.dt), (node.r,))
    _no_leak(node, ctx)
    decay = _checked_decay(node, ctx, node.tau, key, f"{name} = 1 − dt/τ")
    return _Dynamics(decay, _lif_gain(node.r, ctx.dt, node.tau), (node.r, node.tau))


def _membrane(node: Any, ctx: _Import) -> _Dynamics:
    """LIF, or IF (a decay of 1), resetting to 0."""
    if type(node).__name__ == "IF":
        _reset_zero(node, ctx)
        dynamics = _Dynamics(1.0, _if_gain(node.r, ctx.dt), (node.r,))
    else:
        _no_leak(node, ctx)
        _reset_zero(node, ctx)
        beta = _checked_decay(node, ctx, node.tau, BETA_KEY, "β = 1 − dt/τ")
        dynamics = _Dynamics(beta, _lif_gain(node.r, ctx.dt, node.tau), (node.r, node.tau))
    threshold = _uniform(ctx.name, "v_threshold", node.v_threshold)
    return _Dynamics(dynamics.decay, dynamics.gain, dynamics.parameters, threshold)


def _import_spiking(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    """LIF -> ste's LIF, IF -> IF (both with reset="zero")."""
    d = _membrane(node, ctx)
    arguments = dict(threshold=d.threshold, reset="zero", surrogate=ctx.surrogate(), name=ctx.layer_name())
    layer = IF(**arguments) if type(node).__name__ == "IF" else LIF(beta=d.decay, **arguments)
    return _scale_layers(ctx, d.gain, *d.parameters) + _neuron(layer, ctx)


def _import_integrator(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    """LI -> ste's LI; I -> LI with β = 1."""
    d = _integrator(node, ctx)
    layer = LI(beta=d.decay, name=ctx.layer_name())
    return _scale_layers(ctx, d.gain, *d.parameters) + _neuron(layer, ctx)


def _cuba_parameters(node: Any, ctx: _Import) -> tuple[float, float, float, Any]:
    """α, β, ϑ and the input gain of a CubaLIF: i[t] = α·i[t−1] + (w_in·dt/τ_syn)·x[t], v[t] = β·v[t−1] +
    (R·dt/τ_mem)·i[t]; both gains act on a linear recursion, so they multiply the input once."""
    _no_leak(node, ctx)
    _reset_zero(node, ctx)
    alpha = _checked_decay(node, ctx, node.tau_syn, ALPHA_KEY, "α = 1 − dt/τ_syn")
    beta = _checked_decay(node, ctx, node.tau_mem, BETA_KEY, "β = 1 − dt/τ_mem")
    threshold = _uniform(ctx.name, "v_threshold", node.v_threshold)
    gain = _lif_gain(node.w_in, ctx.dt, node.tau_syn) * _lif_gain(node.r, ctx.dt, node.tau_mem)
    return alpha, beta, threshold, gain


def _import_cuba_lif(node: Any, ctx: _Import) -> list[keras.layers.Layer]:
    alpha, beta, threshold, gain = _cuba_parameters(node, ctx)
    layer = Synaptic(
        alpha=alpha, beta=beta, threshold=threshold, reset="zero", surrogate=ctx.surrogate(), name=ctx.layer_name()
    )
    return _scale_layers(ctx, gain, node.r, node.tau_mem, node.w_in, node.tau_syn) + _neuron(layer, ctx)
