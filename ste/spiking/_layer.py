"""``SpikingRNN``: a spiking cell run over the time axis of ``[batch, time, features]`` input currents.

Feature maps ``[batch, time, height, width, channels]`` (after ``ste.spiking.TimeDistributed(Conv2D(...))``) are
flattened to ``[batch, time, height·width·channels]`` around the time loop, and the outputs and states get the
frame's shape back. Integer and boolean spike trains are cast to the compute dtype.

A ``keras.layers.RNN`` whose cell the layer builds from its own arguments (as ``keras.layers.LSTM`` does), so
``return_sequences``, ``return_state``, ``stateful``, ``go_backwards``, ``unroll`` and masking behave as in Keras.
Two defaults differ from ``keras.layers.RNN``: ``return_sequences=True`` (a spike train is the usual output) and
``zero_output_for_mask=True`` (a masked step emits no spike and leaves the states unchanged). In a graph
(``tf.function``, ``fit``) an unmasked sequence runs through ste's own time loop (``_loop``: the same values and
gradients, without Keras's zeros for every input step in the backward pass).
"""

from __future__ import annotations

import inspect
import math
from typing import Any, ClassVar

import keras
import tensorflow as tf

from .._common._arguments import check_bool
from .._keras._signatures import forwarding_signature, init_signature
from .._patches import apply as apply_patches
from ..errors import CallError, InputError, MissingMethodError
from ._cell import SpikingCell
from ._loop import time_loop

__all__ = ["SpikingRNN", "explicit_arguments", "time_mask"]

_LAYER_KEYS = ("dtype", "trainable")


_KEYS: dict[type[SpikingCell], frozenset[str]] = {}


def _cell_keys(cell_class: type[SpikingCell]) -> frozenset[str]:
    """The keyword arguments the cell class (and its spiking base classes) take."""
    if cell_class in _KEYS:
        return _KEYS[cell_class]
    keys: set[str] = set()
    for klass in cell_class.__mro__:
        if isinstance(klass, type) and issubclass(klass, SpikingCell):
            for name, parameter in inspect.signature(klass.__init__).parameters.items():
                if name != "self" and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                    keys.add(name)
    _KEYS[cell_class] = frozenset(keys)
    return _KEYS[cell_class]


def time_mask(where: str, mask: Any, shape: Any) -> tf.Tensor | None:
    """A Keras mask for inputs of ``shape`` ``[batch, time, ...]`` as a boolean ``[batch, time]`` tensor (None: no
    mask); a mask of another shape (``keras.layers.Masking`` in front of feature maps gives one per pixel) is a
    :class:`ste.errors.CallError`."""
    if mask is None:
        return None
    mask = tf.convert_to_tensor(mask)
    numeric = mask.dtype == tf.bool or mask.dtype.is_integer or mask.dtype.is_floating
    extra = mask.shape[2:] if mask.shape.rank is not None else None
    if (
        extra is None
        or not numeric
        or any(n != 1 for n in extra)
        or not mask.shape[:2].is_compatible_with(tf.TensorShape(shape)[:2])
    ):
        raise CallError(
            f"{where} takes a Keras mask of shape [batch, time], one flag per sample and step (as keras.layers.Masking "
            f"gives for [batch, time, features] inputs), here {tuple(shape[:2])}; received a {mask.dtype.name} mask "
            f"of shape {tuple(mask.shape)}. Fix: mask whole time steps: pass mask= a [batch, time] tensor (for "
            f"feature maps, e.g. keras.ops.any(x != 0, axis=(2, 3, 4))) instead of keras.layers.Masking."
        )
    if extra:
        mask = tf.reshape(mask, tf.shape(mask)[:2])
    return tf.cast(mask, tf.bool)


_RNN_SWITCHES = ("return_sequences", "return_state", "go_backwards", "stateful", "unroll", "zero_output_for_mask")


def explicit_arguments(names: dict[str, Any]) -> dict[str, Any]:
    """The explicit arguments of an ``__init__`` (its ``locals()``) as keywords to pass on, ``**kwargs`` merged in."""
    arguments = {key: value for key, value in names.items() if key not in ("self", "kwargs", "__class__")}
    return {**arguments, **names.get("kwargs", {})}


class SpikingRNN(keras.layers.RNN):  # type: ignore[misc]
    """Base class of the neuron layers over a time axis (``LIF``, ``IF``, ``ALIF``, ``Synaptic``, ``RLIF``, ...).

    Positional and neuron keyword arguments go to the cell (``cell_class``); the others are those of
    ``keras.layers.RNN`` and ``keras.layers.Layer``:

    Args:
        return_sequences: the output at every step ``[batch, time, units]`` (default True) or at the last one.
        return_state: also return the final states (``[U, S]``; ALIF ``[U, S, b]``, Synaptic ``[U, S, I_syn]``,
            LI ``[U]``), each of the frame's shape.
        stateful: keep the states between batches (needs a fixed batch size; ``reset_state()`` clears them).
        zero_output_for_mask: a masked step outputs 0 (default True); the states are kept either way.
        go_backwards: run over the time axis in reverse (as ``keras.layers.RNN``).
        unroll: unroll the time loop (as ``keras.layers.RNN``; needs a fixed number of steps).
    """

    cell_class: ClassVar[type[SpikingCell]] = SpikingCell  # type: ignore[type-abstract]  # set by each layer

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__signature__ = _layer_signature(cls)

    def __init__(
        self,
        *args: Any,
        return_sequences: bool = True,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        zero_output_for_mask: bool = True,
        **kwargs: Any,
    ) -> None:
        if inspect.isabstract(self.cell_class):
            missing = ", ".join(sorted(self.cell_class.__abstractmethods__))
            raise MissingMethodError(
                f"cannot instantiate {type(self).__qualname__}: its cell_class {self.cell_class.__qualname__} is "
                f"abstract (it does not implement {missing}). Fix: use a neuron layer (ste.spiking.LIF, IF, ALIF, "
                f"...), or set cell_class in {type(self).__qualname__} to a cell that implements {missing} (see "
                f'"Write your own neuron" in docs/spiking.md).'
            )
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        for key, value in locals().items():  # return_sequences="no" etc.: refused, not read with bool()
            if key in _RNN_SWITCHES:
                check_bool(type(self).__name__, key, value)
        keys = _cell_keys(self.cell_class)
        cell_kwargs = {key: kwargs.pop(key) for key in list(kwargs) if key in keys}
        cell_kwargs.update({key: kwargs[key] for key in _LAYER_KEYS if key in kwargs})
        if kwargs.get("name"):
            cell_kwargs["name"] = f"{kwargs['name']}_cell"
        cell = self.cell_class(*args, **cell_kwargs)
        super().__init__(
            cell,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            zero_output_for_mask=zero_output_for_mask,
            **kwargs,
        )

    def __getattr__(self, name: str) -> Any:
        # The neuron's parameters read through the layer: LIF(...).beta, .threshold, .surrogate, ...
        if name in _cell_keys(type(self).cell_class) or name in ("surrogate", "learned_surrogate"):
            return getattr(self.__dict__.get("cell"), name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def build(self, sequences_shape: Any, initial_state_shape: Any = None) -> None:
        where = f"{type(self).__name__} '{self.name}'"
        if len(sequences_shape) < 3:
            raise CallError(
                f"{where} takes input currents of shape [batch, time, features] (or [batch, time, ...] feature "
                f"maps); received shape {tuple(sequences_shape)}. Fix: repeat a static input over time "
                f"(ste.spiking.rate_encode, or keras.layers.RepeatVector) or add a time axis."
            )
        if sequences_shape[1] == 0:
            raise CallError(f"{where}: the input has 0 time steps; a spiking layer needs at least one.")
        features = tuple(sequences_shape[2:])
        if None in features:
            raise CallError(
                f"{where}: the feature axes after [batch, time] must be known when the layer is built; received "
                f"shape {tuple(sequences_shape)}. Fix: give keras.Input the full frame shape."
            )
        self.feature_shape = features
        flat = (sequences_shape[0], sequences_shape[1], math.prod(features))
        super().build(flat, initial_state_shape)
        self.state_size = list(self.cell.state_size)

    def _flat(self, tensor: Any, leading: int) -> Any:
        """[..., *feature_shape] -> [..., units] (``leading`` axes kept)."""
        if len(self.feature_shape) == 1 or tensor is None:
            return tensor
        return tf.reshape(tensor, tf.concat([tf.shape(tensor)[:leading], [-1]], axis=0))

    def _unflat(self, tensor: Any, leading: int) -> Any:
        if len(self.feature_shape) == 1:
            return tensor
        return tf.reshape(tensor, tf.concat([tf.shape(tensor)[:leading], self.feature_shape], axis=0))

    def _currents(self, sequences: Any) -> tf.Tensor:
        """Integer and boolean spike trains become the compute dtype (as a Dense in front would see them)."""
        tensor = tf.convert_to_tensor(sequences)
        if tensor.dtype.is_integer or tensor.dtype == tf.bool:
            return tf.cast(tensor, self.compute_dtype)
        if not tensor.dtype.is_floating:
            raise InputError(
                f"{type(self).__name__} '{self.name}' takes floating, integer or boolean input currents; received "
                f"{tensor.dtype.name}."
            )
        return tensor

    def call(self, sequences: Any, initial_state: Any = None, mask: Any = None, training: bool = False) -> Any:
        currents = self._currents(sequences)
        mask = time_mask(f"{type(self).__name__} '{self.name}'", mask, currents.shape)
        sequences = self._flat(currents, 2)
        if initial_state is not None:
            initial_state = [self._flat(state, 1) for state in tf.nest.flatten(initial_state)]
        self.cell.start_sequence()
        try:
            result = super().call(sequences, initial_state=initial_state, mask=mask, training=training)
        finally:
            self.cell.end_sequence(f"{type(self).__name__} '{self.name}'")
        if not self.return_state:
            return self._unflat(result, 2 if self.return_sequences else 1)
        output, *states = result
        return [self._unflat(output, 2 if self.return_sequences else 1), *(self._unflat(s, 1) for s in states)]

    def inner_loop(self, sequences: Any, initial_state: Any, mask: Any, training: bool = False) -> Any:
        """The time loop: ste's in a graph (its backward pass keeps no zeros per input step, see ``_loop``); Keras's
        in eager mode (a Python list of steps there, which forward-mode autodiff needs), for a mask or ``unroll``."""
        if mask is not None or self.unroll or tf.executing_eagerly():
            return super().inner_loop(sequences, initial_state, mask, training=training)
        kwargs = {"training": training} if self.cell._call_has_training_arg else {}

        def step(inputs: tf.Tensor, states: tuple[tf.Tensor, ...]) -> Any:
            output, new_states = self.cell(inputs, states, **kwargs)
            return output, tf.nest.flatten(new_states)

        return time_loop(step, sequences, initial_state, self.go_backwards, self.return_sequences)

    def compute_output_shape(self, sequences_shape: Any, initial_state_shape: Any = None) -> Any:
        features = tuple(sequences_shape[2:])
        batch, steps = sequences_shape[0], sequences_shape[1]
        output = (batch, steps, *features) if self.return_sequences else (batch, *features)
        if not self.return_state:
            return output
        return output, *((batch, *features) for _ in self.cell.state_names)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        del config["cell"]
        cell_config = self.cell.get_config()
        config.update({key: value for key, value in cell_config.items() if key in _cell_keys(self.cell_class)})
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> SpikingRNN:
        return cls(**config)


def _layer_signature(cls: type[SpikingRNN]) -> object:
    """``inspect.signature`` of a spiking layer class: its own arguments (when it has its own ``__init__``), its
    cell's, then the sequence arguments."""
    cell, sequence = inspect.signature(cls.cell_class), init_signature(SpikingRNN)
    if cls is not SpikingRNN and "__init__" in cls.__dict__:
        return forwarding_signature(init_signature(cls), [cell, sequence])
    return forwarding_signature(cell, [sequence])


SpikingRNN.__signature__ = _layer_signature(SpikingRNN)
