"""``SpikingCell``: what every spiking neuron cell shares (surrogate, threshold, reset, learned parameters, config).

A cell computes one time step for ``keras.layers.RNN``: ``cell(I[t], states) -> (output, new_states)``. Concrete
cells (``LIFCell``, ``IFCell``, ``ALIFCell``, ``SynapticCell``, ``RLIFCell``, ...) write only their membrane update
in :meth:`SpikingCell.step`; this class turns the membrane into spikes with the surrogate op, applies the reset,
creates the learned parameters and serializes the configuration. ``LICell`` (no spike) returns no threshold.

Reset of the membrane by the previous step's spike ``S[t−1]`` (snnTorch's ``reset_delay=True``):

* ``"subtract"``: ``U[t] = β·U[t−1] + I[t] − ϑ·S[t−1]``;
* ``"zero"``: ``U[t] = β·(1 − S[t−1])·U[t−1] + I[t]`` (the membrane is set to 0 after a spike);
* ``"none"``: ``U[t] = β·U[t−1] + I[t]``.

``detach_reset=True`` stops the gradient through ``S[t−1]`` in the reset term only.
"""

from __future__ import annotations

import abc
import functools
import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import keras
import tensorflow as tf

from .._common._abstract import Extension
from .._common._arguments import check_bool
from .._keras._signatures import forwarding_signature, init_signature
from .._patches import apply as apply_patches
from ..errors import ParameterError
from ..registry import Surrogate, SurrogateLike
from ._constraint import Interval
from ._spike import DEFAULT_SURROGATE, resolve_surrogate, spike_op

__all__ = ["NIR_FORMS", "RESETS", "LearnedValue", "SpikingCell"]

RESETS = ("subtract", "zero", "none")
EMITS = ("spikes", "membrane")


def checked_number(
    layer: str, name: str, value: Any, low: float | None, high: float | None, low_open: bool = False
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ParameterError(f"{layer}: {name} must be a finite number; received {type(value).__name__} {value!r}.")
    number = float(value)
    too_low = low is not None and (number <= low if low_open else number < low)
    if too_low or (high is not None and number > high):
        bounds = f"{'(' if low_open else '['}{low}, {high if high is not None else '∞'}]"
        raise ParameterError(f"{layer}: {name} must be in {bounds}; received {value!r}.")
    return number


class LearnedValue:
    """A neuron parameter (β, ϑ, α): the trained variable's current value when it is learned, else the number given.

    ``cell.beta`` after ``fit`` is the learned β (a Python float in eager mode, the variable's value when traced);
    :meth:`initial` is the constructor's number, which ``get_config`` saves (the trained value is in the weights).
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def initial(self, cell: Any) -> float:
        try:
            value: float = cell.__dict__[f"_initial_{self.name}"]
        except KeyError:  # not set yet (Keras compares the old value while the constructor assigns it)
            raise AttributeError(self.name) from None
        return value

    def __get__(self, cell: Any, owner: type | None = None) -> Any:
        if cell is None:
            return self
        variable = (cell.__dict__.get("_learned") or {}).get(self.name)
        if variable is None:
            return self.initial(cell)
        if tf.executing_eagerly():
            return float(variable.numpy())
        return variable.value

    def __set__(self, cell: Any, value: float) -> None:
        cell.__dict__[f"_initial_{self.name}"] = value


def _constant(value: float, shape: Any, dtype: Any = None) -> tf.Tensor:
    return tf.fill(shape, tf.constant(value, dtype or "float32"))


#: The NIR forms a cell may declare (``SpikingCell.nir_form``), each exported as its NIR node by ste.spiking.to_nir.
NIR_FORMS = ("lif", "if", "li", "cuba_lif", "recurrent_lif", "recurrent_cuba_lif")


class SpikingCell(keras.layers.Layer, Extension):  # type: ignore[misc]
    """Base class of the spiking cells: one time step of a neuron population, for ``keras.layers.RNN``.

    A subclass implements :meth:`step` (the membrane update) and lists its states in ``state_names``; see "Write
    your own neuron" in docs/spiking.md. ``nir_form`` names the NIR node the cell exports as (``"lif"``, ``"if"``,
    ``"li"``, ``"cuba_lif"``, ``"recurrent_lif"``, ``"recurrent_cuba_lif"``; ``None``: no NIR form); a subclass does
    not inherit it, since a changed ``step`` is a different neuron.

    Args:
        threshold: firing threshold ϑ (> 0).
        reset: ``"subtract"`` (default), ``"zero"`` or ``"none"`` (see the module docstring).
        detach_reset: stop the gradient through the reset term (snnTorch's ``Leaky`` always does: default True).
        surrogate: the spike's backward pass: a registry name, spec string or
            [`Surrogate`](gallery/index.md) (default ``"atan(alpha=2.0)"``, as snnTorch).
        learn_threshold: make ϑ a trainable variable (kept > 0).
        learn_surrogate: ``True`` to train every numeric parameter of the surrogate, or a list of their names
            (one value per layer, kept > 0); their gradient is that of the surrogate's primitive.
        emit: ``"spikes"`` (default) or ``"membrane"`` (the membrane potential U[t], for readouts).
        units: number of neurons; ``None`` (default) takes it from the input's last axis when the cell is built.
            Give it when the cell goes into ``keras.layers.RNN(..., return_state=True)``, which reads the state
            sizes before it builds the cell.
    """

    #: The names of this cell's states, in order; the first is always the membrane ``U``.
    state_names: ClassVar[tuple[str, ...]] = ("membrane", "spikes")
    #: Arguments of a base cell that this cell sets itself and refuses (IFCell: ``beta``); kept out of its signature.
    refused_arguments: ClassVar[tuple[str, ...]] = ()
    #: The NIR node this exact class exports as (see the class docstring); not inherited.
    nir_form: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # inspect.signature(cls) shows the arguments this cell forwards to its base cell in **kwargs too.
        super().__init_subclass__(**kwargs)
        if "nir_form" not in vars(cls):
            cls.nir_form = None  # a NIR form belongs to one neuron: a subclass declares its own
        if "__init__" in cls.__dict__:
            base = next(klass for klass in cls.__mro__[1:] if issubclass(klass, SpikingCell))
            signature = forwarding_signature(init_signature(cls), [inspect.signature(base)], cls.refused_arguments)
            cls.__signature__ = signature

    threshold = LearnedValue()

    def __init__(
        self,
        threshold: float = 1.0,
        *,
        reset: str = "subtract",
        detach_reset: bool = True,
        surrogate: SurrogateLike = DEFAULT_SURROGATE,
        learn_threshold: bool = False,
        learn_surrogate: bool | Sequence[str] = False,
        emit: str = "spikes",
        units: int | None = None,
        **kwargs: Any,
    ) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        super().__init__(**kwargs)
        label = type(self).__name__
        if units is not None and (isinstance(units, bool) or not isinstance(units, int) or units < 1):
            raise ParameterError(f"{label}: units must be a positive integer or None; received {units!r}.")
        if reset not in RESETS:
            raise ParameterError(f"{label}: reset must be one of {RESETS}; received {reset!r}.")
        if emit not in EMITS:
            raise ParameterError(f"{label}: emit must be one of {EMITS}; received {emit!r}.")
        self.units = units
        self.threshold = checked_number(label, "threshold", threshold, 0.0, None, low_open=True)
        self.reset = reset
        self.detach_reset = check_bool(label, "detach_reset", detach_reset)
        self.learn_threshold = check_bool(label, "learn_threshold", learn_threshold)
        self.emit = emit
        self.surrogate, self.learned_surrogate = resolve_surrogate(surrogate, learn_surrogate, label)
        self._spike: Callable[..., Any] = spike_op(self.surrogate, self.learned_surrogate)
        self._learned: dict[str, Any] = {}
        self._read: dict[str, tf.Tensor] | None = None
        self._surrogate_live = False
        self._warned = False

    # -- parameters -----------------------------------------------------------------------------------------

    def learned_parameters(self) -> dict[str, tuple[float, Interval]]:
        """Name -> (initial value, constraint) of the neuron parameters to train; subclasses add theirs."""
        out: dict[str, tuple[float, Interval]] = {}
        if self.learn_threshold:
            out["threshold"] = (self.threshold, Interval(low=1e-6))
        for name in self.learned_surrogate:
            out[f"surrogate_{name}"] = (float(self.surrogate.params[name]), Interval(low=1e-6))
        return out

    def build(self, input_shape: Any) -> None:
        if self.units is None:
            self.units = int(input_shape[-1])
        elif input_shape[-1] is not None and int(input_shape[-1]) != self.units:
            raise ParameterError(
                f"{type(self).__name__} '{self.name}': units={self.units}, but the input has {input_shape[-1]} "
                f"features; a spiking cell maps each input current to one neuron. Fix: put a Dense({self.units}) "
                f"in front of it, or leave units=None."
            )
        for name, (value, constraint) in self.learned_parameters().items():
            self._learned[name] = self.add_weight(
                name=name,
                shape=(),
                initializer=functools.partial(_constant, value),  # keras' Constant rounds through float32
                constraint=constraint,
                trainable=True,
            )
        self.built = True

    def initial(self, name: str) -> float:
        """The constructor's value of parameter ``name`` (``self.<name>`` is the learned one once it trains)."""
        attribute = getattr(type(self), name)
        return attribute.initial(self) if isinstance(attribute, LearnedValue) else float(getattr(self, name))

    def value(self, name: str, dtype: Any) -> tf.Tensor:
        """Parameter ``name`` (a learned variable or a fixed number) as a scalar of ``dtype``."""
        if self._read is not None and name in self._read:
            return tf.cast(self._read[name], dtype)
        if name in self._learned:
            return tf.cast(self._learned[name], dtype)
        return tf.constant(getattr(self, name), dtype)

    def current_surrogate(self, dtype: Any) -> Surrogate:
        """The surrogate with its learned parameters at their current values."""
        if not self.learned_surrogate:
            return self.surrogate
        values = {name: self.value(f"surrogate_{name}", dtype) for name in self.learned_surrogate}
        return type(self.surrogate)(**{**self.surrogate.params, **values})

    # -- states ---------------------------------------------------------------------------------------------

    @property
    def state_size(self) -> list[int]:
        return [self.units or 1] * len(self.state_names)

    @property
    def output_size(self) -> int:
        return self.units or 1

    def get_initial_state(self, batch_size: Any = None) -> list[tf.Tensor]:
        """All states 0 (``U[−1] = 0``, no spike before the first step)."""
        return [tf.zeros((batch_size, self.units or 1), dtype=self.compute_dtype) for _ in self.state_names]

    # -- one step -------------------------------------------------------------------------------------------

    def spike(self, x: tf.Tensor) -> tf.Tensor:
        """``Θ(x)`` with the surrogate's backward pass; x = U − ϑ."""
        if tf.executing_eagerly() and not self._surrogate_live:
            derivative = self.current_surrogate(x.dtype).derivative(x)
            self._surrogate_live = bool(tf.reduce_any(derivative != 0))
        values = [self.value(f"surrogate_{name}", x.dtype) for name in self.learned_surrogate]
        spikes: tf.Tensor = self._spike(x, *values)
        return spikes

    @property
    def trainable_drop(self) -> bool:
        """Whether what a spike subtracts gets a gradient (a learned threshold; ALIF's adaptive threshold)."""
        return self.learn_threshold

    def integrate(self, decayed: tf.Tensor, inputs: tf.Tensor, spikes: tf.Tensor, drop: tf.Tensor) -> tf.Tensor:
        """U[t] from ``decayed`` = β·U[t−1], the input current and the reset by ``spikes`` = S[t−1].

        ``drop`` is what a spike subtracts under ``reset="subtract"`` (ϑ, or the adaptive threshold of ALIF).
        With a detached reset the backward pass needs the spikes only as a condition, so the reset is written with
        ``tf.where`` on ``S[t−1] > 0``: the time loop keeps a boolean per neuron and step (1 byte, not a float).
        """
        if self.detach_reset:
            spikes = tf.stop_gradient(spikes)
            if self.reset == "subtract":
                if not self.trainable_drop:  # nothing to differentiate: the loop keeps no spikes at all
                    return decayed + inputs - drop * spikes
                return decayed + inputs - tf.where(spikes > 0, drop, tf.zeros_like(drop))
            if self.reset == "zero":
                return tf.where(spikes > 0, tf.zeros_like(decayed), decayed) + inputs
            return decayed + inputs
        if self.reset == "subtract":
            return decayed + inputs - drop * spikes
        if self.reset == "zero":
            return decayed * (1 - spikes) + inputs
        return decayed + inputs

    @abc.abstractmethod
    def step(
        self, inputs: tf.Tensor, states: Sequence[tf.Tensor]
    ) -> tuple[tf.Tensor, tf.Tensor | None, list[tf.Tensor]]:
        """One time step of the membrane: ``(U[t], the firing threshold at t, the other new states)``.

        The cell spikes where ``U[t]`` crosses the threshold (:meth:`call` applies the surrogate op and keeps the
        spikes as the state ``S``); a neuron that never spikes (``LICell``) returns ``None`` as its threshold and
        has no ``S`` state.

        Args:
            inputs: the input current ``I[t]``, ``[batch, units]``.
            states: the states at ``t − 1``, in the order of ``state_names`` (``U`` first, then ``S`` for a spiking
                neuron).
        """

    def call(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
        membrane, threshold, others = self.step(inputs, list(states))
        if threshold is None:  # a neuron that never spikes: its output is the membrane
            return membrane, [membrane, *others]
        spikes = self.spike(membrane - threshold)
        return (spikes if self.emit == "spikes" else membrane), [membrane, spikes, *others]

    # -- the zero-gradient guard -------------------------------------------------------------------------------

    def start_sequence(self) -> None:
        """Called by the layer before a sequence: read the learned variables once, outside the time loop.

        (A variable read inside the loop body breaks the gradient of a re-loaded SavedModel.) Eager mode also starts
        checking the surrogate's gradient over the sequence.
        """
        self._surrogate_live = False
        self._read = {name: tf.identity(variable.value) for name, variable in self._learned.items()}

    def end_sequence(self, layer: str) -> None:
        """Warn once when the surrogate's derivative was 0 at every membrane value of an eager call."""
        self._read = None
        if self._surrogate_live or self._warned or not tf.executing_eagerly() or self.emit != "spikes":
            return
        self._warned = True
        warnings.warn(
            f"{layer}: the surrogate {self.surrogate!r} gave a zero gradient at every membrane value of this call "
            f"(U − ϑ lies outside its support everywhere), so nothing upstream of this layer can learn. Fix: use a "
            f"wider surrogate (e.g. boxcar(width=...) larger, or 'atan'), or rescale the input currents.",
            RuntimeWarning,
            stacklevel=3,
        )

    # -- config ---------------------------------------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            units=self.units,
            threshold=self.initial("threshold"),
            reset=self.reset,
            detach_reset=self.detach_reset,
            surrogate=self.surrogate.get_config(),
            learn_threshold=self.learn_threshold,
            learn_surrogate=list(self.learned_surrogate),
            emit=self.emit,
        )
        return config
