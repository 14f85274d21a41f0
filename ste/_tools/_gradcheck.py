"""Checking a backward rule: against the autodiff of its primitive, or finite differences of a reference.

Used through :mod:`ste.testing`. Failures are ``AssertionError``s (so pytest reports them as test failures) whose
message holds a small table of the worst points.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
import tensorflow as tf

from .._core._describe import callable_name
from .._core._dsl import Forward, STEFunction, rule_of
from ..errors import CallError, ParameterError
from ..quantizers import Quantizer
from ..registry import HasPrimitive, Surrogate, get
from ._targets import check_target

__all__ = ["CheckTarget", "check_finite", "check_gradient", "default_tolerances"]

#: What :func:`check_gradient` checks: an ste op, a surrogate (name, spec string, instance, class or config), or a
#: quantizer (instance, class, name or spec string).
CheckTarget = Union[
    STEFunction[..., Any], str, Surrogate, "type[Surrogate]", Mapping[str, Any], Quantizer, "type[Quantizer]"
]

# (rtol, atol) by dtype: comparing two exact formulas (autodiff), and comparing with central differences.
_AUTODIFF_TOLERANCES = {
    tf.float64: (1e-7, 1e-10),
    tf.float32: (1e-5, 1e-6),
    tf.float16: (5e-3, 1e-3),
    tf.bfloat16: (2e-2, 1e-2),
}
_FD_TOLERANCES = {
    tf.float64: (1e-5, 1e-6),
    tf.float32: (2e-2, 2e-2),
    tf.float16: (1e-1, 1e-1),
    tf.bfloat16: (2e-1, 2e-1),
}
_EPSILON = {tf.float64: 2.0**-52, tf.float32: 2.0**-23, tf.float16: 2.0**-10, tf.bfloat16: 2.0**-7}


def default_tolerances(dtype: tf.DType | str, finite_differences: bool) -> tuple[float, float]:
    """The default ``(rtol, atol)`` of :func:`check_gradient` for inputs of ``dtype``."""
    table = _FD_TOLERANCES if finite_differences else _AUTODIFF_TOLERANCES
    return table[tf.as_dtype(dtype)]


@dataclass
class _Comparison:
    labels: list[str]  # one per input
    xs: list[np.ndarray]
    rule: list[np.ndarray]
    reference: list[np.ndarray]


def _as_inputs(x: Any) -> list[tf.Tensor]:
    values = list(x) if isinstance(x, tuple) else [x]
    tensors = []
    for index, value in enumerate(values):
        tensor = value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(np.asarray(value))
        if isinstance(value, (int, float, list)) and tensor.dtype != tf.float64:  # Python numbers: float64
            tensor = tf.cast(tensor, tf.float64)
        if not tensor.dtype.is_floating:
            raise CallError(
                f"check_gradient(): input {index} has dtype {tensor.dtype.name}; expected floating points. "
                f"Fix: pass e.g. np.linspace(-3, 3, 201) (float64)."
            )
        tensors.append(tf.identity(tensor))
    return tensors


def _upstream(ys: list[tf.Tensor], seed: int) -> list[tf.Tensor]:
    """Upstream gradients in [0.5, 1.5): not all ones, so a rule that ignores dy is caught."""
    rng = np.random.default_rng(seed)
    return [tf.cast(rng.uniform(0.5, 1.5, size=y.shape.as_list()), y.dtype) for y in ys]


def _in_float64(values: list[tf.Tensor]) -> list[tf.Tensor]:
    """Exact float64 copies: a surrogate's primitive is differentiated in float64, the most accurate reference."""
    return [tf.cast(v, tf.float64) for v in values]


def _vjp(
    fn: Callable[..., Any], xs: list[tf.Tensor], dys: list[tf.Tensor] | None, seed: int, ones: bool = False
) -> Any:
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(xs)
        ys = tf.nest.flatten(fn(*xs))
    if dys is None:
        dys = [tf.ones_like(y) for y in ys] if ones else _upstream(ys, seed)
    grads = tape.gradient(
        ys,
        xs,
        output_gradients=[tf.cast(d, y.dtype) for d, y in zip(dys, ys)],
        unconnected_gradients=tf.UnconnectedGradients.ZERO,
    )
    return grads, dys


def _weighted_sum(fn: Callable[..., Any], xs: list[tf.Tensor], dys: list[tf.Tensor]) -> float:
    ys = tf.nest.flatten(fn(*xs))
    if len(ys) != len(dys):
        raise CallError(f"check_gradient(): the reference returned {len(ys)} output(s); the op returns {len(dys)}.")
    total = 0.0
    for y, dy in zip(ys, dys):
        total += float(np.sum(np.asarray(y, dtype=np.float64) * dy.numpy().astype(np.float64)))
    return total


def _finite_differences(
    reference: Callable[..., Any], xs: list[tf.Tensor], dys: list[tf.Tensor], step: float | None, elementwise: bool
) -> list[np.ndarray]:
    """Central differences of sum(dy * reference(*xs)) with respect to every element of every input."""
    results = []
    for index, x in enumerate(xs):
        values = np.array(x.numpy())  # an array also for a scalar input, so that items can be set
        h = step if step is not None else _EPSILON[x.dtype] ** (1.0 / 3.0)
        hs = h * np.maximum(1.0, np.abs(values.astype(np.float64)))
        plus = (values.astype(np.float64) + hs).astype(values.dtype)
        minus = (values.astype(np.float64) - hs).astype(values.dtype)
        spans = plus.astype(np.float64) - minus.astype(np.float64)  # the step actually taken, after rounding
        if elementwise:
            up = reference(*(tf.constant(plus) if i == index else t for i, t in enumerate(xs)))
            down = reference(*(tf.constant(minus) if i == index else t for i, t in enumerate(xs)))
            diff = np.asarray(up, dtype=np.float64) - np.asarray(down, dtype=np.float64)
            if len(xs) != 1 or len(dys) != 1 or diff.shape != values.shape:
                raise CallError(
                    f"check_gradient(elementwise=True): the reference must map one input to one output of the same "
                    f"shape; it has {len(xs)} input(s) and returned shape {diff.shape} for an input of shape "
                    f"{values.shape}. Fix: leave elementwise unset (each element is then perturbed on its own)."
                )
            results.append(diff * dys[0].numpy().astype(np.float64) / spans)
            continue
        grad = np.zeros(values.shape, dtype=np.float64)
        for position in np.ndindex(values.shape):
            shifted_up, shifted_down = values.copy(), values.copy()
            shifted_up[position], shifted_down[position] = plus[position], minus[position]
            up_inputs = [tf.constant(shifted_up) if i == index else t for i, t in enumerate(xs)]
            down_inputs = [tf.constant(shifted_down) if i == index else t for i, t in enumerate(xs)]
            grad[position] = (_weighted_sum(reference, up_inputs, dys) - _weighted_sum(reference, down_inputs, dys)) / (
                spans[position]
            )
        results.append(grad)
    return results


def _numpy(values: Sequence[Any]) -> list[np.ndarray]:
    return [np.asarray(v.numpy() if hasattr(v, "numpy") else v, dtype=np.float64) for v in values]


def _table(comparison: _Comparison, rtol: float, atol: float, show: int) -> tuple[int, int, str]:
    rows = []
    total = 0
    for label, x, rule, ref in zip(comparison.labels, comparison.xs, comparison.rule, comparison.reference):
        total += x.size
        diff = np.abs(rule - ref)
        excess = diff - (atol + rtol * np.abs(ref))
        excess = np.where(np.isnan(excess), np.inf, excess)
        for position in np.ndindex(excess.shape):
            if excess[position] > 0:
                rows.append(
                    (float(excess[position]), label, position, float(x[position]), rule[position], ref[position])
                )
    rows.sort(key=lambda row: -row[0])
    several = len(comparison.labels) > 1
    header = (["input"] if several else []) + ["index", "x", "rule", "reference", "|difference|"]
    lines = [header]
    for _, label, position, xv, rv, fv in rows[:show]:
        index = ",".join(str(int(p)) for p in position) if position else "-"
        cells = [f"{xv:.6g}", f"{rv:.6g}", f"{fv:.6g}", f"{abs(rv - fv):.3g}"]
        lines.append(([label] if several else []) + [index, *cells])
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    text = "\n".join("  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in lines)
    return len(rows), total, text


def _resolve(target: Any) -> tuple[str, STEFunction[..., Any] | None, Surrogate | None]:
    if isinstance(target, Forward):
        raise CallError(
            f"check_gradient({target!r}): the op has no backward rule yet; attach one with .backward(...) first."
        )
    if isinstance(target, STEFunction):
        return repr(target), target, None
    if isinstance(target, (str, Surrogate, Mapping)) or (isinstance(target, type) and issubclass(target, Surrogate)):
        surrogate = get(target)
        return repr(surrogate), None, surrogate
    raise CallError(
        f"check_gradient() checks an ste op (ste.forward(f).backward(...)) or a surrogate (name, spec string or "
        f"ste.registry.Surrogate); received {type(target).__name__} {target!r:.80}."
    )


def check_gradient(
    op_or_surrogate: CheckTarget,
    x: Any,
    *,
    reference: Callable[..., Any] | None = None,
    hyperparams: Mapping[str, Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    step: float | None = None,
    elementwise: bool | None = None,
    show: int = 5,
    seed: int = 0,
) -> None:
    """Check that a backward rule is the derivative it claims to be; raise ``AssertionError`` where it is not.

    ``op_or_surrogate`` is an ste op, a surrogate (registry name, spec string or :class:`ste.registry.Surrogate`)
    or a quantizer (:class:`ste.quantizers.Quantizer`, or a quantizer name or spec string such as ``"sign"``;
    a name that is also a surrogate's means the surrogate). A quantizer is checked as the op it computes; its
    reference defaults to its surrogate's primitive when it has one, so the check says whether its gradient is
    ``dy·d(x)``.
    ``x`` is the input at which to check: an array or tensor (its dtype is used; Python numbers and lists become
    float64), or a tuple of them for an op with several positional inputs.

    What the rule is compared with:

    * ``reference`` given: central finite differences of ``reference`` (a function of the same inputs, written
      with TensorFlow or numpy), the rule being the derivative of that smooth function. Checked element by element
      (one pair of reference calls per input element) unless ``elementwise`` is true (then one pair in all).
    * otherwise the autodiff gradient of the rule's primitive: a surrogate's ``primitive``, or the ``g`` of
      ``backward_like(g)``. An op whose rule is a plain function has no primitive: give ``reference``.

    For an op, both sides are vector-Jacobian products with the same upstream gradient, drawn uniformly from
    [0.5, 1.5) (``seed``), so that a rule that ignores ``dy`` is caught; for a surrogate the derivative itself is
    compared. ``hyperparams`` are the op's keyword hyperparameters (also passed to ``reference``). Defaults of
    ``rtol``/``atol`` depend on the dtype and the method (:func:`default_tolerances`); use float64 inputs for
    finite differences, and keep points off kinks of the reference, where no derivative exists.

    On a mismatch the ``AssertionError`` lists the ``show`` worst points (input, index, x, rule, reference).
    """
    __tracebackhide__ = True  # pytest: report the failure at the caller's line
    sample = x[0] if isinstance(x, tuple) else x
    op_or_surrogate, reference, elementwise = check_target(
        op_or_surrogate, sample, reference, elementwise, "check_gradient"
    )
    label, op, surrogate = _resolve(op_or_surrogate)
    xs = _as_inputs(x)
    kwargs = dict(hyperparams or {})
    use_fd = reference is not None
    if surrogate is not None:
        if len(xs) != 1:
            raise CallError(f"check_gradient({label}): a surrogate has one input; received {len(xs)}.")
        rule_values = _numpy([surrogate.derivative(xs[0])])
        ones = [tf.ones_like(xs[0])]  # for finite differences: the derivative itself
        if reference is not None:
            ref_values = _finite_differences(reference, xs, ones, step, True if elementwise is None else elementwise)
            what = f"central differences of {callable_name(reference)}"
        elif isinstance(surrogate, HasPrimitive):
            ref_values = _numpy(_vjp(surrogate.primitive, _in_float64(xs), None, seed, ones=True)[0])
            what = "the autodiff gradient of its primitive (in float64)"
        else:
            raise CallError(
                f"check_gradient({label}): the surrogate has no primitive to differentiate. Fix: pass "
                f"reference=P, a function whose derivative it should be."
            )
    else:
        assert op is not None
        rule_grads, dys = _vjp(lambda *t: op(*t, **kwargs), xs, None, seed)
        rule_values = _numpy(rule_grads)
        rule = rule_of(op)
        if reference is not None:
            ref_values = _finite_differences(
                lambda *t: reference(*t, **kwargs),
                xs,
                dys,
                step,
                (len(xs) == 1 and rule.elementwise) if elementwise is None else elementwise,
            )
            what = f"central differences of {callable_name(reference)}"
        else:
            known = rule.reference(kwargs)
            if known is None:
                raise CallError(
                    f"check_gradient({label}): the rule has no primitive to differentiate automatically. Fix: pass "
                    f"reference=f, a smooth function of the same inputs whose gradient the rule should equal; it is "
                    f"compared by central finite differences."
                )
            if known.in_float64:
                ref_values = _numpy(_vjp(known.fn, _in_float64(xs), _in_float64(dys), seed)[0])
                what = f"{known.what} (in float64)"
            else:
                ref_values = _numpy(_vjp(known.fn, xs, dys, seed)[0])
                what = known.what
    dtype = xs[0].dtype
    default_rtol, default_atol = default_tolerances(dtype, use_fd)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    labels = [str(i) for i in range(len(xs))]
    comparison = _Comparison(labels, _numpy(xs), rule_values, ref_values)
    bad, total, table = _table(comparison, rtol, atol, show)
    vjp_note = "" if surrogate is not None else " (both are vector-Jacobian products for one random upstream gradient)"
    if bad:
        raise AssertionError(
            f"check_gradient({label}): the rule's gradient differs from {what} at {bad} of {total} point(s) "
            f"(dtype {dtype.name}, rtol={rtol:g}, atol={atol:g}); the worst {min(bad, show)}{vjp_note}:\n{table}"
        )


_EXTREMES = (0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 1e4, -1e4)


def check_finite(
    op_or_surrogate: CheckTarget,
    dtypes: Sequence[tf.DType | str] = ("float16", "bfloat16", "float32", "float64"),
    x: Sequence[float] | None = None,
) -> None:
    """Check that the rule's gradient is finite (no NaN, no Inf) at extreme inputs in every dtype.

    The default points are 0, ±1e-30, ±0.5, ±1, ±1e4 and ± the dtype's largest finite value (values a dtype
    cannot hold become its nearest: 1e4 is kept in float16, 1e-30 flushes to 0). Raises ``AssertionError`` listing
    the dtypes and points where a gradient is not finite.
    """
    __tracebackhide__ = True
    op_or_surrogate = check_target(op_or_surrogate, [0.0], None, None, "check_finite")[0]
    label, op, surrogate = _resolve(op_or_surrogate)
    problems = []
    for dtype in (tf.as_dtype(d) for d in dtypes):
        biggest = float(dtype.max)
        points = list(x) if x is not None else [*_EXTREMES, biggest, -biggest]
        xs = tf.cast(tf.constant(points, tf.float64), dtype)
        if surrogate is not None:
            try:  # what an op using it does for this dtype: refuse hyperparameters that overflow it
                surrogate.check_dtype(dtype)
            except ParameterError as error:
                problems.append(f"  {dtype.name:>8}  refused: {error}")  # why; the points follow
            values = surrogate.derivative(xs)
        else:
            assert op is not None
            with tf.GradientTape() as tape:
                tape.watch(xs)
                ys = op(xs)
            values = tape.gradient(ys, xs, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        array = np.asarray(tf.cast(values, tf.float64).numpy())
        for point, value in zip(points, array):
            if not np.isfinite(value):
                problems.append(f"  {dtype.name:>8}  x = {point:<12.6g} gradient = {value}")
    if problems:
        raise AssertionError(
            f"check_finite({label}): the gradient is not finite (or is refused) at:\n" + "\n".join(problems)
        )
