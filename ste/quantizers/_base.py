"""The quantizer base class, the name → quantizer table and :func:`get`.

A quantizer is a Keras 3 layer whose ``call`` applies one ``ste`` op (``ste.forward(...).backward(...)``). It never
autocasts its input: a float16 input gives a float16 output, whatever the layer's dtype policy, so it can sit inside
a mixed-precision layer and quantize that layer's (already cast) kernel.

TensorFlow's CPU kernels treat subnormal inputs as zero (−1e-45 >= 0 is true there), so every comparison below
does too: a subnormal negative input binarizes to +1 and counts as inside a range starting at 0.

Names and spec strings (``"sign"``, ``"sign(surrogate='approx_sign')"``, ``"dorefa(bits=4, mode='activations')"``)
are parsed with :func:`ste.registry.parse_spec` (``ast``, literals only, never ``eval``).
"""

from __future__ import annotations

import abc
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar, Union

import keras
import tensorflow as tf

from .._common._abstract import Extension, check_complete
from .._common._names import NameTable, build
from .._core._inputs import to_input_tensor
from .._keras._configs import rebuild
from .._keras._lookup import publish_activation
from .._patches import apply as apply_patches
from ..errors import ParameterError, RegistrationError, SpecError, UnknownQuantizerError
from ..metrics import check_metric_names
from ..registry import Surrogate, SurrogateLike, parse_spec
from ..registry import get as get_surrogate

__all__ = ["Quantizer", "QuantizerLike", "add_form", "get", "lookup", "names", "register", "serialize", "unregister"]


def _publish(name: str, cls: type[Quantizer] | None) -> None:
    """Tell Keras's activation lookup of a registered (``cls``) or removed (``None``) quantizer name."""
    publish_activation(name, cls, has_weights=cls is not None and cls.has_weights)


_TABLE: NameTable[type[Quantizer]] = NameTable("quantizer", UnknownQuantizerError, on_change=_publish)

Q = TypeVar("Q", bound="type[Quantizer]")

#: What :func:`get` accepts (``None`` means "no quantizer").
QuantizerLike = Union["Quantizer", str, Mapping[str, Any], "type[Quantizer]", Callable[..., Any], None]


class Quantizer(keras.layers.Layer, Extension):  # type: ignore[misc]
    """Base class of ``ste`` quantizers: a Keras layer applying one ``ste`` op elementwise (or per tensor).

    Attributes:
        precision: the number of bits of the output values (``None`` when not fixed); used by :func:`ste.summary`.
        has_weights: a class attribute; True declares that :meth:`build` adds weights (a trainable step size or
            clipping level). Such a quantizer is a layer only: its name is not a Keras activation function
            (``keras.activations.get(name)``), since an activation function cannot own weights.

    Subclasses implement :meth:`call`. Inputs are never autocast (``autocast=False``): the output has the input's
    dtype. Calling a stateless quantizer on a plain tensor or array works like calling a function.
    """

    precision: int | None = None
    has_weights: ClassVar[bool] = False

    def __init__(self, metrics: Sequence[str] | None = None, **kwargs: Any) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self._custom_metrics = check_metric_names(type(self).__name__, metrics)

    @property
    def kernel_metrics(self) -> tuple[str, ...]:
        """The training metrics (``("flip_ratio",)``) that the layer quantizing a kernel with this quantizer tracks
        for that kernel: the ``metrics=`` argument. Not part of the config."""
        return self._custom_metrics

    @kernel_metrics.setter
    def kernel_metrics(self, metrics: Sequence[str]) -> None:
        self._custom_metrics = check_metric_names(type(self).__name__, list(metrics))

    @abc.abstractmethod
    def call(self, inputs: Any) -> tf.Tensor:
        """The quantized ``inputs``, in their dtype.

        Args:
            inputs: a tensor (or anything ``tf.convert_to_tensor`` takes).
        """

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def gradient_reference(self, x: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor] | None:
        """A smooth function whose derivative at ``x`` is this quantizer's gradient (``None``: none is known).

        :func:`ste.testing.check_gradient` and ``python -m ste check`` compare the quantizer's gradient with it.
        Quantities the backward pass holds constant (MagnitudeAwareSign's α, DoReFa's m) are computed from ``x``
        and kept fixed, so the function's derivative near ``x`` is the gradient at ``x``.
        """
        return None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        """The quantizer of a saved config; a damaged config raises an ste error (not Keras's bare TypeError)."""
        return rebuild(cls, config, super().from_config)

    def compute_output_spec(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return keras.KerasTensor(inputs.shape, dtype=inputs.dtype)

    def __repr__(self) -> str:
        params = {k: v for k, v in self.get_config().items() if k not in _BASE_KEYS}
        surrogate = getattr(self, "surrogate", None)
        if isinstance(surrogate, Surrogate) and "surrogate" in params:
            params["surrogate"] = repr(surrogate)
        shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
        return f"{type(self).__name__}({shown})"


_BASE_KEYS = frozenset({"name", "trainable", "dtype", "autocast", "activity_regularizer"})


def check_bits(owner: str, bits: Any, low: int = 1, high: int = 16, name: str = "bits") -> int:
    """``bits`` (the argument ``name``) as an int in [low, high] or :class:`ste.errors.ParameterError`."""
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not low <= int(bits) <= high:
        raise ParameterError(
            f"{owner}: {name} must be an integer from {low} to {high}; received {bits!r}. "
            f"Fix: e.g. {owner}({name}={max(low, min(4, high))})."
        )
    return int(bits)


def refuse_larq_keyword(
    owner: str, kwargs: Mapping[str, Any], name: str, *, takes: str, fix: Callable[[str], str]
) -> None:
    """A larq keyword ``name`` among a native quantizer's ``kwargs``: :class:`ste.errors.ParameterError` naming what
    ``owner`` takes, the ste call (``fix(value)``, given the received value's repr) and ``ste.larq``'s class, which
    takes larq's keyword (raised before the Keras layer is initialised)."""
    if name not in kwargs:
        return
    shown = _short(kwargs[name])
    raise ParameterError(
        f"{owner} does not take {name}= (received {name}={shown}): {name} is larq's argument. {owner} takes {takes}. "
        f"Fix: {fix(shown)}; for larq code, ste.larq.quantizers.{owner}({name}={shown}), which takes larq's "
        f"arguments; see {_MIGRATION}."
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_MIGRATION = "docs/larq.md (Migrating from larq)"


def resolve_surrogate(owner: str, surrogate: SurrogateLike) -> Surrogate:
    """A registry name, spec string, config dict, class or instance → :class:`ste.registry.Surrogate`."""
    try:
        return get_surrogate(surrogate)
    except SpecError as error:
        raise SpecError(f"{owner}: cannot use surrogate={surrogate!r}: {error}") from None


def register(name: str, *, replace: bool = False) -> Callable[[Q], Q]:
    """Class decorator: make a :class:`Quantizer` subclass available by ``name`` in :func:`get` and spec strings.

    Names follow the rules of :func:`ste.registry.register`: an identifier that is not a keyword, NFKC-normalised;
    an existing name (a built-in included) needs ``replace=True``, else :class:`ste.errors.RegistrationError`.
    """
    return _TABLE.decorator(name, replace=replace, check=_check_quantizer, owner=f"ste.quantizers.register({name!r})")


def _check_quantizer(name: str, cls: Any) -> None:
    """A complete :class:`Quantizer` subclass, or the error naming what was received and the fix."""
    if not (isinstance(cls, type) and issubclass(cls, Quantizer)):
        raise RegistrationError(
            f"ste.quantizers.register({name!r}): expected a ste.quantizers.Quantizer subclass; received "
            f"{type(cls).__name__} {cls!r}. Fix: decorate a class deriving from ste.quantizers.Quantizer (or "
            f"ste.quantizers.SurrogateQuantizer) whose call(x) applies your function."
        )
    check_complete(cls, f"ste.quantizers.register({name!r})")


def unregister(name: str) -> None:
    """Remove the quantizer name ``name`` (built-ins included; re-register them with ``replace=True``)."""
    _TABLE.unregister(name)


def names() -> list[str]:
    """The quantizer names accepted by :func:`get` (and in spec strings), sorted."""
    return _TABLE.names()


def lookup(name: str) -> type[Quantizer]:
    """The quantizer class registered under ``name`` (:class:`ste.errors.UnknownQuantizerError` with suggestions)."""
    return _TABLE.lookup(name)


def _from_spec(spec: str) -> Quantizer:
    try:
        name, args, kwargs = parse_spec(spec)
    except SpecError as error:
        raise SpecError(
            f"invalid quantizer spec {spec!r}: expected a quantizer name optionally called with literal "
            f"arguments, e.g. 'sign', \"sign(surrogate='approx_sign')\" or \"dorefa(bits=4, mode='activations')\". "
            f"({error})"
        ) from None
    cls = _TABLE.lookup(name, spec)
    return build(f"quantizer spec {_shown(spec)} ({cls.__name__})", cls, args, kwargs)


def _shown(spec: str) -> str:
    return repr(spec) if len(spec) <= 80 else repr(spec[:77] + "...")


_FORMS: list[Callable[[Any], Quantizer | None]] = []


def add_form(form: Callable[[Any], Quantizer | None]) -> None:
    """Let :func:`get` also read another library's names or configs (an extension point; :mod:`ste.larq` adds
    larq's class names and saved configs).

    ``form(identifier)`` returns the quantizer ``identifier`` describes, or ``None`` when ``identifier`` is not in
    that form; :func:`get` asks every added form, in the order added, before reading names, spec strings and Keras
    configs. A form may raise :class:`ste.errors.UnknownQuantizerError` for an identifier in its form that it cannot
    build.
    """
    _FORMS.append(form)


def get(identifier: QuantizerLike) -> Quantizer | Callable[..., Any] | None:
    """Resolve what a layer's ``*_quantizer`` argument received.

    ``None`` → ``None``; a :class:`Quantizer` → itself; a name or spec string → a new quantizer; a Keras config
    dict (from ``keras.saving.serialize_keras_object``) → the deserialized quantizer; a Quantizer class → an
    instance with default arguments; any other callable is returned unchanged (it must map a tensor to a tensor).
    A name that is not an ste quantizer may be a function registered with Keras under that plain name
    (``ste.larq.utils.register_keras_custom_object``): that function is returned. The forms added with
    :func:`add_form` are read first (with :mod:`ste.larq` loaded: larq's class names and saved configs).
    """
    if identifier is None or isinstance(identifier, Quantizer):
        return identifier
    for form in _FORMS:
        translated = form(identifier)
        if translated is not None:
            return translated
    if isinstance(identifier, str):
        registered = keras.saving.get_custom_objects().get(identifier)
        if _TABLE.get(identifier) is None and callable(registered) and not isinstance(registered, type):
            return registered  # type: ignore[no-any-return]
        return _from_spec(identifier)
    if isinstance(identifier, Mapping):
        try:
            quantizer = keras.saving.deserialize_keras_object(dict(identifier))
        except (TypeError, ValueError) as error:
            raise SpecError(
                f"cannot build a quantizer from the config {identifier!r} ({error}). Expected the output of "
                f"keras.saving.serialize_keras_object(quantizer), e.g. for ste.quantizers.Sign(); once ste is loaded."
            ) from None
        if not callable(quantizer):
            raise SpecError(f"the quantizer config {identifier!r} did not give a callable but {quantizer!r}.")
        return quantizer  # type: ignore[no-any-return]
    if isinstance(identifier, type) and issubclass(identifier, Quantizer):
        instance: Quantizer = identifier()
        return instance
    if callable(identifier):
        return identifier
    raise SpecError(
        f"cannot use {type(identifier).__name__} {identifier!r} as a quantizer; expected None, a quantizer name or "
        f"spec string (e.g. 'sign'), a ste.quantizers.Quantizer, a Keras config dict or a callable."
    )


def serialize(quantizer: Any) -> Any:
    """The Keras serialization of a quantizer (``None`` stays ``None``)."""
    if quantizer is None:
        return None
    return keras.saving.serialize_keras_object(quantizer)


def as_tensor(x: Any, owner: object = None) -> tf.Tensor:
    """``x`` as a floating tensor without changing its dtype (Keras variables are read here); anything else (a
    string, integer, bool or complex tensor, None) raises :class:`ste.errors.InputError` naming ``owner``'s class,
    before any variable of the quantizer changes."""
    if isinstance(x, tf.Tensor) and x.dtype.is_floating:
        return x
    return to_input_tensor(x, 0, type(owner).__name__ if owner is not None else "quantizer")
