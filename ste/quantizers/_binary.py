"""Binary and ternary quantizers: :class:`Sign`, :class:`Heaviside`, :class:`Ternary`, :class:`MagnitudeAwareSign`.

Each is one ``ste`` op: the forward is the exact quantizer, the backward is a surrogate from :mod:`ste.registry`
(``surrogate=``: a registry name, spec string, config dict or :class:`ste.registry.Surrogate`). None rounds.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

import keras
import tensorflow as tf

from .._common._arguments import check_bool, check_number
from .._core._dsl import STEFunction, forward
from .._core._maskrule import mask_rule
from ..errors import ParameterError
from ..registry import HasPrimitive, MaskOnly, Surrogate, SurrogateLike
from ._base import Quantizer, as_tensor, refuse_larq_keyword, register, resolve_surrogate

__all__ = ["Heaviside", "MagnitudeAwareSign", "Sign", "SurrogateQuantizer", "Ternary"]


def binary_sign(x: tf.Tensor) -> tf.Tensor:
    """+1 where x >= 0, else -1 (so sign(0) = +1 and the output is never 0).

    Written as ``SelectV2(x >= 0, 1, -1)`` with scalar constants: the pattern Larq Compute Engine's converter
    matches to turn a binary convolution into a bit-packed ``LceBconv2d`` (see docs/deploying.md).
    """
    return tf.where(x >= 0, tf.constant(1, x.dtype), tf.constant(-1, x.dtype))


def heaviside(x: tf.Tensor) -> tf.Tensor:
    """1 where x > 0, else 0 (so heaviside(0) = 0)."""
    return tf.cast(x > 0, x.dtype)


def _mean_abs(x: tf.Tensor, axis: list[int] | tf.Tensor | None) -> tf.Tensor:
    """mean(abs(x)) over ``axis`` (all axes when None), accumulated in at least float32, returned in x's dtype."""
    wide = tf.float64 if x.dtype == tf.float64 else tf.float32
    return tf.cast(tf.reduce_mean(tf.abs(tf.cast(x, wide)), axis=axis), x.dtype)


def ternarize(x: tf.Tensor, *, threshold: float, ternary_weight_networks: bool) -> tf.Tensor:
    """sign(sign(x + Δ) + sign(x − Δ)): +1 where x >= Δ > 0, −1 where x <= −Δ, 0 in between (larq's formula)."""
    if ternary_weight_networks:
        delta = 0.7 * _mean_abs(x, None)
    else:
        delta = tf.constant(threshold, x.dtype)
    return tf.sign(tf.sign(x + delta) + tf.sign(x - delta))


def magnitude_scale(x: tf.Tensor) -> tf.Tensor:
    """α = mean(abs(x)) over every axis but the last (shape ``[channels]``; a scalar input is its own scale).

    With a rank unknown while tracing (``tf.TensorSpec(None)``) the axes are computed at run time, the same ones.
    """
    rank = x.shape.rank
    if rank is None:
        return _mean_abs(x, tf.range(tf.maximum(tf.rank(x) - 1, 0)))
    return _mean_abs(x, list(range(rank - 1)) if rank else None)


def magnitude_aware_sign(x: tf.Tensor) -> tf.Tensor:
    """α·sign(x) with α = mean(abs(x)) over every axis but the last; sign(0) = +1.

    In a graph α is computed before the sign (a control dependency, the same values): ``abs(x)``, an input-sized
    temporary, is then released before the sign's output exists (a 50-op chain with bit masks peaks lower).
    """
    scale = magnitude_scale(x)
    with tf.control_dependencies([scale]):
        return scale * binary_sign(x)


class SurrogateQuantizer(Quantizer):
    """A quantizer computing ``forward_fn(x)`` in the forward pass and ``dy·d(x)`` in the backward pass, ``d`` a
    registry surrogate.

    A subclass implements the static method :meth:`forward_fn`; ``call`` applies it through one ste op (override
    ``call`` to pass it keyword hyperparameters, as :class:`Ternary` does). See "Write your own quantizer" in
    docs/quantizers.md.

    Class attributes:

    * ``binary_values``: the two values every output takes (``(-1.0, 1.0)`` for :class:`Sign`), so that a binarized
      layer keeps its input as bits; ``None`` otherwise. A subclass does not inherit it: each class that computes
      two values declares them.
    * ``precision``: the number of bits of the output (see :class:`Quantizer`).

    Args:
        surrogate: the backward rule, a registry name, spec string or :class:`ste.registry.Surrogate`
            (default ``"straight_through"``: 1 where abs(x) <= 1).
        **kwargs: keyword arguments of :class:`Quantizer` (``name``, ``metrics``, ...).
    """

    binary_values: ClassVar[tuple[float, float] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "binary_values" not in vars(cls):
            cls.binary_values = None  # two output values belong to one forward: a subclass declares its own

    @staticmethod
    @abc.abstractmethod
    def forward_fn(x: tf.Tensor) -> tf.Tensor:
        """The forward pass: the quantized ``x``, in ``x``'s dtype.

        Args:
            x: the input tensor.
        """

    def __init__(self, surrogate: SurrogateLike = "straight_through", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.surrogate: Surrogate = resolve_surrogate(type(self).__name__, surrogate)
        self.op: STEFunction[..., tf.Tensor] = self._make_op()
        self.built = True  # no weights: Keras need not build it (it cannot for an input of unknown rank)

    def _make_op(self) -> STEFunction[..., tf.Tensor]:
        return forward(type(self).forward_fn).backward(self.surrogate)

    def call(self, inputs: Any) -> tf.Tensor:
        return self.op(as_tensor(inputs, self))

    def gradient_reference(self, x: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor] | None:
        """The surrogate's primitive (the gradient is dy·d(x)), if it has one."""
        return self.surrogate.primitive if isinstance(self.surrogate, HasPrimitive) else None

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "surrogate": self.surrogate.get_config()}


@keras.saving.register_keras_serializable(package="ste")
@register("sign")
class Sign(SurrogateQuantizer):
    """Binarization to −1/+1: forward +1 where x >= 0 else −1 (sign(0) = +1); backward ``dy·d(x)``.

    ``surrogate`` (default ``"straight_through"``, i.e. 1 where abs(x) <= 1) is any registry entry, e.g.
    ``Sign(surrogate="approx_sign")``. No rounding involved. Spec name ``"sign"``.
    """

    precision = 1
    binary_values = (-1.0, 1.0)  # every output is one of them, so a layer may keep it as bits
    forward_fn = staticmethod(binary_sign)


@keras.saving.register_keras_serializable(package="ste")
@register("heaviside")
class Heaviside(SurrogateQuantizer):
    """Binarization to 0/1: forward 1 where x > 0 else 0 (Heaviside(0) = 0); backward ``dy·d(x)``.

    ``surrogate`` defaults to ``"straight_through"`` (1 where abs(x) <= 1). Spec name ``"heaviside"``.
    """

    precision = 1
    binary_values = (0.0, 1.0)  # every output is one of them
    forward_fn = staticmethod(heaviside)


@keras.saving.register_keras_serializable(package="ste")
@register("ternary")
class Ternary(SurrogateQuantizer):
    """Ternarization to −1/0/+1 (Li et al. 2016, Ternary Weight Networks; larq's ``ste_tern``).

    Forward sign(sign(x + Δ) + sign(x − Δ)): +1 where x >= Δ, −1 where x <= −Δ, 0 where abs(x) < Δ (for Δ = 0 this
    is sign(x), 0 at x = 0). Δ is
    ``threshold``, or 0.7·mean(abs(x)) over the whole tensor when ``ternary_weight_networks=True`` (Δ is not
    differentiated). Backward ``dy·d(x)`` with ``surrogate`` (default ``"straight_through"``). No rounding.
    Spec name ``"ternary"``.
    """

    precision = 2
    forward_fn = staticmethod(ternarize)  # type: ignore[assignment]  # takes its hyperparameters by keyword

    def __init__(
        self,
        threshold: float = 0.05,
        ternary_weight_networks: bool = False,
        surrogate: SurrogateLike = "straight_through",
        **kwargs: Any,
    ) -> None:
        self.threshold = check_number(type(self).__name__, "threshold", threshold)
        if self.threshold < 0:
            raise ParameterError(f"{type(self).__name__}: threshold must be >= 0; received {threshold!r}.")
        self.ternary_weight_networks = check_bool(
            type(self).__name__, "ternary_weight_networks", ternary_weight_networks
        )
        super().__init__(surrogate=surrogate, **kwargs)

    def call(self, inputs: Any) -> tf.Tensor:
        return self.op(
            as_tensor(inputs, self), threshold=self.threshold, ternary_weight_networks=self.ternary_weight_networks
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "threshold": self.threshold,
            "ternary_weight_networks": self.ternary_weight_networks,
        }


@keras.saving.register_keras_serializable(package="ste")
@register("magnitude_aware_sign")
class MagnitudeAwareSign(SurrogateQuantizer):
    """Magnitude-aware sign (Liu et al. 2018, Bi-Real Net): α·sign(x), sign(0) = +1.

    α = mean(abs(x)) over every axis but the last (one scale per output channel of a kernel). The backward pass
    treats α as a constant: ``dy·α·d(x)`` with ``surrogate`` (default ``"straight_through"``: 1 where abs(x) <= 1).
    No rounding. Spec name ``"magnitude_aware_sign"``. larq's ``MagnitudeAwareSign(clip_value=...)`` is
    ``ste.larq.quantizers.MagnitudeAwareSign``, this class with ``surrogate=straight_through(clip=clip_value)``.
    """

    precision = 1
    forward_fn = staticmethod(magnitude_aware_sign)

    def __init__(self, surrogate: SurrogateLike = "straight_through", **kwargs: Any) -> None:
        refuse_larq_keyword(
            "MagnitudeAwareSign",
            kwargs,
            "clip_value",
            takes="surrogate= (the backward rule)",
            fix=lambda value: f"MagnitudeAwareSign(surrogate=ste.registry.get('straight_through', clip={value}))",
        )
        super().__init__(surrogate=surrogate, **kwargs)

    def gradient_reference(self, x: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor] | None:
        """α·P(t), P the surrogate's primitive and α = mean(abs(x)) of ``x`` held fixed (the gradient is dy·α·d(x))."""
        if not isinstance(self.surrogate, HasPrimitive):
            return None
        scale = magnitude_scale(tf.convert_to_tensor(x))
        primitive = self.surrogate.primitive

        def scaled(t: tf.Tensor) -> tf.Tensor:
            return tf.cast(scale, t.dtype) * primitive(t)

        return scaled

    def _make_op(self) -> STEFunction[..., tf.Tensor]:
        surrogate = self.surrogate

        def from_input(dy: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
            return surrogate.vjp(dy * magnitude_scale(x), x)

        rule: Callable[..., tf.Tensor] = from_input
        if isinstance(surrogate, MaskOnly):
            # dy·α·d(x) with a mask-only surrogate needs only the mask and α: the op keeps those (bits, one α per
            # channel)
            masked: MaskOnly = surrogate

            def mask_and_scale(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                surrogate.check_dtype(x.dtype)
                scale = magnitude_scale(x)
                with tf.control_dependencies([scale]):  # one input-sized abs(x) at a time, as in the forward
                    return masked.mask(x), scale

            @mask_rule(mask_and_scale)
            def from_mask(dy: tf.Tensor, mask: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
                return masked.vjp_from_mask(dy * scale, mask, scale.dtype)

            rule = from_mask
        rule.__name__ = f"scaled_{surrogate!r}"
        # dy·α·d(x) is elementwise in x (α held constant): the same formula of the input is the JVP of a tangent.
        return forward(type(self).forward_fn).backward(rule, jvp=from_input)
