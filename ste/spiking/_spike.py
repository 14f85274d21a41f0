"""The spike nonlinearity: S = Θ(x) (exactly 0 or 1, Θ(0) = 0) whose backward pass is a registry surrogate.

The backward pass of ``Θ`` is the registry surrogate's ``dy·d(x)``, as for ``ste.forward(heaviside).backward(s)``.
With learned surrogate parameters the op takes them as extra positional inputs; their gradient is that of the
surrogate's smooth primitive P(x; θ), the function the surrogate derivative comes from:
∂L/∂θ = Σ dy·∂P(x; θ)/∂θ (the forward Θ itself does not depend on θ).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from .._errors import ParameterError
from ..registry import Surrogate, SurrogateLike, get

__all__ = ["heaviside", "resolve_surrogate", "spike_op"]

#: The default surrogate of every spiking layer (snnTorch's default: ``atan(alpha=2)``, peak 1 at 0).
DEFAULT_SURROGATE = "atan(alpha=2.0)"


def heaviside(x: tf.Tensor, *surrogate_params: tf.Tensor) -> tf.Tensor:
    """Θ(x): 1 where x > 0, else 0 (so Θ(0) = 0, as snnTorch, Norse and larq), in ``x``'s dtype."""
    return tf.cast(x > 0, x.dtype)


def resolve_surrogate(
    surrogate: SurrogateLike, learned: bool | Sequence[str], layer: str
) -> tuple[Surrogate, tuple[str, ...]]:
    """The registry surrogate and the names of its parameters to learn (``True``: every numeric parameter)."""
    resolved = get(surrogate)
    numeric = tuple(k for k, v in resolved.params.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    if learned is True:
        names = numeric
    elif learned is False or learned is None:
        names = ()
    elif isinstance(learned, str):
        names = (learned,)
    else:
        names = tuple(learned)
    unknown = [n for n in names if n not in numeric]
    if unknown:
        raise ParameterError(
            f"{layer}: learn_surrogate={learned!r} names {unknown}, which are not numeric parameters of the "
            f"surrogate {resolved!r}; its parameters are {list(resolved.params)}. "
            f"Fix: pass True or some of those names."
        )
    if names and not resolved.has_primitive:
        raise ParameterError(
            f"{layer}: learn_surrogate needs the surrogate's primitive P (the gradient of a parameter is that of P), "
            f"and {resolved!r} has none. "
            f"Fix: choose a surrogate with a primitive (e.g. 'atan') or learn_surrogate=False."
        )
    if learned is True and not names:
        raise ParameterError(f"{layer}: learn_surrogate=True, but the surrogate {resolved!r} has no numeric parameter.")
    return resolved, names


def spike_op(surrogate: Surrogate, learned: tuple[str, ...] = ()) -> Callable[..., Any]:
    """``op(x, *learned_values)``: Θ(x) forward; backward dy·d(x) and, per learned parameter θ, Σ dy·∂P/∂θ.

    Written with stop-gradients rather than ``tf.custom_gradient`` (the form ``ste`` uses inside
    ``tf.vectorized_map``), because a custom gradient inside a while loop is lost when a SavedModel is re-loaded::

        S = stop_gradient(Θ(x)) + stop_gradient(d(x))·(x − stop_gradient(x)) + (P(x̄; θ) − stop_gradient(P(x̄; θ)))

    with x̄ = stop_gradient(x). Both added terms are exactly 0 in the forward pass (a finite value minus itself), so
    S is exactly 0 or 1; their gradients are dy·d(x) for x and dy·∂P/∂θ for θ. At x = ±inf, where x − x is NaN,
    the surrogate term is 0 wherever d(±inf) = 0 (every decaying or clipped entry), so S stays Θ(x) there too.
    """
    cls = type(surrogate)
    fixed = {k: v for k, v in surrogate.params.items() if k not in learned}

    def op(x: tf.Tensor, *values: tf.Tensor) -> tf.Tensor:
        current = cls(**fixed, **dict(zip(learned, values))) if learned else surrogate
        frozen = tf.stop_gradient(x)
        # multiply_no_nan: 0 wherever d(x) = 0, so x = ±inf (d = 0 there, x − x = NaN) still gives S = Θ(x)
        surrogate_term = tf.math.multiply_no_nan(x - frozen, tf.stop_gradient(current.derivative(frozen)))
        spikes = tf.stop_gradient(heaviside(x)) + surrogate_term
        if learned:
            relaxed = current.primitive(frozen)
            spikes = spikes + (relaxed - tf.stop_gradient(relaxed))
        return spikes

    return op
