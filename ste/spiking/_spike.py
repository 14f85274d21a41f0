"""The spike nonlinearity: S = Θ(x) (exactly 0 or 1, Θ(0) = 0) whose backward pass is a registry surrogate.

The backward pass of ``Θ`` is the registry surrogate's ``dy·d(x)``, as for ``ste.forward(heaviside).backward(s)``.
With learned surrogate parameters the op takes them as extra positional inputs; their gradient is that of the
surrogate's smooth primitive P(x; θ), the function the surrogate derivative comes from:
∂L/∂θ = Σ dy·∂P(x; θ)/∂θ (the forward Θ itself does not depend on θ).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from .._common._arguments import check_bool
from ..errors import ParameterError
from ..registry import HasPrimitive, Surrogate, SurrogateLike, get

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
    if isinstance(learned, (bool, np.bool_)):
        names = numeric if learned else ()
    elif learned is None:
        names = ()
    elif isinstance(learned, str):
        names = (learned,)
    elif isinstance(learned, Sequence) and all(isinstance(n, str) for n in learned):
        names = tuple(learned)
    else:
        check_bool(layer, "learn_surrogate", learned)  # raises: learn_surrogate must be True or False (or names)
        names = ()
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
    if isinstance(learned, (bool, np.bool_)) and learned and not names:
        raise ParameterError(f"{layer}: learn_surrogate=True, but the surrogate {resolved!r} has no numeric parameter.")
    return resolved, names


def spike_op(surrogate: Surrogate, learned: tuple[str, ...] = ()) -> Callable[..., Any]:
    """``op(x, *learned_values)``: Θ(x) forward; backward dy·d(x) and, per learned parameter θ, Σ dy·∂P/∂θ.

    A ``tf.custom_gradient`` wrapped in its own ``tf.function``. The forward pass computes only Θ(x) and keeps x;
    the backward pass computes d(x) (``multiply_no_nan``: 0 wherever d(x) = 0, even where dy is not finite).

    The ``tf.function`` wrapper is what lets a SavedModel re-load the gradient of a spike inside the time loop:
    a bare ``tf.custom_gradient`` there has a gradient function that captures x, a tensor of the ``while`` body;
    SavedModel re-binds such a capture by name at load, and the re-loaded loop's gradient then fails with
    "tensor ... is out of scope". Inside a function of its own, x is a tensor of that function, which TensorFlow's
    function gradient hands to the ``while`` gradient as an ordinary output. Its cost is measured in docs/performance.md
    (``benchmarks/spiking.py``). Forward mode (``tf.autodiff.ForwardAccumulator``) transposes the function's
    backward pass, so the JVP is d(x)·t.
    """
    cls = type(surrogate)
    fixed = {k: v for k, v in surrogate.params.items() if k not in learned}

    def current(values: Sequence[tf.Tensor]) -> Surrogate:
        return cls(**fixed, **dict(zip(learned, values))) if learned else surrogate

    def op(x: tf.Tensor, *values: tf.Tensor) -> Any:
        surrogate.check_dtype(x.dtype, op="spike")  # a parameter that over- or underflows x's dtype: error, not NaN

        def grad(dy: tf.Tensor) -> Any:
            dx = tf.math.multiply_no_nan(dy, current(values).derivative(x))
            if not learned:
                return dx
            with tf.GradientTape() as tape:  # Σ dy·∂P(x; θ)/∂θ: autodiff of the primitive
                tape.watch(values)
                smooth = current(values)
                assert isinstance(smooth, HasPrimitive)  # checked when the layer was built
                relaxed = smooth.primitive(x)
            return (dx, *tape.gradient(relaxed, values, output_gradients=dy))

        return heaviside(x), grad

    compiled: Callable[..., Any] = tf.function(tf.custom_gradient(op), autograph=False, reduce_retracing=True)
    return compiled
