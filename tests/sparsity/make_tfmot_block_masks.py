"""Writes tests/data/tfmot_block_masks.npz: TFMOT 0.8.1's own block masks, for test_tfmot_block_masks.py.

Run it with a Python that has TensorFlow, tf-keras and tensorflow-model-optimization 0.8 (never a dependency of ste):
``TF_USE_LEGACY_KERAS=1 python tests/sparsity/make_tfmot_block_masks.py``. It calls TFMOT's ``pruning_impl.Pruning``
mask update, which ``prune_low_magnitude``'s wrapper runs at each pruning step. Keys: ``w|<rows>x<cols>`` holds a
float32 weight; ``<rows>x<cols>|<bh>x<bw>|<pooling>|<sparsity>`` holds TFMOT's mask for it (absent where TFMOT itself
fails: a block covering all rows or all columns pools to one row or column, which TFMOT squeezes to rank 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow_model_optimization.python.core.sparsity.keras import pruning_impl, pruning_schedule

OUT = Path(__file__).resolve().parents[1] / "data" / "tfmot_block_masks.npz"

SHAPES = [(6, 6), (6, 7), (5, 7), (7, 5), (9, 4), (3, 5), (10, 13), (2, 9), (17, 6)]
BLOCKS = [(2, 3), (4, 4), (1, 2), (3, 1), (3, 2), (2, 2), (5, 5)]
SPARSITIES = [0.5, 0.8]


def tfmot_mask(w: np.ndarray, block: tuple[int, int], pooling: str, sparsity: float) -> np.ndarray:
    weight = tf.Variable(w)
    mask = tf.Variable(tf.ones_like(w))
    threshold = tf.Variable(tf.zeros((), tf.float32))
    pruning = pruning_impl.Pruning(
        lambda: tf.constant(0, tf.int64),
        [(weight, mask, threshold)],
        pruning_schedule.ConstantSparsity(sparsity, 0, frequency=1),
        block,
        pooling,
    )
    _, new_mask = pruning._maybe_update_block_mask(weight)
    return np.asarray(new_mask).astype(bool)


def main() -> None:
    rng = np.random.default_rng(34)
    out = {}
    for rows, cols in SHAPES:
        w = rng.normal(size=(rows, cols)).astype(np.float32)
        out[f"w|{rows}x{cols}"] = w
        for bh, bw in BLOCKS:
            for pooling in ("AVG", "MAX"):
                for sparsity in SPARSITIES:
                    try:
                        mask = tfmot_mask(w, (bh, bw), pooling, sparsity)
                    except ValueError:  # TFMOT squeezes a pooled weight of one row or column to rank 1 and fails
                        continue
                    out[f"{rows}x{cols}|{bh}x{bw}|{pooling}|{sparsity}"] = mask
    np.savez_compressed(OUT, **out)


if __name__ == "__main__":
    main()
