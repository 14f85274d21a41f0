"""Helpers for testing backward rules, usable from pytest (failures are ``AssertionError``s).

>>> import numpy as np, ste, ste.testing
>>> ste.testing.check_gradient("sigmoid_surrogate(beta=4.0)", np.linspace(-3, 3, 101))
"""

from ._tools._gradcheck import CheckTarget, check_finite, check_gradient, default_tolerances

__all__ = ["CheckTarget", "check_finite", "check_gradient", "default_tolerances"]
