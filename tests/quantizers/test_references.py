"""Every quantizer name against the shared numpy reference table (tests/references.py), forward and gradient.

Parametrized over ``ste.quantizers.names()``: a new quantizer without a reference fails here instead of being skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import ste
from tests.references import DTYPES, eps, quantizer_reference

# Rows x channels, seeded normal draws: none lies on a kink or a rounding tie of the default arguments.
_RNG = np.random.default_rng(11)
X = (_RNG.normal(0.0, 1.5, size=(8, 4))).astype(np.float32)
DY = _RNG.uniform(0.5, 1.5, size=X.shape).astype(np.float32)


@pytest.mark.parametrize("name", ste.quantizers.names())
def test_quantizer_matches_its_reference(name: str) -> None:
    reference = quantizer_reference(name)
    quantizer = ste.quantizers.get(name)
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = quantizer(x)
    grad = tape.gradient(y, x, output_gradients=tf.constant(DY))
    want_y, want_dx = reference(X.astype(np.float64))
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-6, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(grad.numpy(), DY * want_dx, rtol=1e-5, atol=1e-6, err_msg=name)


# Zeros in every row and column, beside the seeded draws (and a negative zero): a pruned kernel.
X_PRUNED = X.copy()
X_PRUNED[::3, :] = 0.0
X_PRUNED[:, 1] = 0.0
X_PRUNED[1, 1] = -0.0
ZEROS = X_PRUNED == 0.0
ROOT = Path(__file__).resolve().parents[2]


def _documented(marker: str) -> set[str]:
    """The spec names docs/quantizers.md lists between <!-- marker --> and <!-- /marker -->."""
    text = (ROOT / "docs" / "quantizers.md").read_text()
    spans = re.findall(rf"<!-- {marker} -->(.*?)<!-- /{marker} -->", text, flags=re.DOTALL)
    assert spans, f"docs/quantizers.md has no <!-- {marker} --> list"
    return {name for span in spans for name in re.findall(r"`(\w+)`", span)}


def _reference_keeps_zero(name: str) -> bool:
    want = quantizer_reference(name)(X_PRUNED.astype(np.float64))[0][ZEROS]
    return bool(np.all(want == 0.0))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", ste.quantizers.names())
def test_an_exact_zero_maps_to_what_the_reference_gives_it_in_every_dtype(name: str, dtype: tf.DType) -> None:
    """A quantizer whose numpy reference maps 0 to 0 gives exactly 0 (a pruned weight stays pruned) in every float
    dtype; one whose reference cannot keep 0 gives its documented non-zero value there."""
    want = quantizer_reference(name)(X_PRUNED.astype(np.float64))[0][ZEROS]
    y = tf.cast(ste.quantizers.get(name)(tf.constant(X_PRUNED, dtype)), tf.float64).numpy()[ZEROS]
    if _reference_keeps_zero(name):
        np.testing.assert_array_equal(y, 0.0, err_msg=f"{name} on {dtype.name}")
    else:  # atol 0: where the reference is 0 (magnitude_aware_sign's α of an all-zero column) so is the output
        np.testing.assert_allclose(y, want, rtol=eps(dtype) * 8, atol=0.0, err_msg=f"{name} on {dtype.name}")


def test_the_docs_list_exactly_the_quantizers_that_keep_zero() -> None:
    """docs/quantizers.md ("Exact zeros") names every quantizer name, each on the side its reference puts it."""
    keeps = {name for name in ste.quantizers.names() if _reference_keeps_zero(name)}
    assert _documented("keeps-zero") == keeps
    assert _documented("loses-zero") == set(ste.quantizers.names()) - keeps
