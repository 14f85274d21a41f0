"""Convolutions with a batch normalization folded in during training: :class:`FoldedConv2D`,
:class:`FoldedDepthwiseConv2D`.

The kernel that is fake-quantized is the folded one, W·s with s = γ/√(moving variance + ε) per output channel, so
the int8 model computes what training saw. Training (Krishnamoorthi 2018; PyTorch's ``ConvBn2d``):
z = conv(x, q(W·s))/s + b, then batch normalization of z with the batch's statistics (which also updates the moving
ones, with Keras's momentum and biased variance); computed without the division, as the equal batch norm of
conv(x, q(W·s)) itself (see ``_train``). Inference: conv(x, q(W·s)) + β + s·(b − moving mean), the folded
convolution the TFLite converter turns into one int8 kernel. Without quantization both equal the convolution
followed by the batch norm, and so do their gradients. A channel with s = 0 (γ = 0) has a zero folded kernel and
outputs β; its γ still gets the batch norm's gradient (see ``_train``).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from ..errors import ParameterError
from ..layers import QuantConv2D, QuantDepthwiseConv2D

__all__ = ["FoldedConv2D", "FoldedDepthwiseConv2D"]

_BN_KEYS = ("momentum", "epsilon", "center", "scale")


def _batch_norm(
    raw: tf.Tensor, gamma: tf.Tensor, epsilon: tf.Tensor, beta: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Batch normalization of ``raw`` (channels last) with its batch statistics and a per-channel ``epsilon``:
    y = d·γ/√(v + ε) + β with d = raw − mean, v = mean(d²) (biased); returns y in ``raw``'s dtype, and the mean and
    v (without gradient: they only move the moving statistics). Statistics in ``gamma``'s dtype (float32, or
    float64).

    The gradient is the batch norm's closed form, written with differentiable ops of the forward's tensors (so
    higher orders and forward mode follow by autodiff of it): with x̂ = d/√(v + ε), S₁ = Σ dy and S₂ = Σ dy·d per
    channel over n elements, d raw = dy·a − d·a·S₂/(n(v + ε)) − a·S₁/n, a = γ/√(v + ε); dγ = S₂/√(v + ε);
    dε = −γ·S₂/(2(v + ε)^{3/2}); dβ = S₁. Autodiff of ``tf.nn.moments`` (as Keras's batch norm) takes ten
    activation-size ops for it (two ``Tile``, the variance's ``SquaredDifference`` gradient, ...), this four and
    two sums: the digits net's QAT step took 2.5 % less (per-step A/B in one process)."""
    axes = list(range(raw.shape.rank - 1))
    wide = gamma.dtype

    @tf.custom_gradient  # type: ignore[untyped-decorator]
    def normalize(raw: tf.Tensor, gamma: tf.Tensor, epsilon: tf.Tensor, beta: tf.Tensor) -> Any:
        x = tf.cast(raw, wide)
        mean = tf.reduce_mean(x, axes)
        d = x - mean
        variance = tf.reduce_mean(tf.square(d), axes)
        inv = tf.math.rsqrt(variance + epsilon)
        a = gamma * inv
        y = tf.cast(d * a + beta, raw.dtype)

        def gradient(dy: tf.Tensor, *unused: Any) -> tuple[tf.Tensor, ...]:
            dy = tf.cast(dy, wide)
            n = tf.cast(tf.size(x) // tf.shape(x)[-1], wide)
            s1 = tf.reduce_sum(dy, axes)
            s2 = tf.reduce_sum(dy * d, axes)
            draw = dy * a + d * (-a * tf.square(inv) * s2 / n) - a * s1 / n
            return tf.cast(draw, raw.dtype), inv * s2, -0.5 * gamma * inv * tf.square(inv) * s2, s1

        return (y, tf.stop_gradient(mean), tf.stop_gradient(variance)), gradient

    y, mean, variance = normalize(raw, gamma, epsilon, beta)
    return y, mean, variance


class _BatchNormFolding:
    """Adds the batch norm's four weights and its folding to a quantized convolution."""

    kernel: Any
    bias: Any
    use_bias: bool
    activation: Any
    compute_dtype: Any

    @classmethod
    def options(cls) -> dict[str, tuple[Any, str]]:
        return {**super().options(), "batch_norm": (None, "dict[str, Any]")}  # type: ignore[misc]

    def _apply_options(self, options: dict[str, Any]) -> None:
        config = dict(options.pop("batch_norm") or {})
        unknown = sorted(set(config) - set(_BN_KEYS))
        if unknown:
            raise ParameterError(f"{type(self).__name__}: batch_norm takes {list(_BN_KEYS)}; received {unknown}.")
        self.batch_norm = {"momentum": 0.99, "epsilon": 1e-3, "center": True, "scale": True, **config}
        super()._apply_options(options)  # type: ignore[misc]

    def _options_config(self) -> dict[str, Any]:
        return {**super()._options_config(), "batch_norm": dict(self.batch_norm)}  # type: ignore[misc]

    def _channels(self) -> int:
        shape = self.kernel.shape
        return int(shape[-2] * shape[-1]) if isinstance(self, keras.layers.DepthwiseConv2D) else int(shape[-1])

    def build(self, input_shape: Any) -> None:
        super().build(input_shape)  # type: ignore[misc]
        channels = self._channels()

        def add(name: str, initializer: str, trainable: bool) -> Any:
            # float32 under mixed precision, read without autocasting (the moving statistics keep their precision)
            return self.add_weight(  # type: ignore[attr-defined]
                name=name, shape=(channels,), initializer=initializer, trainable=trainable, autocast=False
            )

        self.gamma = add("gamma", "ones", self.batch_norm["scale"])
        self.beta = add("beta", "zeros", self.batch_norm["center"])
        self.moving_mean = add("moving_mean", "zeros", False)
        self.moving_variance = add("moving_variance", "ones", False)

    def _saved_variables(self) -> list[Any]:
        kernel = self._kernel if hasattr(self, "_kernel") else self.kernel  # Keras's Conv2D keeps it as _kernel
        bias = [self.bias] if self.use_bias else []
        return [kernel, *bias, self.gamma, self.beta, self.moving_mean, self.moving_variance]

    def save_own_variables(self, store: Any) -> None:
        """Every variable, the batch norm's included (Keras's convolutions save only the kernel and bias)."""
        if getattr(self, "built", False):
            for index, variable in enumerate(self._saved_variables()):
                store[str(index)] = variable

    def load_own_variables(self, store: Any) -> None:
        variables = self._saved_variables()
        if len(store.keys()) != len(variables):
            raise ValueError(
                f"{type(self).__name__} '{getattr(self, 'name', '')}' expected {len(variables)} saved variables "
                f"(kernel, bias if any, gamma, beta, moving_mean, moving_variance); the file has {len(store.keys())}."
            )
        for index, variable in enumerate(variables):
            variable.assign(store[str(index)])

    def _fold_scale(self) -> tf.Tensor:
        gamma = tf.cast(self.gamma.value, self.compute_dtype)
        variance = tf.cast(self.moving_variance.value, self.compute_dtype)
        return gamma * tf.math.rsqrt(variance + tf.constant(self.batch_norm["epsilon"], self.compute_dtype))

    def quantize_kernel(self, slot: Any) -> tf.Tensor:
        """The folded kernel W·s after the kernel quantizer."""
        return self._folded_kernel(self._fold_scale())

    def _channels_of_kernel(self, channels: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
        """A per-output-channel tensor shaped to broadcast against the kernel (a depthwise kernel's channel is
        in·multiplier)."""
        if isinstance(self, keras.layers.DepthwiseConv2D):  # kernel (h, w, in, multiplier): channel in·multiplier
            return tf.reshape(channels, kernel.shape[-2:])
        return channels

    def _folded_kernel(self, scale: tf.Tensor) -> tf.Tensor:
        kernel = tf.cast(self.kernel.value, self.compute_dtype)
        quantizer = getattr(self, self.slots[0].quantizer)  # type: ignore[attr-defined]
        if getattr(quantizer, "constrains_before_folding", False):  # collaborative QAT: constrain W, then scale it
            return quantizer(kernel, channel_scale=self._channels_of_kernel(scale, kernel))
        folded = kernel * self._channels_of_kernel(scale, kernel)
        return folded if quantizer is None else quantizer(folded)

    def _train(self, raw: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
        """The training output from the raw convolution conv(x, q(W·s)), and the moving statistics' update.

        With z = raw/s + b (s ≠ 0), z's batch mean is mean(raw)/s + b and its variance var(raw)/s², so the batch
        norm of z is (raw − mean(raw))·|γ|/√(var(raw) + s²ε) + β: the sign of s is that of γ, and b cancels. That is
        the batch norm of ``raw`` itself, with scale |γ| and a per-channel ε' = s²ε (:func:`_batch_norm`): no
        division of the activation by s, whose four activation-size divisions (one forward, three backward) per
        layer were the largest extra cost of the QAT step against TFMOT's (docs/performance.md). The moving
        statistics are z's, with Keras's momentum and biased variance.

        A channel with s = 0 (γ = 0) has a zero folded kernel, so conv(x, q(W·s)) would hold nothing of z there,
        whose normalized value x̂ is γ's gradient (Σ dy·x̂) and whose statistics the moving ones follow. In training
        that channel convolves with the float kernel instead (``call``; the quantizer's straight-through stand-in,
        and the limit of raw/s as γ → 0 without one): raw is z − b there, and the channel is the unfolded batch
        norm with γ itself and ε, whose output is β and whose derivatives of every order are the batch norm's."""
        wide = tf.float64 if raw.dtype == tf.float64 else tf.float32
        s = tf.cast(scale, wide)
        zero = tf.equal(s, 0)
        epsilon = tf.where(zero, tf.ones_like(s), tf.square(s)) * self.batch_norm["epsilon"]
        signed = tf.cast(self.gamma.value, wide)
        gamma = tf.where(zero, signed, tf.abs(signed))
        beta = tf.cast(tf.convert_to_tensor(self.beta.value), wide)  # a tensor: the op takes no variables
        if self.use_bias:  # b cancels in the batch norm; 0·b keeps its gradient a zero tensor, as Keras's has
            beta = beta + 0.0 * tf.cast(self.bias.value, wide)
        y, mean, variance = _batch_norm(raw, gamma, epsilon, beta)
        inverse = 1.0 / tf.where(zero, tf.ones_like(s), s)
        batch_mean = mean * inverse + (tf.cast(self.bias.value, wide) if self.use_bias else 0.0)
        momentum = self.batch_norm["momentum"]
        for moving, batch in ((self.moving_mean, batch_mean), (self.moving_variance, variance * tf.square(inverse))):
            batch = tf.cast(tf.stop_gradient(batch), moving.dtype)
            moving.assign(moving.value * momentum + batch * (1.0 - momentum))
        return y

    def call(self, inputs: Any, training: Any = None) -> Any:
        scale = self._fold_scale()
        kernel = self._folded_kernel(scale)
        if training:  # a channel with s = 0 convolves with its float kernel (see _train): one kernel-size select
            dead = self._channels_of_kernel(tf.equal(scale, 0), kernel)
            kernel = tf.where(dead, tf.cast(self.kernel.value, kernel.dtype), kernel)
        x, padding = self._padded(self.quantize_inputs(inputs))  # type: ignore[attr-defined]
        raw = self._convolve(x, [kernel], padding)  # type: ignore[attr-defined]
        if training:
            y = self._train(raw, scale)
        else:
            dtype = raw.dtype
            bias = tf.cast(self.bias.value, dtype) if self.use_bias else tf.zeros([], dtype)
            y = raw + (tf.cast(self.beta.value, dtype) + scale * (bias - tf.cast(self.moving_mean.value, dtype)))
        return y if self.activation is None else self.activation(y)


@keras.saving.register_keras_serializable(package="ste")
class FoldedConv2D(_BatchNormFolding, QuantConv2D):
    """``QuantConv2D`` followed by a batch normalization folded into it (see the module docstring); the extra
    argument ``batch_norm`` holds the batch norm's ``momentum``, ``epsilon``, ``center`` and ``scale``."""


@keras.saving.register_keras_serializable(package="ste")
class FoldedDepthwiseConv2D(_BatchNormFolding, QuantDepthwiseConv2D):
    """``QuantDepthwiseConv2D`` followed by a folded batch normalization (see :class:`FoldedConv2D`)."""
