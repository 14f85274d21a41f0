"""Recurrent spiking neurons (snnTorch's ``RLeaky`` and ``RSynaptic``): ``RLIF``, ``RSynaptic`` and their cells.

The last step's spikes come back through a recurrent weight V: all-to-all (a ``[units, units]`` matrix,
``S[t−1]·V``) or one-to-one (a ``[units]`` vector, ``V ⊙ S[t−1]``).

* RLIF: ``U[t] = β·U[t−1] + X[t] + rec(S[t−1]) − R[t]``;
* RSynaptic: ``I_syn[t] = α·I_syn[t−1] + X[t] + rec(S[t−1])``, ``U[t] = β·U[t−1] + I_syn[t] − R[t]``;

with ``rec(S) = S·V (+ b)``. The recurrent spikes carry the surrogate gradient (they are never detached, as in
snnTorch); ``detach_reset`` concerns the reset term only.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool
from .._keras._signatures import forwarding_signature, init_signature
from ._cell import SpikingCell
from ._layer import SpikingRNN
from ._lif import LIFCell
from ._synaptic import SynapticCell

__all__ = ["RLIF", "RLIFCell", "RSynaptic", "RSynapticCell"]

_KERNEL, _BIAS = "recurrent_kernel", "recurrent_bias"


def _in_float32(initializer: Any, shape: Any, dtype: Any = None) -> tf.Tensor:
    """The initial value drawn in float32 (Keras's orthogonal initializer has no bfloat16 QR), then cast."""
    return tf.cast(initializer(shape, dtype="float32"), dtype or "float32")


class _Recurrent(SpikingCell):
    """The recurrent weight shared by RLIFCell and RSynapticCell (created in build, read once per sequence).

    A subclass lists this class before its neuron's cell (``class RLIFCell(_Recurrent, LIFCell)``): ``__init__``
    takes the recurrent arguments and hands every other one to the neuron's cell, and the subclass's signature is
    the neuron's, then the recurrent arguments."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        neuron = next(k for k in cls.__mro__[1:] if issubclass(k, SpikingCell) and not issubclass(k, _Recurrent))
        cls.__signature__ = forwarding_signature(inspect.signature(neuron), [init_signature(_Recurrent)])

    def __init__(
        self,
        *args: Any,
        all_to_all: bool = True,
        learn_recurrent: bool = True,
        recurrent_bias: bool = False,
        recurrent_initializer: Any = None,
        recurrent_regularizer: Any = None,
        recurrent_constraint: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)  # the neuron's cell, next in the method resolution order
        self.all_to_all = check_bool(type(self).__name__, "all_to_all", all_to_all)
        self.learn_recurrent = check_bool(type(self).__name__, "learn_recurrent", learn_recurrent)
        self.recurrent_bias = check_bool(type(self).__name__, "recurrent_bias", recurrent_bias)
        default = "orthogonal" if self.all_to_all else "ones"  # snnTorch's one-to-one V starts at 1
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer or default)
        self.recurrent_regularizer = keras.regularizers.get(recurrent_regularizer)
        self.recurrent_constraint = keras.constraints.get(recurrent_constraint)

    def build(self, input_shape: Any) -> None:
        super().build(input_shape)
        units = int(self.units or 1)
        self._learned[_KERNEL] = self.add_weight(
            name=_KERNEL,
            shape=(units, units) if self.all_to_all else (units,),
            initializer=functools.partial(_in_float32, self.recurrent_initializer),
            regularizer=self.recurrent_regularizer,
            constraint=self.recurrent_constraint,
            trainable=self.learn_recurrent,
        )
        if self.recurrent_bias:
            self._learned[_BIAS] = self.add_weight(
                name=_BIAS, shape=(units,), initializer="zeros", trainable=self.learn_recurrent
            )

    def recurrent_input(self, spikes: tf.Tensor) -> tf.Tensor:
        """``S[t−1]·V`` (all-to-all) or ``V ⊙ S[t−1]`` (one-to-one), plus the recurrent bias."""
        kernel = self.value(_KERNEL, spikes.dtype)
        out = tf.matmul(spikes, kernel) if self.all_to_all else spikes * kernel
        return out + self.value(_BIAS, spikes.dtype) if self.recurrent_bias else out

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            all_to_all=self.all_to_all,
            learn_recurrent=self.learn_recurrent,
            recurrent_bias=self.recurrent_bias,
            recurrent_initializer=keras.initializers.serialize(self.recurrent_initializer),
            recurrent_regularizer=keras.regularizers.serialize(self.recurrent_regularizer),
            recurrent_constraint=keras.constraints.serialize(self.recurrent_constraint),
        )
        return config


@keras.saving.register_keras_serializable(package="ste.spiking")
class RLIFCell(_Recurrent, LIFCell):
    """One time step of recurrent LIF neurons (snnTorch's ``RLeaky``): ``U[t] = β·U[t−1] + X[t] + rec(S[t−1]) − R[t]``.

    Args:
        *args: ``beta`` and ``threshold``, as [`LIFCell`][ste.spiking.LIFCell].
        all_to_all: a ``[units, units]`` recurrent matrix (default, snnTorch's default) or, with False, one weight
            per neuron on its own last spike.
        learn_recurrent: train the recurrent weight (default True, as snnTorch).
        recurrent_bias: add a bias to the recurrent input (snnTorch's all-to-all ``nn.Linear`` has one; it is a
            constant input current, so the bias of the layer in front can hold it instead).
        recurrent_initializer: Keras initializer of V; default ``"orthogonal"`` (all-to-all) or ``"ones"``.
        recurrent_regularizer: Keras regularizer of V.
        recurrent_constraint: Keras constraint of V.
        **kwargs: the other arguments of [`LIFCell`][ste.spiking.LIFCell] (``learn_beta``, ``reset``,
            ``detach_reset``, ``surrogate``, ``learn_threshold``, ``learn_surrogate``, ``emit``, ``units``) and
            Keras layer arguments; ``inspect.signature(RLIFCell)`` lists them all.

    States: ``[U, S]``.
    """

    nir_form = "recurrent_lif"

    def step(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        return super().step(inputs + self.recurrent_input(states[1]), states)


@keras.saving.register_keras_serializable(package="ste.spiking")
class RSynapticCell(_Recurrent, SynapticCell):
    """One time step of recurrent synaptic neurons (snnTorch's ``RSynaptic``): the spikes feed the synaptic current.

    ``I_syn[t] = α·I_syn[t−1] + X[t] + rec(S[t−1])``, ``U[t] = β·U[t−1] + I_syn[t] − R[t]``. The arguments are
    those of [`SynapticCell`][ste.spiking.SynapticCell] and the recurrent ones of
    [`RLIFCell`][ste.spiking.RLIFCell]. States: ``[U, S, I_syn]``.
    """

    nir_form = "recurrent_cuba_lif"

    def synaptic_input(self, inputs: tf.Tensor, states: Sequence[tf.Tensor]) -> tf.Tensor:
        return inputs + self.recurrent_input(states[1])


@keras.saving.register_keras_serializable(package="ste.spiking")
class RLIF(SpikingRNN):
    """Recurrent LIF neurons over a time axis (snnTorch's ``RLeaky``); the arguments of
    [`RLIFCell`][ste.spiking.RLIFCell] and [`SpikingRNN`][ste.spiking.SpikingRNN]."""

    cell_class = RLIFCell


@keras.saving.register_keras_serializable(package="ste.spiking")
class RSynaptic(SpikingRNN):
    """Recurrent synaptic neurons over a time axis (snnTorch's ``RSynaptic``); the arguments of
    [`RSynapticCell`][ste.spiking.RSynapticCell] and [`SpikingRNN`][ste.spiking.SpikingRNN]."""

    cell_class = RSynapticCell
