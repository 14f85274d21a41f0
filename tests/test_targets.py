"""ste.testing.check_gradient and check_finite accept quantizers, quantizer classes and quantizer names."""

from __future__ import annotations

import numpy as np
import pytest

import ste
from tests.references import case_id, entry_cases, lsq_reference, pact_reference

GRID = np.linspace(-3.0, 3.0, 121) + 1.234567e-3  # off the kinks at |x| = 1


@pytest.mark.parametrize(
    "quantizer",
    [
        "ste_sign",
        "ste_sign(clip_value=2.0)",
        "sign(surrogate='atan(alpha=4)')",
        ste.larq.quantizers.SwishSign,
        "ternary",
    ],
)
def test_a_quantizer_with_a_surrogate_is_checked_against_its_primitive(quantizer):
    ste.testing.check_gradient(quantizer, GRID)
    ste.testing.check_finite(quantizer)


def test_a_quantizer_whose_gradient_is_not_its_surrogates_derivative_fails():
    quantizer = ste.quantizers.Sign(surrogate="atan(alpha=4)")
    quantizer.surrogate = ste.registry.get("sigmoid_surrogate(beta=4)")  # the op keeps atan: the check must see it
    with pytest.raises(AssertionError, match="differs"):
        ste.testing.check_gradient(quantizer, GRID)


def test_magnitude_aware_sign_scales_the_gradient():
    """Its gradient is α·1[|x| <= 1] with α held constant; for a 1-D input α = mean over no axes = |x|.

    So an independent reference is R(x) = sign(x)·min(x², 1)/2, whose derivative is |x|·1[|x| < 1]; the default
    reference (α times the surrogate's primitive) agrees with it, and the surrogate's primitive alone does not.
    """
    quantizer = ste.quantizers.MagnitudeAwareSign()
    ste.testing.check_gradient(quantizer, GRID)
    reference = lambda x: np.sign(x) * np.minimum(x * x, 1.0) / 2.0  # noqa: E731
    ste.testing.check_gradient(quantizer, GRID, reference=reference, elementwise=True)
    with pytest.raises(AssertionError):
        ste.testing.check_gradient(quantizer, GRID, reference=lambda x: np.clip(x, -1.0, 1.0), elementwise=True)
    rows = np.random.default_rng(3).normal(size=(16, 3)) + 1.234567e-3  # α per column: mean over rows
    ste.testing.check_gradient(quantizer, rows)


def test_a_wrong_reference_still_fails():
    with pytest.raises(AssertionError):
        ste.testing.check_gradient("dorefa(bits=2)", GRID, reference=lambda x: np.clip(x, 0.0, 2.0), elementwise=True)


@pytest.mark.parametrize("name", ste.quantizers.names())
def test_every_builtin_quantizer_passes_check_gradient(name):
    """Every quantizer name: its gradient equals the derivative of its documented reference (issue 22.A4)."""
    quantizer = ste.quantizers.get(name)
    x = np.random.default_rng(5).normal(0.0, 1.5, size=(12, 3)) + 1.234567e-3
    quantizer(x)  # builds a quantizer with variables
    if not quantizer.weights:
        ste.testing.check_gradient(quantizer, x)
        ste.testing.check_gradient(quantizer, GRID)
        return
    # a quantizer with a variable is checked as its op(x, v), against a numpy reference of both inputs
    variable = quantizer.weights[0].numpy()
    if name == "pact":
        hyperparams = {"bits": quantizer.bits}
        reference = pact_reference(x, float(variable), quantizer.bits)
    else:
        assert name == "lsq", f"quantizer {name!r} has variables but no reference here; add one"
        hyperparams = {"q_n": quantizer.q_n, "q_p": quantizer.q_p}
        reference = lsq_reference(x, float(variable), quantizer.q_n, quantizer.q_p)
    ste.testing.check_gradient(
        quantizer.op, (x, variable.astype(np.float64)), hyperparams=hyperparams, reference=reference
    )
    with pytest.raises(AssertionError):  # the reference is not vacuous: doubling it fails
        ste.testing.check_gradient(
            quantizer.op,
            (x, variable.astype(np.float64)),
            hyperparams=hyperparams,
            reference=lambda *t, **k: 2 * reference(*t, **k),
        )


@pytest.mark.parametrize("quantizer", [ste.quantizers.PACT, "lsq"])
def test_a_quantizer_with_variables_is_refused_with_the_fix(quantizer):
    with pytest.raises(ste.errors.CallError, match="variables"):
        ste.testing.check_gradient(quantizer, GRID)


def test_unknown_names_still_raise_the_surrogate_error():
    with pytest.raises(ste.errors.UnknownSurrogateError):
        ste.testing.check_gradient("ste_sing", GRID)


@pytest.mark.parametrize(("name", "params"), entry_cases(), ids=[case_id(*c) for c in entry_cases()])
def test_every_builtin_surrogate_passes_check_gradient(name, params):
    """Every built-in surrogate and parameter set of the shared table: its derivative is its primitive's."""
    surrogate = ste.registry.get(name, **params)
    ste.testing.check_gradient(surrogate, GRID)
    ste.testing.check_finite(surrogate)
