"""Block masks against TFMOT 0.8.1's own (recorded by tests/sparsity/make_tfmot_block_masks.py): AVG and MAX pooling,
blocks that divide the weight and blocks that do not (where TFMOT's ``SAME`` pooling pads before and after)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import ste

DATA = Path(__file__).resolve().parents[1] / "data" / "tfmot_block_masks.npz"


def _cases() -> list[str]:
    with np.load(DATA) as data:
        return [key for key in data.files if not key.startswith("w|")]


@pytest.mark.parametrize("key", _cases())
def test_block_mask_equals_tfmot_0_8_1_s_own(key: str) -> None:
    shape, block, pooling, sparsity = key.split("|")
    with np.load(DATA) as data:
        w, expected = data[f"w|{shape}"], data[key]
    bh, bw = (int(n) for n in block.split("x"))
    mask, _ = ste.sparsity.magnitude_mask(tf.constant(w), float(sparsity), (bh, bw), pooling)
    np.testing.assert_array_equal(mask.numpy().astype(bool), expected)


def test_the_recorded_cases_include_partial_blocks() -> None:
    """The data holds blocks that do not divide the weight, where padding before the first row or column matters."""
    partial = []
    for key in _cases():
        shape, block = key.split("|")[:2]
        rows, cols = (int(n) for n in shape.split("x"))
        bh, bw = (int(n) for n in block.split("x"))
        if (-rows % bh) >= 2 or (-cols % bw) >= 2:  # at least one row or column of padding before
            partial.append(key)
    assert len(partial) >= 20


@pytest.mark.parametrize("jit", [False, True])
def test_block_mask_in_tf_function_and_xla_equals_tfmot(jit: bool) -> None:
    with np.load(DATA) as data:
        w, expected = data["w|10x13"], data["10x13|4x4|AVG|0.5"]
    f = tf.function(lambda x: ste.sparsity.magnitude_mask(x, 0.5, (4, 4), "AVG")[0], jit_compile=jit)
    np.testing.assert_array_equal(f(tf.constant(w)).numpy().astype(bool), expected)
