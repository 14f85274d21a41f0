""":class:`PruneLowMagnitude`: a layer whose prunable weights are read through a mask (TFMOT's wrapper).

For each prunable weight the wrapper keeps a mask (non-trainable, the weight's shape, boolean: True where the weight
is kept, all True at first; one byte a weight where TFMOT keeps a float of the weight's dtype) and the threshold
magnitude of its last update, and one ``pruning_step`` counter (int64, −1 until training starts).

In a training call (``training=True``) the step becomes the optimizer's iteration count + 1 (in ``fit``, read from
the model's optimizer inside the step; in a custom loop, one more than the count :class:`UpdatePruningStep` set before
the batch); when the schedule says so at that step, each mask
is recomputed from its weight's magnitudes (:mod:`ste.sparsity._mask`), inside a ``tf.cond`` on the schedule's
condition, so that the sort behind a mask runs only at the steps where the schedule updates (as TFMOT's
``conditional_mask_update``). With ``gradient="masked"`` the new mask is computed from ``weight · mask`` (the weight
re-zeroed with the current mask), and a weight the current mask prunes ranks below every kept one: an optimizer's
momentum may have moved a pruned latent weight since the last call, but it stays pruned, so the pruned set only grows
while the scheduled sparsity does not fall. The weight is then set to ``weight · mask`` (TFMOT does so in every
training call). With ``gradient="sr_ste"`` the latent weights are kept and the masks are recomputed from them, so a
pruned weight can come back at the next update.

``training`` may be a Python bool, a numpy bool or a boolean scalar tensor (also a symbolic one inside a
``tf.function``: the pruning step then runs under a ``tf.cond``); anything else is refused.

In every call the layer reads each prunable weight as ``weight · mask`` through the straight-through op of the
gradient choice (a ``keras.StatelessScope`` maps the variable to that value while the layer runs, whichever attribute
or sub-layer reads it). The wrapper is called as the wrapped layer is (its call signature: keyword inputs such as
``mha(query=q, value=v)`` pass through), and an unbuilt layer whose ``build`` takes several shapes
(``MultiHeadAttention``) is built from every input of the first call (:mod:`ste._keras._forwarding`).
``UpdatePruningStep`` must be among ``fit``'s callbacks: a training call without it raises
:class:`MissingCallbackError` while the step is traced, before any variable changes.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from .._keras._forwarding import build_inner, take_call_signature
from .._keras._stateless import call_with_values
from .._patches import apply as apply_patches
from ..errors import MissingCallbackError, NotBuiltError, ParameterError, ParameterTypeError, UnsupportedLayerError
from ._arguments import check_arguments
from ._layers import (
    check_weights,
    input_channel_axis,
    is_prunable,
    m_by_n_axes,
    prunable_weights,
    unsupported_reason,
)
from ._mask import GRADIENTS, magnitude_keep, n_by_m_keep
from ._schedule import ConstantSparsity
from ._schedule_names import deserialize_schedule

__all__ = ["PruneLowMagnitude"]

_CALLBACK_FLAG = "_ste_pruning_callback"


def _zero_pruned(value: Any, keep: Any) -> Any:
    """``value`` with zeros where the boolean ``keep`` is False (``value · mask``, without a float mask)."""
    return tf.where(keep, value, tf.zeros((), value.dtype))


@keras.saving.register_keras_serializable(package="ste")
class PruneLowMagnitude(keras.layers.Layer):  # type: ignore[misc]
    """``layer`` with its prunable weights masked by magnitude during training (see the module docstring).

    Create it with :func:`ste.sparsity.prune_low_magnitude` (which also checks the layer against a model's needs), or
    directly with the same arguments: the constructor checks them as that call does (``decay=None`` is SR-STE's λ
    with ``gradient="sr_ste"``; ``m_by_n_axis`` is the N:M axis, by default the layer's input-channel axis).
    """

    #: The call that turns a trained model's wrappers back into plain layers: conversion and QAT ask for it first.
    strip_with = "ste.sparsity.strip_pruning"

    def __init__(
        self,
        layer: Any,
        pruning_schedule: Any = None,
        block_size: Any = (1, 1),
        block_pooling_type: str = "AVG",
        sparsity_m_by_n: Any = None,
        gradient: str = "masked",
        decay: float | None = None,
        m_by_n_axis: int | None = None,
        **kwargs: Any,
    ) -> None:
        apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
        owner = "ste.sparsity.PruneLowMagnitude"
        if isinstance(layer, dict):
            layer = keras.saving.deserialize_keras_object(layer)
        if isinstance(pruning_schedule, dict):
            pruning_schedule = deserialize_schedule(pruning_schedule)
        if pruning_schedule is None:
            pruning_schedule = ConstantSparsity(0.5, 0)
        if gradient == "masked" and decay is not None and not isinstance(decay, bool) and decay == 0:
            decay = None  # a saved masked wrapper's config holds decay=0.0
        schedule, block, pooling, pattern, gradient, rate = check_arguments(
            owner, pruning_schedule, block_size, block_pooling_type, sparsity_m_by_n, gradient, decay
        )
        if not isinstance(layer, keras.layers.Layer) or isinstance(layer, keras.Model):
            kind = "a model" if isinstance(layer, keras.Model) else f"{type(layer).__name__} {repr(layer)[:60]}"
            raise ParameterTypeError(
                f"{owner}: layer must be a Keras 3 layer (not a model); received {kind}. Fix: pass one layer, e.g. "
                f"PruneLowMagnitude(keras.layers.Dense(8)), or prune a whole model with "
                f"ste.sparsity.prune_low_magnitude(model)."
            )
        if isinstance(layer, PruneLowMagnitude):
            raise ParameterError(
                f"{owner}: layer '{layer.name}' is already pruned (a PruneLowMagnitude). Fix: prune each layer once; "
                f"call ste.sparsity.strip_pruning first to prune again with other settings."
            )
        if not is_prunable(layer):
            raise UnsupportedLayerError(f"{owner}: {unsupported_reason(layer)}")
        kwargs.setdefault("name", f"prune_low_magnitude_{layer.name}")
        kwargs.setdefault("dtype", layer.dtype_policy)
        super().__init__(**kwargs)
        self.layer = layer
        self.pruning_schedule = schedule
        self.block_size: tuple[int, int] = block
        self.block_pooling_type = pooling
        self.sparsity_m_by_n: tuple[int, int] | None = pattern
        self.m_by_n_axis = m_by_n_axis if m_by_n_axis is not None or pattern is None else input_channel_axis(layer)
        self.gradient = gradient
        self.decay = rate
        self.pruning_vars: list[tuple[Any, Any, Any]] = []
        setattr(self, _CALLBACK_FLAG, False)
        self._set_step_source(None)
        take_call_signature(self, layer)
        self.supports_masking = layer.supports_masking
        input_shape = getattr(layer, "_input_shape_arg", None)
        if input_shape is not None:  # Sequential([prune_low_magnitude(Dense(4, input_shape=(8,))), ...]) is built
            self._input_shape_arg = input_shape

    def _maybe_build(self, call_spec: Any) -> None:
        build_inner(self.layer, call_spec)  # a layer built from several inputs (MultiHeadAttention)
        super()._maybe_build(call_spec)

    def build(self, input_shape: Any = None, **shapes: Any) -> None:
        if not self.layer.built:  # a layer of several inputs (attention) is built from its shapes by name
            self.layer.build(**shapes) if shapes else self.layer.build(input_shape)
        m_by_n = self.sparsity_m_by_n is not None
        weights = prunable_weights(self.layer, m_by_n)
        owner = "ste.sparsity.PruneLowMagnitude"
        check_weights(self.layer, weights, self.block_size, None, None, owner)
        axes = m_by_n_axes(self.layer, self.m_by_n_axis, m_by_n)
        for weight, axis in zip(weights, axes):
            check_weights(self.layer, [weight], self.block_size, self.sparsity_m_by_n, axis, owner)
        object.__setattr__(self, "_m_by_n_axes", axes)  # each weight's N:M axis
        triples = []
        for index, weight in enumerate(weights):
            base = weight.path.split("/")[-1] if hasattr(weight, "path") else f"weight_{index}"
            mask = self.add_weight(
                name=f"{base}_mask", shape=weight.shape, initializer="ones", dtype="bool", trainable=False
            )
            threshold = self.add_weight(
                name=f"{base}_threshold", shape=(), initializer="zeros", dtype=weight.dtype, trainable=False
            )
            triples.append((weight, mask, threshold))
        object.__setattr__(self, "_pruning_triples", triples)  # the layer's weights are tracked by the layer
        self.pruning_vars = triples
        self.pruning_step = self.add_weight(
            name="pruning_step",
            shape=(),
            initializer=keras.initializers.Constant(-1),
            dtype="int64",
            trainable=False,
        )
        self.built = True

    # -- masks ----------------------------------------------------------------------------------------------------

    def get_prunable_weights(self) -> list[Any]:
        """The wrapped layer's variables that are pruned (TFMOT's ``get_prunable_weights``; the layer must be
        built)."""
        if not self.layer.built:
            raise NotBuiltError(
                f"{self.name}.get_prunable_weights(): the wrapped layer '{self.layer.name}' is not built, so its "
                f"weights do not exist yet. Fix: call the wrapper on data first (or build it, e.g. "
                f"wrapper.build((None, 8))), or use it in a model with a keras.Input."
            )
        return prunable_weights(self.layer, self.sparsity_m_by_n is not None)

    @property
    def prunable_weights(self) -> list[Any]:
        """TFMOT's attribute: the pruned variables, as :meth:`get_prunable_weights` gives them."""
        return self.get_prunable_weights()

    def _new_mask(self, weight: Any, sparsity: Any, previous: Any = None, axis: int | None = None) -> tuple[Any, Any]:
        """The boolean mask of ``weight`` at ``sparsity`` and its threshold (N:M along ``axis``); with ``previous``
        (the current mask), a weight it prunes stays pruned while enough weights are kept."""
        if self.sparsity_m_by_n is not None:
            zeros, group = self.sparsity_m_by_n
            return n_by_m_keep(weight, zeros, group, -2 if axis is None else axis, previous), tf.zeros((), weight.dtype)
        return magnitude_keep(weight, sparsity, self.block_size, self.block_pooling_type, previous)

    def update_masks(self, sparsity: Any) -> None:
        """Recompute every mask at ``sparsity`` (and zero the pruned weights with ``gradient="masked"``, where a
        weight already pruned stays pruned; see the module docstring)."""
        axes = getattr(self, "_m_by_n_axes", [self.m_by_n_axis] * len(self.pruning_vars))
        for (weight, mask, threshold), axis in zip(self.pruning_vars, axes):
            previous = mask.value if self.gradient == "masked" else None
            keep, new_threshold = self._new_mask(weight.value, sparsity, previous, axis)
            mask.assign(keep)
            threshold.assign(new_threshold)
            if self.gradient == "masked":
                weight.assign(_zero_pruned(weight.value, keep))

    def apply_masks(self) -> None:
        """Set each prunable weight to ``weight · mask``."""
        for weight, mask, _ in self.pruning_vars:
            weight.assign(_zero_pruned(weight.value, mask.value))

    def _set_step_source(self, iterations: Any) -> None:
        """Read the step from ``iterations`` (an optimizer's iteration count) in each training call, or (None)
        count the calls from the step :class:`UpdatePruningStep` sets before each batch."""
        object.__setattr__(self, "_step_source", iterations)  # the optimizer's variable, not the layer's

    def _check_callback(self) -> None:
        if not getattr(self, _CALLBACK_FLAG, False):
            raise MissingCallbackError(
                f"{self.name}: a pruned layer was called with training=True, but the pruning step is not being "
                f"updated. Fix: pass callbacks=[ste.sparsity.UpdatePruningStep()] to fit (in a custom training "
                f"loop, call its set_model(model) and on_train_begin() once and on_train_batch_begin(step) before "
                f"each step), as TFMOT's prune_low_magnitude requires."
            )

    def _training_step(self) -> None:
        source = getattr(self, "_step_source", None)
        if source is None:
            self.pruning_step.assign_add(1)
        else:  # in fit: the optimizer's iteration count + 1, read in the step itself
            self.pruning_step.assign(tf.cast(source.value, "int64") + 1)
        should_prune, sparsity = self.pruning_schedule(self.pruning_step.value)

        def update() -> Any:
            self.update_masks(sparsity)
            return tf.constant(True)

        tf.cond(should_prune, update, lambda: tf.constant(False))
        if self.gradient == "masked":
            self.apply_masks()

    # -- the call -------------------------------------------------------------------------------------------------

    def _training_flag(self, training: Any) -> Any:
        """``training`` as None, a Python bool, or (a boolean scalar whose value is known only when the function
        runs) a symbolic tensor; anything else is refused."""
        if training is None or isinstance(training, bool):
            return training
        if isinstance(training, np.bool_):
            return bool(training)
        if tf.is_tensor(training) and training.dtype == tf.bool and training.shape.rank == 0:
            known = tf.get_static_value(training)
            return training if known is None else bool(known)
        shown = repr(training) if len(repr(training)) <= 60 else repr(training)[:57] + "..."
        raise ParameterTypeError(
            f"{self.name}: training must be True, False, None or a boolean scalar tensor; received {shown} "
            f"({type(training).__name__}). A number or string is not read as a flag (it would turn pruning off or "
            f"on by accident). Fix: pass training=True in a training step (training=False or leave it out for "
            f"inference), or a tf.bool scalar."
        )

    def call(self, *args: Any, **kwargs: Any) -> Any:
        training = self._training_flag(kwargs.pop("training", None))
        if training is True:
            self._check_callback()
            self._training_step()
        elif training is not None and training is not False:  # a symbolic boolean: the step runs when it is True

            def step() -> Any:
                self._training_step()
                return tf.constant(True)

            self._check_callback()
            tf.cond(training, step, lambda: tf.constant(False))
        op = GRADIENTS[self.gradient]
        hyper = {"decay": self.decay} if self.gradient == "sr_ste" else {}
        masked = [op(weight.value, tf.cast(mask.value, weight.dtype), **hyper) for weight, mask, _ in self.pruning_vars]
        if getattr(self.layer, "_call_has_training_arg", False) and training is not None:
            kwargs["training"] = training
        return call_with_values(
            self,
            [(weight, value) for (weight, _, _), value in zip(self.pruning_vars, masked)],
            self.layer.variables,  # assignments inside the layer
            lambda: self.layer(*args, **kwargs),
        )

    def compute_mask(self, *args: Any, **kwargs: Any) -> Any:
        return self.layer.compute_mask(*args, **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "layer": keras.saving.serialize_keras_object(self.layer),
            "pruning_schedule": keras.saving.serialize_keras_object(self.pruning_schedule),
            "block_size": list(self.block_size),
            "block_pooling_type": self.block_pooling_type,
            "sparsity_m_by_n": None if self.sparsity_m_by_n is None else list(self.sparsity_m_by_n),
            "gradient": self.gradient,
            "decay": self.decay,
            "m_by_n_axis": self.m_by_n_axis,
        }
