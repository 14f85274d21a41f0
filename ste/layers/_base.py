"""What every quantized layer shares: resolving quantizers, building them, quantizing kernels in ``call``.

A quantized layer subclasses its Keras parent and declares its kernel slots: which quantizer argument quantizes
which kernel attribute, and which constraint argument clips it. The kernel is quantized explicitly inside ``call``
(no private Keras hooks), so what the layer computes is exactly ``parent(quantized inputs, quantized kernel)``.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import keras
import tensorflow as tf

from .. import constraints as ste_constraints
from .. import metrics as ste_metrics
from .. import quantizers as ste_quantizers
from .._common._arguments import check_bool_arguments
from .._core._bitmask import higher_order_witness, keep_bits, pack_bits, refuse_higher_order, unpack_values
from .._keras._configs import rebuild
from .._keras._signatures import ClassSignature
from .._patches import apply as apply_patches
from ..errors import InputError, NotBuiltError, ParameterError
from ..quantizers._sharing import claim
from ._binary_condition import is_high
from ._caller import outside_ste
from ._gradient_order import after, ordered_gradients
from ._gradient_probe import gradient_vanishes_far_out
from ._kernel_view import view_kernel
from ._normalization import hint_fused_batch_norm

__all__ = ["KernelSlot", "QuantLayerMixin", "kernel_precision"]


class KernelSlot(NamedTuple):
    """One quantized kernel of a layer."""

    quantizer: str  # constructor argument and attribute holding the quantizer, e.g. "kernel_quantizer"
    kernel: str  # attribute holding the latent (float) kernel, e.g. "kernel"
    constraint: str  # constructor argument and attribute holding its constraint, e.g. "kernel_constraint"


def _precision(quantizer: Any) -> int | None:
    precision = getattr(quantizer, "precision", None)
    return precision if isinstance(precision, int) else None


def kernel_precision(variable: Any) -> int | None:
    """The bit width a quantized layer's quantizer gives ``variable`` (e.g. 1 for a kernel quantized by ``"sign"`` or
    ``NoOp(precision=1)``), read from the layer's quantizer when asked.

    ``None`` for a variable that is not the kernel of a built ``ste`` quantized layer (or whose quantizer has no fixed
    precision); a variable carrying larq's ``precision`` attribute reports that instead.
    """
    return _precision(variable)  # a built layer's kernel is a QuantizedVariable, whose precision is its layer's


_MIGRATION = "docs/larq.md (Migrating from larq)"


def _keras_parent(cls: type) -> type | None:
    """The first Keras layer class in ``cls``'s MRO that is not itself quantized (``keras.layers.Conv2D``)."""
    for base in cls.__mro__[1:]:
        if issubclass(base, keras.layers.Layer) and not issubclass(base, QuantLayerMixin):
            return base
    return None


def _layer_name(layer: object) -> str:
    return str(getattr(layer, "name", type(layer).__name__))


class QuantLayerMixin:
    """Mixin for quantized Keras layers; see the module docstring.

    A subclass lists its kernel slots (``slots``). The mixin's ``__init__`` takes the keyword-only options (the
    quantizers, and what :meth:`options` adds), passes everything else to the Keras parent, and ``inspect.signature``
    of the class shows the parent's parameters followed by these options.

    Extension points for subclasses: :meth:`options` (the keyword-only arguments added), ``warns_when_built``
    (a class attribute: False leaves out the missing-constraint warning given when the layer is built, for a subclass
    with its own rule) and :meth:`warn_missing_constraint` (that warning, for one kernel slot).
    """

    slots: ClassVar[tuple[KernelSlot, ...]] = ()
    #: Whether :meth:`build` warns about a binary kernel without a constraint (see :meth:`warn_missing_constraint`).
    warns_when_built: ClassVar[bool] = True
    input_quantizer: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parent = _keras_parent(cls)
        if "__init__" in cls.__dict__:  # a subclass with its own __init__: inspect reads that one
            cls.__signature__ = None  # type: ignore[attr-defined]
            return
        if parent is None:
            return
        parameters = [
            p for p in inspect.signature(parent).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        options = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
            for name, (default, annotation) in cls.options().items()
        ]
        var_keyword = inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)
        cls.__signature__ = ClassSignature(inspect.Signature([*parameters, *options, var_keyword]))  # type: ignore[attr-defined]

    @classmethod
    def options(cls) -> dict[str, tuple[Any, str]]:
        """The keyword-only arguments this class adds to its Keras parent: ``{name: (default, annotation)}``."""
        names = ["input_quantizer", *(slot.quantizer for slot in cls.slots)]
        return {**{name: (None, "QuantizerLike") for name in names}, "metrics": (None, "Sequence[str] | None")}

    if not TYPE_CHECKING:  # static tools (IDEs, type checkers) then see the Keras parent's __init__ and its parameters

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
            check_bool_arguments(type(self).__name__, type(self), args, kwargs)  # use_bias="no" is refused
            options = {name: kwargs.pop(name, default) for name, (default, _) in type(self).options().items()}
            self._resolve_constraints(kwargs)
            try:
                super().__init__(*args, **kwargs)
            except (TypeError, ValueError) as error:
                self._refuse_unknown_keyword(error, kwargs)
                raise
            self._apply_options(options)

    @classmethod
    def _refuse_unknown_keyword(cls, error: Exception, kwargs: dict[str, Any]) -> None:
        """A keyword the Keras parent refused (``error``): an ste error naming it, what the class takes and the fix,
        instead of Keras's "Unrecognized keyword arguments" (raised before any variable exists)."""
        message = str(error)
        if "keyword argument" not in message:
            return
        for name in kwargs:
            if repr(name) in message:
                takes = ", ".join(cls.options())
                raise ParameterError(
                    f"{cls.__name__} does not take {name}=. It takes the arguments of "
                    f"{_keras_parent(cls).__name__} plus {takes}. Fix: leave {name}= out; for larq's arguments, "  # type: ignore[union-attr]
                    f"see {_MIGRATION} for their ste equivalents, or build the layer with ste.larq.layers."
                ) from None

    @classmethod
    def _resolve_constraints(cls, kwargs: dict[str, Any]) -> None:
        """Let every constraint argument (``bias_constraint`` included) also be an ste name or spec string such as
        ``"weight_clip"`` or ``"weight_clip(clip_value=0.5)"`` (before Keras sees them). A config larq saved is
        refused, naming ``ste.larq.constraints.get``; ``ste.larq.layers`` read those."""
        for name, value in kwargs.items():
            if name.endswith("_constraint") and isinstance(value, (str, dict)):
                kwargs[name] = ste_constraints.get(value)

    def _apply_options(self, options: dict[str, Any]) -> None:
        """Set the options taken by ``__init__`` (after the Keras parent is initialised); subclasses extend it."""
        self._set_metrics(options["metrics"])
        self._set_quantizers(options)

    def _set_quantizers(self, options: dict[str, Any]) -> None:
        self.input_quantizer = ste_quantizers.get(options["input_quantizer"])
        for slot in self.slots:
            setattr(self, slot.quantizer, ste_quantizers.get(options[slot.quantizer]))
            quantizer = getattr(self, slot.quantizer)
            if isinstance(quantizer, ste_quantizers.LSQ):
                quantizer.sharded = False  # a kernel is the same on every replica (its gradient scale uses its own N)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        """The layer of a saved config; a damaged config raises an ste error (not Keras's bare TypeError)."""
        return rebuild(cls, config, super().from_config)  # type: ignore[misc]

    def get_config(self) -> dict[str, Any]:
        """The Keras parent's config plus the quantizers (and the other options)."""
        return {**super().get_config(), **self._options_config()}  # type: ignore[misc]

    def _options_config(self) -> dict[str, Any]:
        config = {"input_quantizer": ste_quantizers.serialize(self.input_quantizer)}
        for slot in self.slots:
            config[slot.quantizer] = ste_quantizers.serialize(getattr(self, slot.quantizer))
        return {**config, **self._metrics_config()}

    def _set_metrics(self, metrics: Any) -> None:
        """``metrics``: larq's per-layer training metrics, e.g. ``["flip_ratio"]`` (see :mod:`ste.metrics`); the
        metrics themselves are created with the kernels, in ``build``."""
        self._metric_names = ste_metrics.check_metric_names(type(self).__name__, metrics)
        self._flip_ratios: dict[str, ste_metrics.FlipRatio] = {}

    def _build_metrics(self) -> None:
        """One :class:`ste.metrics.FlipRatio` per kernel for which ``"flip_ratio"`` was asked for."""
        if self._flip_ratios:
            return
        name = f"flip_ratio/{getattr(self, 'name', '')}"
        for slot in self.slots:
            # the layer's metrics=, or larq's metrics= given to the kernel's quantizer
            asked = (*self._metric_names, *getattr(getattr(self, slot.quantizer), "kernel_metrics", ()))
            if "flip_ratio" not in asked:
                continue
            kernel = getattr(self, slot.kernel)
            metric = ste_metrics.FlipRatio(name=name if len(self.slots) == 1 else f"{name}/{slot.kernel}")
            metric.build_for(tuple(kernel.shape), kernel.dtype)
            self._flip_ratios[slot.kernel] = metric

    def _metrics_config(self) -> dict[str, Any]:
        return {"metrics": list(self._metric_names)} if self._metric_names else {}

    def build(self, input_shape: Any) -> None:
        """Build the Keras parent, then the quantizer layers (on the input and kernel shapes)."""
        super().build(input_shape)  # type: ignore[misc]
        self._build_quantizers(input_shape)
        if self.warns_when_built and not getattr(self, "_ste_loading", False):
            self._warn_missing_constraints()

    def build_from_config(self, config: dict[str, Any]) -> None:
        """Keras's rebuild while loading a saved model: no constraint warning (it was given when the layer was
        first built)."""
        self._ste_loading = True
        try:
            super().build_from_config(config)  # type: ignore[misc]
        finally:
            self._ste_loading = False

    def _warn_missing_constraints(self) -> None:
        """Warn, once per layer when it is built, about a binary kernel without a constraint whose quantizer's
        gradient vanishes outside a clip range (its latent weights could drift there and stop learning)."""
        for slot in self.slots:
            quantizer = getattr(self, slot.quantizer)
            if _precision(quantizer) != 1 or getattr(self, slot.constraint, None) is not None:
                continue
            if gradient_vanishes_far_out(quantizer, len(getattr(self, slot.kernel).shape)):
                self.warn_missing_constraint(slot)

    def warn_missing_constraint(self, slot: KernelSlot) -> None:
        """Warn that the kernel of ``slot`` is binary and has no constraint (a ``UserWarning`` naming the fix, shown
        at the user's line). Given when the layer is built where the quantizer's gradient vanishes far out (unless
        ``warns_when_built`` is False); a subclass with another rule calls it itself."""
        warnings.warn(
            f"{type(self).__name__} '{getattr(self, 'name', '')}' has a binary {slot.quantizer} and no "
            f"{slot.constraint}: its latent weights can drift out of the range where the quantizer's gradient "
            f"is non-zero and stop learning. Fix: pass {slot.constraint}='weight_clip' "
            f"(ste.constraints.WeightClip(1.0)).",
            UserWarning,
            stacklevel=outside_ste(),
        )

    @property
    def quantized_kernel(self) -> tf.Tensor:
        """``kernel_quantizer(kernel)`` (the kernel itself without a quantizer); layers with several kernels
        (``QuantSeparableConv2D``) have ``quantized_kernels`` instead."""
        kernels = self.quantized_kernels
        if "kernel" not in kernels:
            raise AttributeError(
                f"{type(self).__name__} has kernels {sorted(kernels)}, not one 'kernel'; read quantized_kernels."
            )
        return kernels["kernel"]

    def _build_quantizers(self, input_shape: Any) -> None:
        if isinstance(self.input_quantizer, keras.layers.Layer) and not self.input_quantizer.built:
            self.input_quantizer.build(input_shape)
        claim(self.input_quantizer, self, "input_quantizer")  # one layer slot per quantizer with variables
        for slot in self.slots:
            quantizer = getattr(self, slot.quantizer)
            if isinstance(quantizer, keras.layers.Layer) and not quantizer.built:
                quantizer.build(tuple(getattr(self, slot.kernel).shape))
            claim(quantizer, self, slot.quantizer)
            self._view_kernel(slot)
        self._build_metrics()

    def _view_kernel(self, slot: KernelSlot) -> None:
        """Make the kernel of ``slot`` read as this layer's quantized kernel inside ``quantized_scope(True)``
        (:mod:`ste.layers._kernel_view`); the layer is held weakly."""
        owner, kernel = weakref.ref(self), getattr(self, slot.kernel)

        def layer() -> Any:
            alive = owner()
            return alive if alive is not None and getattr(alive, slot.kernel, None) is kernel else None

        def quantized() -> tf.Tensor | None:
            alive = layer()
            return None if alive is None or getattr(alive, slot.quantizer) is None else alive._quantized(slot)

        view_kernel(
            kernel,
            quantized,
            lambda: getattr(layer(), slot.quantizer, None),
            lambda: None if layer() is None else layer().kernel_precisions.get(slot.kernel),
        )

    def quantize_inputs(self, inputs: Any) -> Any:
        """The layer's input after its ``input_quantizer`` (unchanged without one).

        A non-floating input (string, integer, bool, complex) raises :class:`ste.errors.InputError` naming the layer,
        with or without an input quantizer (the convolutions of the Keras parents have no such kernels, and a quantizer
        computes on floats), instead of a TensorFlow kernel error.
        """
        dtype = getattr(inputs, "dtype", None)
        if dtype is not None and not tf.as_dtype(dtype).is_floating:
            layer = f"{type(self).__name__} '{getattr(self, 'name', '')}'"
            raise InputError(
                f"{layer}: its input has dtype {tf.as_dtype(dtype).name}; expected "
                f"float16, bfloat16, float32 or float64. Fix: cast it first, e.g. keras.ops.cast(x, 'float32') (or a "
                f"keras.layers.Rescaling layer for integer pixels)."
            )
        if not getattr(self, "_ste_batch_norm_hinted", False) and ste_metrics.in_training():
            self._ste_batch_norm_hinted = True
            hint_fused_batch_norm(self, outside_ste())
        return inputs if self.input_quantizer is None else self.input_quantizer(inputs)

    def apply_to_quantized_input(self, fn: Callable[..., Any], x: Any, kernels: list[tf.Tensor]) -> Any:
        """``fn(x, *kernels)`` on the quantized input ``x``; where the input quantizer is binary (its output takes
        two values, ``binary_values``) and bit masks are on (:func:`ste.set_bit_masks`), the backward pass keeps
        ``x`` as packed bits and recomputes it from them instead of keeping the float tensor (same gradients)."""
        values = getattr(self.input_quantizer, "binary_values", None)
        if values is None or not isinstance(x, tf.Tensor) or not x.dtype.is_floating or not keep_bits(x):
            return fn(x, *kernels)
        low, high = values

        @tf.custom_gradient  # type: ignore[untyped-decorator]
        def on_bits(x: tf.Tensor, *kernels: tf.Tensor) -> Any:
            with tf.name_scope("binary_input_bits"):
                bits = pack_bits(is_high(x, low, high))
            shape = x.shape.as_list() if x.shape.is_fully_defined() else tf.shape(x)
            witness = higher_order_witness(x)  # a gradient of the gradient must not miss x: it raises instead

            def grad(dy: tf.Tensor) -> list[tf.Tensor]:
                with tf.control_dependencies([dy]):  # recompute in the backward pass, not in the forward one
                    one = unpack_values(bits, shape, low, high, x.dtype)
                one = refuse_higher_order(
                    one, witness, _layer_name(self), "rebuilds the binary input from 1 bit per element"
                )
                with tf.GradientTape(persistent=True) as tape:
                    tape.watch([one, *kernels])
                    out = fn(one, *kernels)  # not run in a tf.function: only its gradient ops are used
                if tf.executing_eagerly():  # ops run as called: one call, or each would compute both gradients
                    return tape.gradient(out, [one, *kernels], output_gradients=dy)  # type: ignore[no-any-return]
                # in a graph each call builds both gradient ops and the function prunes the one it does not use
                kernel_grads = tape.gradient(out, list(kernels), output_gradients=dy)
                # the input gradient starts once the kernel gradient is done (and `one` freed), where that order
                # costs no time (see ordered_gradients)
                ordered = after(dy, kernel_grads) if ordered_gradients() else dy
                input_grad = tape.gradient(out, one, output_gradients=ordered)
                return [input_grad, *kernel_grads]

            return after(fn(x, *kernels), [bits]), grad

        return on_bits(x, *kernels)

    def quantize_kernel(self, slot: KernelSlot) -> tf.Tensor:
        """The kernel of ``slot`` after its quantizer (read in the current autocast scope, as Keras reads it); in a
        training call also the flip ratio's update."""
        quantized = self._quantized(slot)
        if self._flip_ratios and ste_metrics.in_training():
            self._flip_ratios[slot.kernel].update_state(quantized)
        return quantized

    def _quantized(self, slot: KernelSlot) -> tf.Tensor:
        """The kernel of ``slot`` after its quantizer: the one quantization of kernels, for calls and for reads of
        the kernel inside ``quantized_scope(True)``."""
        kernel = getattr(self, slot.kernel)
        if isinstance(kernel, keras.Variable):
            kernel = kernel.value  # the latent value, read in this layer's autocast scope (a quantizer clears it)
        quantizer = getattr(self, slot.quantizer)
        return kernel if quantizer is None else quantizer(kernel)

    @property
    def quantized_kernels(self) -> dict[str, tf.Tensor]:
        """Every kernel after its quantizer, by attribute name (``{"kernel": ...}``); the layer must be built."""
        if not getattr(self, "built", False):
            raise NotBuiltError(
                f"{type(self).__name__} '{getattr(self, 'name', '')}' is not built, so it has no kernel yet. Fix: "
                f"call it on a batch (or build the model) before reading its quantized kernels."
            )
        return {slot.kernel: self.quantize_kernel(slot) for slot in self.slots}

    @property
    def kernel_precisions(self) -> dict[str, int | None]:
        """The bit width of each quantized kernel (``None`` for a float kernel), by attribute name."""
        return {slot.kernel: _precision(getattr(self, slot.quantizer)) for slot in self.slots}

    @property
    def input_precision(self) -> int | None:
        """The bit width of the quantized input (``None`` for a float input)."""
        return _precision(self.input_quantizer)
