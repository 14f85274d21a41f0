"""Item 4: one training step of a binarized convolutional network, batch 64, 32×32×3 inputs, 10 classes.

Both networks have the same layers and the same initial weights: three 3×3 binarized convolutions (the first keeps
real-valued inputs, as in BinaryNet), batch normalization, max pooling, and a binarized dense classifier; kernels are
binarized with sign and a clipped straight-through estimator, activations likewise, and kernels are clipped to
[-1, 1] after every update (``weight_clip``).

* ``ste``: ``ste.layers.QuantConv2D`` / ``ste.layers.QuantDense`` when ``ste.layers`` exists; otherwise Keras layers
  whose quantizer is ``ste.forward(sign).backward("straight_through")`` (the JSON says which).
* ``ste_flip_ratio``: the ``ste`` network with ``metrics=["flip_ratio"]`` on every quantized layer (larq's flip-ratio
  metric); ``flip_ratio_cost`` is its median per-round time ratio to ``ste`` (target ≤ 1.05).
* ``custom_gradient``: the same Keras layers with a hand-written ``tf.custom_gradient`` quantizer (the baseline),
  whose forward uses the same ops as ``ste.quantizers.Sign``; a second copy is timed as an A/A noise check.

The step is ``tf.function``-compiled (forward, loss, gradients, Adam update, constraints), the same code for both.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

import ste

from ._bireal import train_step
from ._timing import alternate, load_average, summarize

__all__ = ["run"]

Quantizer = Callable[[tf.Tensor], tf.Tensor]


def binary_sign(x: tf.Tensor) -> tf.Tensor:
    """+1 where x >= 0 else -1, written with the same ops as ``ste.quantizers.Sign``'s forward."""
    one = tf.ones_like(x)
    return tf.where(x >= 0, one, -one)


def _clipped_ste(x: tf.Tensor) -> Any:
    """The hand-written baseline quantizer: binary_sign forward, dy·1[abs(x) <= 1] backward."""

    @tf.custom_gradient
    def quantize(x: tf.Tensor) -> Any:
        def grad(dy: tf.Tensor) -> tf.Tensor:
            return dy * tf.cast(tf.abs(x) <= tf.constant(1, x.dtype), dy.dtype)

        return binary_sign(x), grad

    return quantize(x)


def _weight_clip(w: Any) -> Any:
    return keras.ops.clip(w, -1.0, 1.0)


class _Quantized:
    """Quantized inputs and kernel for a Keras Conv2D/Dense subclass (the quantizer is given as a callable)."""

    def __init__(self, *args: Any, input_q: Quantizer | None, kernel_q: Quantizer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.input_q = input_q
        self.kernel_q = kernel_q

    def _quantized(self, inputs: Any) -> tuple[Any, Any]:
        if self.input_q is not None:
            inputs = self.input_q(inputs)
        return inputs, self.kernel_q(tf.convert_to_tensor(self.kernel))  # type: ignore[attr-defined]


class _QConv2D(_Quantized, keras.layers.Conv2D):  # type: ignore[misc]
    def call(self, inputs: Any) -> Any:
        return self.convolution_op(*self._quantized(inputs))


class _QDense(_Quantized, keras.layers.Dense):  # type: ignore[misc]
    def call(self, inputs: Any) -> Any:
        return keras.ops.matmul(*self._quantized(inputs))


def _build(kind: str, width: int) -> keras.Model:
    keras.utils.set_random_seed(6)
    common: dict[str, Any] = {"padding": "same", "use_bias": False}
    if kind in ("ste_layers", "ste_flip_ratio"):
        layers = ste.layers
        extra: dict[str, Any] = {"metrics": ["flip_ratio"]} if kind == "ste_flip_ratio" else {}

        def conv(filters: int, first: bool) -> Any:
            return layers.QuantConv2D(
                filters,
                3,
                input_quantizer=None if first else "sign",
                kernel_quantizer="sign",
                kernel_constraint="weight_clip",
                **common,
                **extra,
            )

        def dense(units: int) -> Any:
            return layers.QuantDense(
                units,
                input_quantizer="sign",
                kernel_quantizer="sign",
                kernel_constraint="weight_clip",
                use_bias=False,
                **extra,
            )
    else:
        quantizer: Quantizer = _clipped_ste

        def conv(filters: int, first: bool) -> Any:
            return _QConv2D(
                filters,
                3,
                input_q=None if first else quantizer,
                kernel_q=quantizer,
                kernel_constraint=_weight_clip,
                **common,
            )

        def dense(units: int) -> Any:
            return _QDense(units, input_q=quantizer, kernel_q=quantizer, kernel_constraint=_weight_clip, use_bias=False)

    inputs = keras.Input((32, 32, 3))
    h = conv(width, True)(inputs)
    h = keras.layers.BatchNormalization(scale=False)(h)
    h = conv(width, False)(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.BatchNormalization(scale=False)(h)
    h = conv(2 * width, False)(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.BatchNormalization(scale=False)(h)
    h = keras.layers.Flatten()(h)
    h = dense(10)(h)
    outputs = keras.layers.BatchNormalization(scale=False)(h)
    return keras.Model(inputs, outputs)


def _train_step(model: keras.Model) -> Any:
    return train_step(keras, model)


def _op_counts(step: Any, x: tf.Tensor, y: tf.Tensor) -> Counter[str]:
    """How many ops of each type the traced training step has."""
    return Counter(op.type for op in step.get_concrete_function(x, y).graph.get_operations())


def run(batch: int, width: int, rounds: int, inner: int, warmup: int = 2) -> dict[str, Any]:
    x = tf.random.stateless_uniform([batch, 32, 32, 3], seed=(5, 6), minval=-1.0, maxval=1.0)
    y = tf.random.stateless_uniform([batch], seed=(7, 6), maxval=10, dtype=tf.int32)
    steps = {
        "custom_gradient": _train_step(_build("custom_gradient", width)),
        "ste": _train_step(_build("ste_layers", width)),
        "custom_gradient_copy": _train_step(_build("custom_gradient", width)),  # A/A: the noise level
        "ste_flip_ratio": _train_step(_build("ste_flip_ratio", width)),
    }
    counts = {name: _op_counts(steps[name], x, y) for name in ("custom_gradient", "ste", "ste_flip_ratio")}
    flip_ops = counts.pop("ste_flip_ratio")
    difference = {
        op: counts["ste"][op] - counts["custom_gradient"][op]
        for op in sorted(set(counts["ste"]) | set(counts["custom_gradient"]))
        if counts["ste"][op] != counts["custom_gradient"][op]
    }
    load_before = load_average()
    samples = alternate({name: (lambda s=step: s(x, y)) for name, step in steps.items()}, rounds=rounds, inner=inner)
    flip_cost = statistics.median(f / s for f, s in zip(samples["ste_flip_ratio"], samples["ste"]))
    return {
        "batch": batch,
        "width": width,
        "ste_network": "ste.layers.QuantConv2D / QuantDense",
        "graph_ops": {name: sum(found.values()) for name, found in counts.items()},
        "flip_ratio_graph_ops": sum(flip_ops.values()),
        "graph_op_difference": difference,
        "load_before": load_before,
        "rounds": rounds,
        "inner": inner,
        "results": summarize(samples, "custom_gradient"),
        "flip_ratio_cost": flip_cost,
    }
