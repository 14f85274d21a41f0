"""Detecting forward-mode autodiff (``tf.autodiff.ForwardAccumulator``) over an ``ste`` op's inputs.

How TensorFlow's forward mode treats ``tf.custom_gradient`` (TF 2.21, ``eager/forwardprop.py`` and the C++
``ForwardAccumulator::Accumulate``): an accumulator records every op it sees and keeps the *first* JVP computed for a
tensor. The ops of the forward function run first, then ``custom_gradient`` records its outputs once more with the
custom gradient (whose transpose would be the rule's JVP), but that second JVP is thrown away whenever the forward's
own ops already produced one. So the JVP is the forward function's own derivative (relu's for
``forward(relu).backward_like(sigmoid)``; all zeros for ``sign`` inside ``tf.function``, where the ``IdentityN`` op is
recorded first), except in eager mode when the forward is not differentiable at all.

An ``ste`` op therefore asks, when it is called (eagerly) or traced, whether an active accumulator holds a tangent
for any of its inputs (``TFE_Py_PackJVPs``, what TensorFlow's own function calls use; a C call costing well under a
microsecond). Then the compiler asks the rule to rebuild the op from ordinary differentiable ops
(:meth:`ste._core._rules.Rule.rebuild`), whose JVP is the documented one: ``d(x)·t`` for a registry surrogate, the JVP
of ``g`` for ``backward_like(g)``, the declared ``jvp=`` of a hand-written VJP; one without raises
:class:`ste.errors.RuleError`. The rebuilt op has the same
reverse-mode gradient, so a ``GradientTape`` inside or outside the accumulator (Hessian-vector products) still
gets the rule. Without an accumulator nothing changes.

A ``tf.function`` traced without an accumulator and later called under one is not traced again; TensorFlow then
computes the JVP by transposing the function's backward pass, which contains the custom gradient: exactly
``d(x)·t`` for a surrogate and the JVP of ``g`` for ``backward_like``; for a hand-written rule, the transpose of its
VJP (no error can be raised there).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from ._rules import Situation

__all__ = ["FORWARD_MODE", "under_forward_accumulator"]

try:
    from tensorflow.python import pywrap_tfe

    _pack_jvps = pywrap_tfe.TFE_Py_PackJVPs
except (ImportError, AttributeError):  # pragma: no cover - layout of a future TensorFlow
    _pack_jvps = None


def under_forward_accumulator(xs: Sequence[tf.Tensor]) -> bool:
    """Whether an active ``tf.autodiff.ForwardAccumulator`` carries a tangent for any of ``xs``."""
    if _pack_jvps is None:  # pragma: no cover
        return False
    indices, _ = _pack_jvps(list(xs))
    return any(indices)


FORWARD_MODE = Situation(
    where="under tf.autodiff.ForwardAccumulator (forward-mode autodiff, also keras.ops.jvp)",
    why="TensorFlow's forward mode ignores custom gradients",
    fix=(
        "a hand-written rule defines only a vector-Jacobian product, not the Jacobian-vector product forward mode "
        "needs. Declare it, .backward(rule, jvp=jvp) with jvp(t, *inputs) returning the output tangent; or use "
        "a registry surrogate (JVP d(x)·t) or .backward_like(g) (the JVP of g), or compute the derivative in "
        "reverse mode with tf.GradientTape."
    ),
)
