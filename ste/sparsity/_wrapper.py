""":class:`PruneLowMagnitude`: a layer whose prunable weights are read through a mask (TFMOT's wrapper).

For each prunable weight the wrapper keeps a mask (non-trainable, the weight's shape, boolean: True where the weight
is kept, all True at first; one byte a weight where TFMOT keeps a float of the weight's dtype) and the threshold
magnitude of its last update, and one ``pruning_step`` counter (int64, −1 until training starts).

In a training call (``training=True``) the step becomes the optimizer's iteration count + 1 (in ``fit``, read from
the model's optimizer inside the step; in a custom loop, one more than the count :class:`UpdatePruningStep` set before
the batch); when the schedule says so at that step, each mask
is recomputed from its weight's magnitudes (:mod:`ste.sparsity._mask`), inside a ``tf.cond`` on the schedule's
condition, so that the sort behind a mask runs only at the steps where the schedule updates (as TFMOT's
``conditional_mask_update``). With ``gradient="masked"`` the weight is
then set to ``weight · mask`` (TFMOT does so in every training call, so that the pruned weights stay exactly zero
whatever the optimizer's momentum does). With ``gradient="sr_ste"`` the latent weights are kept, so a pruned weight
can come back at the next update.

In every call the layer reads each prunable weight as ``weight · mask`` through the straight-through op of the
gradient choice (a ``keras.StatelessScope`` maps the variable to that value while the layer runs, whichever attribute
or sub-layer reads it). ``UpdatePruningStep`` must be among ``fit``'s callbacks: a training call without it raises
:class:`MissingCallbackError` while the step is traced, before any variable changes.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from .._keras._stateless import call_with_values
from ..errors import MissingCallbackError, ParameterError
from ._layers import check_weights, prunable_weights
from ._mask import GRADIENTS, magnitude_keep, n_by_m_keep

__all__ = ["PruneLowMagnitude"]

_CALLBACK_FLAG = "_ste_pruning_callback"


def _zero_pruned(value: Any, keep: Any) -> Any:
    """``value`` with zeros where the boolean ``keep`` is False (``value · mask``, without a float mask)."""
    return tf.where(keep, value, tf.zeros((), value.dtype))


@keras.saving.register_keras_serializable(package="ste")
class PruneLowMagnitude(keras.layers.Layer):  # type: ignore[misc]
    """``layer`` with its prunable weights masked by magnitude during training (see the module docstring).

    Create it with :func:`ste.sparsity.prune_low_magnitude`, which checks the arguments; the constructor takes the
    same ones, already checked (``sparsity_m_by_n`` a ``(zeros, group)`` tuple or None, ``axis`` the N:M axis).
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
        decay: float = 0.0,
        m_by_n_axis: int | None = None,
        **kwargs: Any,
    ) -> None:
        from ._schedule import ConstantSparsity

        if isinstance(layer, dict):
            layer = keras.saving.deserialize_keras_object(layer)
        if isinstance(pruning_schedule, dict):
            pruning_schedule = keras.saving.deserialize_keras_object(pruning_schedule)
        if pruning_schedule is None:
            pruning_schedule = ConstantSparsity(0.5, 0)
        if gradient not in GRADIENTS:
            raise ParameterError(
                f"ste.sparsity.PruneLowMagnitude: gradient must be one of {sorted(GRADIENTS)}; received {gradient!r}. "
                f"Fix: pass gradient='masked' (TFMOT's) or gradient='sr_ste', or build the wrapper with "
                f"ste.sparsity.prune_low_magnitude, which checks every argument."
            )
        kwargs.setdefault("name", f"prune_low_magnitude_{layer.name}")
        kwargs.setdefault("dtype", layer.dtype_policy)
        super().__init__(**kwargs)
        self.layer = layer
        self.pruning_schedule = pruning_schedule
        self.block_size: tuple[int, int] = (int(block_size[0]), int(block_size[1]))
        self.block_pooling_type = block_pooling_type
        self.sparsity_m_by_n: tuple[int, int] | None = None
        if sparsity_m_by_n is not None:
            self.sparsity_m_by_n = (int(sparsity_m_by_n[0]), int(sparsity_m_by_n[1]))
        self.m_by_n_axis = m_by_n_axis
        self.gradient = gradient
        self.decay = float(decay)
        self.pruning_vars: list[tuple[Any, Any, Any]] = []
        setattr(self, _CALLBACK_FLAG, False)
        self._set_step_source(None)

    def build(self, input_shape: Any = None, **shapes: Any) -> None:
        if not self.layer.built:  # a layer of several inputs (attention) is built from its shapes by name
            self.layer.build(**shapes) if shapes else self.layer.build(input_shape)
        weights = prunable_weights(self.layer)
        check_weights(
            self.layer,
            weights,
            self.block_size,
            self.sparsity_m_by_n,
            self.m_by_n_axis,
            "ste.sparsity.PruneLowMagnitude",
        )
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

    def _new_mask(self, weight: Any, sparsity: Any) -> tuple[Any, Any]:
        """The boolean mask of ``weight`` at ``sparsity`` and its threshold."""
        if self.sparsity_m_by_n is not None:
            zeros, group = self.sparsity_m_by_n
            axis = -2 if self.m_by_n_axis is None else self.m_by_n_axis
            return n_by_m_keep(weight, zeros, group, axis), tf.zeros((), weight.dtype)
        return magnitude_keep(weight, sparsity, self.block_size, self.block_pooling_type)

    def update_masks(self, sparsity: Any) -> None:
        """Recompute every mask at ``sparsity`` (and zero the pruned weights with ``gradient="masked"``)."""
        for weight, mask, threshold in self.pruning_vars:
            keep, new_threshold = self._new_mask(weight.value, sparsity)
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

    def _training_step(self) -> None:
        if not getattr(self, _CALLBACK_FLAG, False):
            raise MissingCallbackError(
                f"{self.name}: a pruned layer was called with training=True, but the pruning step is not being "
                f"updated. Fix: pass callbacks=[ste.sparsity.UpdatePruningStep()] to fit (in a custom training "
                f"loop, call its set_model(model) and on_train_begin() once and on_train_batch_begin(step) before "
                f"each step), as TFMOT's prune_low_magnitude requires."
            )
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

    def call(self, inputs: Any, *args: Any, training: Any = None, **kwargs: Any) -> Any:
        if training is True:
            self._training_step()
        op = GRADIENTS[self.gradient]
        hyper = {"decay": self.decay} if self.gradient == "sr_ste" else {}
        masked = [op(weight.value, tf.cast(mask.value, weight.dtype), **hyper) for weight, mask, _ in self.pruning_vars]
        if getattr(self.layer, "_call_has_training_arg", False) and training is not None:
            kwargs["training"] = training
        return call_with_values(
            self,
            [(weight, value) for (weight, _, _), value in zip(self.pruning_vars, masked)],
            self.layer.variables,  # assignments inside the layer
            lambda: self.layer(inputs, *args, **kwargs),
        )

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
