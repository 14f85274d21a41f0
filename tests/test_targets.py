"""ste.testing.check_gradient and check_finite accept quantizers, quantizer classes and quantizer names."""

from __future__ import annotations

import numpy as np
import pytest

import ste

GRID = np.linspace(-3.0, 3.0, 121) + 1.234567e-3  # off the kinks at |x| = 1


@pytest.mark.parametrize(
    "quantizer",
    ["ste_sign", "ste_sign(clip_value=2.0)", "sign(surrogate='atan(alpha=4)')", ste.quantizers.SwishSign, "ternary"],
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

    So the reference is R(x) = sign(x)·min(x², 1)/2, whose derivative is |x|·1[|x| < 1].
    """
    quantizer = ste.quantizers.MagnitudeAwareSign()
    with pytest.raises(AssertionError):  # the default reference, clip(x, −1, 1), lacks α
        ste.testing.check_gradient(quantizer, GRID)
    reference = lambda x: np.sign(x) * np.minimum(x * x, 1.0) / 2.0  # noqa: E731
    ste.testing.check_gradient(quantizer, GRID, reference=reference, elementwise=True)


def test_a_quantizer_without_surrogate_needs_a_reference():
    with pytest.raises(ste.CallError, match="reference="):
        ste.testing.check_gradient("dorefa(bits=2)", GRID)
    ste.testing.check_gradient("dorefa(bits=2)", GRID, reference=lambda x: np.clip(x, 0.0, 1.0), elementwise=True)
    with pytest.raises(AssertionError):
        ste.testing.check_gradient("dorefa(bits=2)", GRID, reference=lambda x: np.clip(x, 0.0, 2.0), elementwise=True)


@pytest.mark.parametrize("quantizer", [ste.quantizers.PACT, "lsq"])
def test_a_quantizer_with_variables_is_refused_with_the_fix(quantizer):
    with pytest.raises(ste.CallError, match="variables"):
        ste.testing.check_gradient(quantizer, GRID)


def test_unknown_names_still_raise_the_surrogate_error():
    with pytest.raises(ste.UnknownSurrogateError):
        ste.testing.check_gradient("ste_sing", GRID)
