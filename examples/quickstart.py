"""The three questions `ste` answers, each in one line, with the gradients printed next to a numpy reference.

Run: python examples/quickstart.py
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

import ste

x = tf.constant([-3.0, -1.0, -0.25, 0.0, 0.25, 1.0, 3.0])


def forward_and_gradient(op: ste.STEFunction, x: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    return y.numpy(), tape.gradient(y, x).numpy()


def show(title: str, op: ste.STEFunction, expected_grad: np.ndarray) -> None:
    y, grad = forward_and_gradient(op, x)
    print(f"\n{title}\n  op:       {op!r}")
    print(f"  x:        {np.array2string(x.numpy(), precision=3)}")
    print(f"  forward:  {np.array2string(y, precision=3)}")
    print(f"  gradient: {np.array2string(grad, precision=3)}")
    print(f"  numpy:    {np.array2string(expected_grad, precision=3)}")
    assert np.allclose(grad, expected_grad, rtol=1e-5, atol=1e-7), "gradient differs from the numpy reference"


xs = x.numpy().astype(np.float64)  # the reference in float64: float32's 1 - sigmoid(12) keeps 2 digits
sig = 1 / (1 + np.exp(-xs))

# 1. ReLU in the forward pass, sigmoid's derivative in the backward pass.
show(
    "1. relu forward, sigmoid gradient",
    ste.forward(tf.nn.relu).backward_like(tf.nn.sigmoid),
    sig * (1 - sig),
)

# 2. A hard 0/1 mask that still passes a gradient: identity, or a sigmoid surrogate of slope 4.
mask = ste.forward(lambda t: tf.cast(t > 0, t.dtype)).backward("identity")
show("2a. hard mask, identity gradient", mask, np.ones_like(xs))
s4 = 1 / (1 + np.exp(-4 * xs))
soft_mask = ste.forward(lambda t: tf.cast(t > 0, t.dtype)).backward("sigmoid_surrogate", beta=4.0)
show("2b. hard mask, sigmoid_surrogate(beta=4) gradient", soft_mask, 4 * s4 * (1 - s4))

# 3. Keep sigmoid in the forward pass, but let backprop skip its derivative.
show("3. sigmoid forward, identity gradient", ste.forward(tf.sigmoid).backward("identity"), np.ones_like(xs))

# The classic: binarize with sign, clipped straight-through gradient.
show(
    "sign forward, straight_through(clip=1) gradient",
    ste.forward(tf.sign).backward("straight_through", clip=1.0),
    (np.abs(xs) <= 1).astype(np.float64),
)
print("\nAll gradients match their numpy references.")
