"""Quantizers as targets of ``ste.plot`` and ``ste.testing.check_gradient`` (besides surrogates and ops).

Both functions resolve their first argument here, at their entry: a :class:`ste.quantizers.Quantizer` (instance or
class) or a quantizer name or spec string (``"sign"``, ``"dorefa(bits=4)"``) becomes a quantizer. A name that
is both a surrogate and a quantizer (``approx_sign``, ``swish_sign``) keeps meaning the surrogate, as before;
pass ``ste.quantizers.get("approx_sign")`` for the quantizer.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from .._core._dsl import STEFunction, forward
from ..errors import CallError, SpecError
from ..quantizers import Quantizer
from ..quantizers import get as get_quantizer
from ..quantizers import names as quantizer_names
from ..registry import Surrogate, parse_spec
from ..registry import names as surrogate_names

__all__ = ["as_quantizer", "quantizer_op", "quantizer_surrogate", "quantizer_variables"]


def as_quantizer(obj: Any) -> Quantizer | None:
    """``obj`` as a quantizer when it is one, a quantizer class, or a quantizer name or spec string; else None."""
    if isinstance(obj, Quantizer):
        return obj
    if isinstance(obj, type) and issubclass(obj, Quantizer):
        return obj()
    if isinstance(obj, str):
        try:
            name = parse_spec(obj)[0]
        except SpecError:
            return None  # not a spec: the surrogate lookup reports it
        if name in quantizer_names() and name not in surrogate_names():
            quantizer = get_quantizer(obj)
            assert isinstance(quantizer, Quantizer)  # a spec string always gives one
            return quantizer
    return None


def quantizer_surrogate(quantizer: Quantizer) -> Surrogate | None:
    """The surrogate that the quantizer's backward pass uses (``surrogate=``), if it has one."""
    surrogate = getattr(quantizer, "surrogate", None)
    return surrogate if isinstance(surrogate, Surrogate) else None


def quantizer_variables(quantizer: Quantizer, sample: tf.Tensor) -> list[str]:
    """The names of the variables the quantizer reads (``LSQ``'s step size, ``PACT``'s α); built on ``sample``."""
    if not quantizer.built:
        quantizer(sample)
    return [v.name for v in quantizer.weights]


def quantizer_op(quantizer: Quantizer, sample: tf.Tensor, caller: str) -> STEFunction[..., tf.Tensor]:
    """An ste op equal to the quantizer: its forward is the quantizer, its rule the quantizer's own gradient.

    An unbuilt quantizer is built on ``sample`` first. One with variables (``LSQ``, ``PACT``) is refused: its
    gradient has more inputs than x.
    """
    variables = quantizer_variables(quantizer, sample)
    if variables:
        raise CallError(
            f"{caller}({quantizer!r}): the quantizer reads variables "
            f"({', '.join(variables)}), so its gradient has more inputs than x. "
            f"Fix: check an op that takes each variable as a positional input, op(x, v), whose rule returns a "
            f"gradient for each."
        )

    def quantize(x: tf.Tensor) -> tf.Tensor:
        return quantizer(x)

    def quantizer_gradient(dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = quantizer(x)
        return tape.gradient(y, x, output_gradients=dy)

    quantize.__name__ = repr(quantizer)
    quantizer_gradient.__name__ = f"gradient of {quantizer!r}"
    return forward(quantize).backward(quantizer_gradient)


def check_target(
    target: Any, sample: Any, reference: Any, elementwise: bool | None, caller: str
) -> tuple[Any, Any, bool | None]:
    """``(target, reference, elementwise)`` for ``check_gradient``/``check_finite``: a quantizer becomes its op.

    The reference of a quantizer defaults to its :meth:`~ste.quantizers.Quantizer.gradient_reference` at the sample
    (elementwise; a surrogate quantizer's is the surrogate's primitive, MagnitudeAwareSign's is α times it), so that
    the check says whether the quantizer's gradient is the one it documents; one without needs ``reference=``.
    """
    quantizer = as_quantizer(target)
    if quantizer is None:
        return target, reference, elementwise
    x = tf.convert_to_tensor(sample)
    op = quantizer_op(quantizer, x, caller)
    known = quantizer.gradient_reference(x) if reference is None else None
    if known is not None:
        return op, known, True if elementwise is None else elementwise
    return op, reference, elementwise
