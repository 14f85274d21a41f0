"""Recipe: a hard 0/1 mask, cast(score > 0), that still passes a gradient to
the scores.

Run: python examples/recipe_differentiable_mask.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

import ste


# Forward: exactly 0 or 1. Backward: the sigmoid surrogate, beta·s·(1 − s)
# with s = sigmoid(beta·score).
@ste.backward("sigmoid_surrogate", beta=4.0)
def hard_mask(score: tf.Tensor) -> tf.Tensor:
    return tf.cast(score > 0, score.dtype)


# The plain straight-through version: the gradient passes through as if the
# mask were the identity.
straight_mask = ste.forward(
    lambda score: tf.cast(score > 0, score.dtype)
).backward("identity")


def learn_mask(
    steps: int = 150, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Learn which of 6 features a linear target uses, through a hard mask on
    learnable scores.

    Returns (learned 0/1 mask, true mask).
    """
    rng = np.random.default_rng(seed)
    true_mask = np.array([1, 0, 1, 0, 0, 1], dtype=np.float32)
    weights = np.array([1.5, -2.0, -1.0, 0.7, 2.5, 1.0], dtype=np.float32)
    features = rng.normal(size=(512, 6)).astype(np.float32)
    target = features @ (weights * true_mask)

    # every feature starts switched on
    scores = tf.Variable(np.full(6, 0.1, dtype=np.float32))
    optimizer = tf.keras.optimizers.SGD(0.05)
    for _ in range(steps):
        with tf.GradientTape() as tape:
            prediction = tf.linalg.matvec(features, weights * hard_mask(scores))
            loss = tf.reduce_mean((prediction - target) ** 2)
        optimizer.apply_gradients([(tape.gradient(loss, scores), scores)])
    return hard_mask(scores).numpy(), true_mask


def main() -> None:
    score = tf.constant([-1.0, -0.25, 0.0, 0.25, 1.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(score)
        soft, straight = hard_mask(score), straight_mask(score)
    print("score:              ", score.numpy())
    print("mask (forward):     ", soft.numpy())
    print(
        "sigmoid surrogate:  ", np.round(tape.gradient(soft, score).numpy(), 4)
    )
    print("identity (STE):     ", tape.gradient(straight, score).numpy())

    learned, true_mask = learn_mask()
    print("learned mask:", learned, " true mask:", true_mask)


if __name__ == "__main__":
    main()
