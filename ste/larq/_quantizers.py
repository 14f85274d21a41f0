"""larq 0.14's quantizer classes: the same names, parameter names, forward values and gradients, on Keras 3.

=========================  =========================================================================
larq name (spec string)    ste equivalent
=========================  =========================================================================
``ste_sign``               ``Sign(surrogate=straight_through(clip=clip_value))``
``approx_sign``            ``Sign(surrogate="approx_sign")``
``swish_sign``             ``Sign(surrogate=swish_sign(beta=beta))``
``ste_heaviside``          ``Heaviside(surrogate=straight_through(clip=clip_value))``
``ste_tern``               ``Ternary(threshold_value, ternary_weight_networks, straight_through(clip_value))``
``magnitude_aware_sign``   ``MagnitudeAwareSign(surrogate=straight_through(clip=clip_value))``
``dorefa_quantizer``       ``DoReFa(bits=k_bit, mode=mode)``
=========================  =========================================================================

Each class subclasses its ste equivalent and translates larq's arguments when constructed. ``clip_value=None`` means
no clipping, as in larq. larq's ``metrics=["flip_ratio"]`` on a quantizer is accepted: the
layer quantizing a kernel with it tracks that kernel's flip ratio (as ``QuantDense(..., metrics=["flip_ratio"])``,
see :mod:`ste.metrics`).

:func:`ste.quantizers.get` also reads larq's own forms (installed here through :func:`ste.quantizers.add_form`), so
configs saved by larq load: a class name (``"SteSign"``, ``"DoReFa"``) and a config whose ``module`` is larq's
(``{"module": "larq.quantizers", "class_name": "SteSign", "config": {...}}``, or tf.keras 2's
``{"class_name": "SteSign", "config": {...}}``). The spec names (``"ste_sign"``, ...) are registered with
:func:`ste.quantizers.register`, and the classes with Keras under package ``ste`` (``"ste>SteSign"``), the name saved
``.keras`` files hold. ``"magnitude_aware_sign"`` is also ste's own name (:class:`ste.quantizers.MagnitudeAwareSign`):
:func:`get` here reads it as larq's class (``LARQ_SPECS``), :func:`ste.quantizers.get` as ste's. ``DoReFa`` and
``MagnitudeAwareSign`` save ste's config (``bits``, ``surrogate``) under package ``ste.larq``
(``"ste.larq>DoReFa"``), and take those keywords back when loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from .. import quantizers as _ste_quantizers
from ..errors import ParameterError, SpecError, STEError, UnknownQuantizerError
from ..quantizers import Heaviside, NoOp, Quantizer, QuantizerLike, Sign, Ternary, add_form, register
from ..registry import StraightThrough, SurrogateLike, parse_spec
from ..registry import get as get_surrogate
from ._arguments import check_number

__all__ = [
    "ApproxSign",
    "DoReFa",
    "DoReFaQuantizer",
    "MagnitudeAwareSign",
    "SteHeaviside",
    "SteSign",
    "SteTern",
    "SwishSign",
    "get",
]


def _clip(owner: str, clip_value: float | None) -> float | None:
    return None if clip_value is None else check_number(owner, "clip_value", clip_value, positive=True)


@keras.saving.register_keras_serializable(package="ste")
@register("ste_sign")
class SteSign(Sign):
    """larq's ``SteSign`` / ``"ste_sign"``: sign (sign(0) = +1) with gradient dy·1[abs(x) <= clip_value]."""

    binary_values = (-1.0, 1.0)

    def __init__(self, clip_value: float | None = 1.0, **kwargs: Any) -> None:
        self.clip_value = _clip("SteSign", clip_value)
        super().__init__(surrogate=get_surrogate("straight_through", clip=self.clip_value), **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**Quantizer.get_config(self), "clip_value": self.clip_value}


@keras.saving.register_keras_serializable(package="ste")
@register("approx_sign")
class ApproxSign(Sign):
    """larq's ``ApproxSign`` / ``"approx_sign"`` (Bi-Real Net): gradient dy·(2 − 2·abs(x))·1[abs(x) <= 1]."""

    binary_values = (-1.0, 1.0)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(surrogate="approx_sign", **kwargs)

    def get_config(self) -> dict[str, Any]:
        return dict(Quantizer.get_config(self))


@keras.saving.register_keras_serializable(package="ste")
@register("swish_sign")
class SwishSign(Sign):
    """larq's ``SwishSign`` / ``"swish_sign"`` (BNN+): gradient dy·β(2 − βx·tanh(βx/2))/(1 + cosh(βx))."""

    binary_values = (-1.0, 1.0)

    def __init__(self, beta: float = 5.0, **kwargs: Any) -> None:
        self.beta = check_number("SwishSign", "beta", beta, positive=True)
        super().__init__(surrogate=get_surrogate("swish_sign", beta=self.beta), **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**Quantizer.get_config(self), "beta": self.beta}


@keras.saving.register_keras_serializable(package="ste")
@register("ste_heaviside")
class SteHeaviside(Heaviside):
    """larq's ``SteHeaviside`` / ``"ste_heaviside"``: 1 where x > 0 else 0; gradient dy·1[abs(x) <= clip_value]."""

    binary_values = (0.0, 1.0)

    def __init__(self, clip_value: float | None = 1.0, **kwargs: Any) -> None:
        self.clip_value = _clip("SteHeaviside", clip_value)
        super().__init__(surrogate=get_surrogate("straight_through", clip=self.clip_value), **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**Quantizer.get_config(self), "clip_value": self.clip_value}


@keras.saving.register_keras_serializable(package="ste")
@register("ste_tern")
class SteTern(Ternary):
    """larq's ``SteTern`` / ``"ste_tern"``: ternary with Δ = threshold_value (or TWN's 0.7·mean(abs(x)));
    gradient dy·1[abs(x) <= clip_value]."""

    def __init__(
        self,
        threshold_value: float = 0.05,
        ternary_weight_networks: bool = False,
        clip_value: float | None = 1.0,
        **kwargs: Any,
    ) -> None:
        self.clip_value = _clip("SteTern", clip_value)
        super().__init__(
            threshold=threshold_value,
            ternary_weight_networks=ternary_weight_networks,
            surrogate=get_surrogate("straight_through", clip=self.clip_value),
            **kwargs,
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **Quantizer.get_config(self),
            "threshold_value": self.threshold,
            "ternary_weight_networks": self.ternary_weight_networks,
            "clip_value": self.clip_value,
        }


@keras.saving.register_keras_serializable(package="ste.larq")
class MagnitudeAwareSign(_ste_quantizers.MagnitudeAwareSign):
    """larq's ``MagnitudeAwareSign`` / ``"magnitude_aware_sign"`` (Bi-Real Net): α·sign(x) (sign(0) = +1),
    α = mean(abs(x)) over every axis but the last, held constant in the backward pass; gradient
    dy·α·1[abs(x) <= clip_value] (no clipping for ``None``).

    ``ste.quantizers.MagnitudeAwareSign`` with ``surrogate=straight_through(clip=clip_value)``; its config is
    ste's (``surrogate``), which this class also takes (keyword only, instead of ``clip_value``).
    """

    def __init__(
        self, clip_value: float | None = 1.0, *, surrogate: SurrogateLike | None = None, **kwargs: Any
    ) -> None:
        if surrogate is None:
            surrogate = get_surrogate("straight_through", clip=_clip("MagnitudeAwareSign", clip_value))
        elif clip_value != 1.0:
            raise ParameterError(
                f"MagnitudeAwareSign: give larq's clip_value= or ste's surrogate=, not both (received "
                f"clip_value={clip_value!r}, surrogate={surrogate!r}). Fix: MagnitudeAwareSign(clip_value=...) as in "
                f"larq, or ste.quantizers.MagnitudeAwareSign(surrogate=...)."
            )
        super().__init__(surrogate=surrogate, **kwargs)

    @property
    def clip_value(self) -> float | None:
        """The straight-through estimator's clip (``None``: no clipping), as larq's attribute."""
        if not isinstance(self.surrogate, StraightThrough):
            raise AttributeError(
                f"MagnitudeAwareSign has no clip_value: its surrogate is {self.surrogate!r}, not straight_through."
            )
        clip: float | None = self.surrogate.params["clip"]
        return clip


@keras.saving.register_keras_serializable(package="ste.larq")
@register("dorefa_quantizer")
class DoReFa(_ste_quantizers.DoReFa):
    """larq's ``DoReFa`` / ``DoReFaQuantizer`` / ``"dorefa_quantizer"``: k_bit-bit DoReFa.

    ``mode="activations"``: round(n·clip(x, 0, 1))/n with n = 2^k_bit − 1, gradient dy·1[0 <= x <= 1];
    ``mode="weights"``: 2·round(n·(tanh(x)/(2m) + 1/2))/n − 1, m = max(abs(tanh(x))), gradient dy·(1 − tanh²(x))/m.
    ``ste.quantizers.DoReFa`` with ``bits=k_bit``; its config is ste's (``bits``), which this class also takes
    (keyword only, instead of ``k_bit``).
    """

    def __init__(self, k_bit: int = 2, mode: str = "activations", *, bits: int | None = None, **kwargs: Any) -> None:
        if bits is not None and k_bit not in (2, bits):
            raise ParameterError(
                f"DoReFa: give larq's k_bit= or ste's bits=, not both (received k_bit={k_bit!r}, bits={bits!r}). "
                f"Fix: DoReFa(k_bit=...) as in larq, or ste.quantizers.DoReFa(bits=...)."
            )
        super().__init__(bits=k_bit if bits is None else bits, mode=mode, **kwargs)


#: larq's backwards-compatible name of ``DoReFa``.
DoReFaQuantizer = DoReFa

for _cls in (SteSign, ApproxSign, SwishSign, SteHeaviside, SteTern, MagnitudeAwareSign, DoReFa):
    _cls.__module__ = "ste.larq.quantizers"  # their public module (shown by repr, help and python -m ste)


#: larq 0.14's quantizer class names (and aliases) -> the ste classes that take their configs.
LARQ_CLASSES: dict[str, type[Quantizer]] = {
    "SteSign": SteSign,
    "ApproxSign": ApproxSign,
    "SwishSign": SwishSign,
    "SteHeaviside": SteHeaviside,
    "SteTern": SteTern,
    "MagnitudeAwareSign": MagnitudeAwareSign,
    "DoReFa": DoReFa,
    "DoReFaQuantizer": DoReFa,
    "NoOp": NoOp,
    "NoOpQuantizer": NoOp,
}


def _is_larq_config(config: Mapping[str, Any]) -> bool:
    module = config.get("module")
    if isinstance(module, str):
        return module == "larq" or module.startswith("larq.")
    return "registered_name" not in config and config.get("class_name") in LARQ_CLASSES  # tf.keras 2's form


def from_larq(identifier: Any) -> Quantizer | None:
    """The quantizer a larq class name or larq config describes (``None``: not one of larq's forms)."""
    if isinstance(identifier, str):
        cls = LARQ_CLASSES.get(identifier)
        return None if cls is None else cls()
    if not isinstance(identifier, Mapping) or not _is_larq_config(identifier):
        return None
    name = identifier.get("class_name")
    cls = LARQ_CLASSES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise UnknownQuantizerError(
            f"the larq quantizer config {dict(identifier)!r} names class {name!r}, which larq 0.14 does not define; "
            f"larq's quantizer classes are {sorted(LARQ_CLASSES)}. Fix: for a quantizer of your own, pass the object "
            f"itself (or register it with ste.larq.utils.register_keras_custom_object)."
        )
    config = identifier.get("config", {})
    return cls.from_config(dict(config) if isinstance(config, Mapping) else {})  # type: ignore[no-any-return]


add_form(from_larq)

#: Spec names larq and ste share, with larq's meaning: :func:`get` reads them as these classes (larq's arguments).
LARQ_SPECS: dict[str, type[Quantizer]] = {"magnitude_aware_sign": MagnitudeAwareSign}


def get(identifier: QuantizerLike) -> Any:
    """larq's ``get``: :func:`ste.quantizers.get` (which reads larq's spec names, class names and saved configs once
    ``ste.larq`` is loaded), except that a name larq and ste share means larq's class (``LARQ_SPECS``):
    ``"magnitude_aware_sign(clip_value=0.5)"`` is :class:`MagnitudeAwareSign` with larq's ``clip_value``."""
    if isinstance(identifier, str):
        try:
            name, args, kwargs = parse_spec(identifier)
        except SpecError:
            name = ""  # not a spec string: ste.quantizers.get explains
        cls = LARQ_SPECS.get(name)
        if cls is not None:
            try:
                return cls(*args, **kwargs)
            except (TypeError, ValueError) as error:
                if isinstance(error, STEError):
                    raise
                raise ParameterError(
                    f"quantizer spec {identifier!r} ({cls.__name__}, larq's arguments): cannot be built ({error})."
                ) from None
    return _ste_quantizers.get(identifier)
