"""The public calls: :func:`prune_low_magnitude`, :func:`strip_pruning`, :func:`prune_scope` (TFMOT's names, for
Keras 3). Every argument and every layer is checked before anything is built or copied."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras

from .._common._arguments import check_bool
from .._keras._rewrite import Rewriter, copy_layer
from ..errors import ParameterError, ParameterTypeError, UnsupportedLayerError
from ._arguments import check_arguments
from ._layers import (
    check_weights,
    has_m_by_n_axes,
    input_channel_axis,
    is_prunable,
    m_by_n_axes,
    prunable_weights,
    unsupported_reason,
)
from ._rewrites import Prune, Strip, wrap
from ._schedule import ConstantSparsity, PolynomialDecay, PruningSchedule
from ._target import check_targets
from ._wrapper import PruneLowMagnitude

__all__ = ["prune_low_magnitude", "prune_scope", "strip_pruning"]

_OWNER = "ste.sparsity.prune_low_magnitude"


def _check_layer(layer: keras.layers.Layer, settings: tuple[Any, ...]) -> int | None:
    """Check one layer to be pruned (before any copy); returns its N:M axis."""
    if isinstance(layer, PruneLowMagnitude):
        raise ParameterError(
            f"{_OWNER}: layer '{layer.name}' is already pruned (a PruneLowMagnitude). Fix: prune each layer once; "
            f"call ste.sparsity.strip_pruning first to prune again with other settings."
        )
    if not is_prunable(layer):
        raise UnsupportedLayerError(f"{_OWNER}: {unsupported_reason(layer)}")
    _, block, _, pattern, _, _ = settings
    axis = input_channel_axis(layer)
    if layer.built:
        weights = prunable_weights(layer, pattern is not None)
        for weight, weight_axis in zip(weights, m_by_n_axes(layer, m_by_n=pattern is not None)):
            check_weights(layer, [weight], block, pattern, weight_axis)
        check_weights(layer, weights, block, None, None)  # a layer with no weight is refused
    elif pattern is not None and not has_m_by_n_axes(layer):
        check_weights(layer, [None], block, pattern, None)  # refused for want of an axis, whatever its shape
    return axis


def prune_low_magnitude(
    to_prune: Any,
    pruning_schedule: PruningSchedule | None = None,
    block_size: tuple[int, int] = (1, 1),
    block_pooling_type: str = "AVG",
    sparsity_m_by_n: tuple[int, int] | None = None,
    gradient: str = "masked",
    decay: float | None = None,
    strict: bool = False,
    filters: Any = None,
) -> Any:
    """A layer or model whose weights are pruned by magnitude during training (TFMOT's ``prune_low_magnitude``).

    * ``to_prune``: a layer (a copy of it wrapped in :class:`PruneLowMagnitude`, e.g. inside a
      ``Sequential([...])`` list, so that the layer given is never changed), a list of layers (a list of wrappers, as
      TFMOT: a layer already pruned and an ``InputLayer`` are kept as they are), or a Keras 3 model of any kind
      (Sequential, functional, nested, subclassed, KerasHub's): a copy with the trained weights in which every
      prunable layer is wrapped, at any depth (inside a transformer block too); a layer the model calls several times
      stays one (pruned) layer. The copy is not compiled (compile it, as TFMOT's result).
    * ``pruning_schedule``: when and how much (default ``ConstantSparsity(0.5, begin_step=0)``).
    * ``block_size``/``block_pooling_type``: prune blocks of a rank-2 weight, pooled by ``"AVG"`` or ``"MAX"``.
    * ``sparsity_m_by_n=(m, n)``: zero ``m`` of every ``n`` consecutive weights along the input channels, the
      contracted axis of an EinsumDense kernel (2:4 is ``(2, 4)``); the schedule then only says when the mask is
      recomputed.
    * ``gradient``: ``"masked"`` (TFMOT's) or ``"sr_ste"`` with ``decay`` (default 2e-4).
    * ``strict``: weights of rank >= 2 that no known way prunes stay dense, named in one warning; ``strict=True``
      makes it an error, raised before anything is built.
    * ``filters``: which of the prunable layers of a model to prune (Keras's ``model.quantize`` takes the same): a
      regular expression searched in the layer's name, a layer class, a callable ``layer -> bool``, or a list of
      those; e.g. ``filters=lambda layer: layer.name != "stem"`` prunes every layer but the stem. The others stay
      dense without a warning.

    ``fit`` needs ``callbacks=[ste.sparsity.UpdatePruningStep()]``; :func:`strip_pruning` gives the plain model.
    """
    strict = check_bool(_OWNER, "strict", strict)
    settings = check_arguments(
        _OWNER,
        ConstantSparsity(0.5, 0) if pruning_schedule is None else pruning_schedule,
        block_size,
        block_pooling_type,
        sparsity_m_by_n,
        gradient,
        decay,
    )
    if isinstance(to_prune, keras.Model):
        rewriter = Rewriter(Prune(settings, _check_layer), filters, strict)
        model = rewriter.run(to_prune)
        rewriter.warn(stacklevel=2)
        return model
    if filters is not None:
        raise ParameterError(
            f"{_OWNER}: filters selects layers of a model; received a single layer with filters={filters!r:.60}. "
            f"Fix: leave filters out, or pass the model."
        )
    if isinstance(to_prune, keras.layers.Layer):
        return wrap(copy_layer(to_prune, _OWNER), settings, _check_layer(to_prune, settings))
    if isinstance(to_prune, list):  # TFMOT's list: a list of wrappers; every layer checked before any is wrapped
        kept = (PruneLowMagnitude, keras.layers.InputLayer)
        for layer in to_prune:
            if not isinstance(layer, keras.layers.Layer) or isinstance(layer, keras.Model):
                raise ParameterTypeError(
                    f"{_OWNER}: a list passed as to_prune must hold Keras 3 layers; it holds "
                    f"{type(layer).__name__} {_short(layer)}. Fix: pass a list of layers, or a model by itself."
                )
        axes = [None if isinstance(layer, kept) else _check_layer(layer, settings) for layer in to_prune]
        pruned: list[keras.layers.Layer] = []
        for layer, axis in zip(to_prune, axes):
            if isinstance(layer, PruneLowMagnitude):
                pruned.append(layer)
            elif isinstance(layer, keras.layers.InputLayer):  # a new one, as TFMOT's list
                pruned.append(type(layer).from_config(layer.get_config()))
            else:
                pruned.append(wrap(copy_layer(layer, _OWNER), settings, axis))
        return pruned
    raise ParameterTypeError(
        f"{_OWNER}: expected a Keras 3 layer, a list of layers or a functional/Sequential model; received "
        f"{type(to_prune).__name__} {_short(to_prune)}. Fix: {_keras3_fix(to_prune, 'to_prune')}."
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _keras3_fix(value: Any, what: str) -> str:
    """How to turn ``value`` (not a Keras 3 layer or model) into one."""
    module = type(value).__module__ or ""
    if module.startswith(("tf_keras", "keras.src.legacy", "tensorflow.python.keras")) or "tf_keras" in module:
        return (
            "this is a Keras 2 (tf_keras / tf.keras with TF_USE_LEGACY_KERAS) object, which ste.sparsity does not "
            "prune; rebuild the model with Keras 3 (import keras; keras.Sequential([...])) and load its weights with "
            "set_weights"
        )
    return (
        f"pass {what} as the keras.layers.Layer or keras.Model itself (Keras 3: import keras), e.g. "
        f"ste.sparsity.prune_low_magnitude(keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)]))"
    )


def strip_pruning(model: Any, strict: bool = False) -> Any:
    """The model with each :class:`PruneLowMagnitude` replaced by its layer, whose pruned weights hold
    ``weight · mask`` (zeros in place), as a copy: the layers keep their classes (a KerasHub model stays one), and the
    pruned model is not changed. A single wrapper gives its stripped layer.

    A pruned layer whose masks hold fewer zeros than its schedule targets (a ``frequency`` larger than the steps
    trained, a ``PolynomialDecay`` stopped before ``end_step``, mask updates that did not run) is stripped as it is and
    named in one warning with the zeros reached, the target and the likely cause; ``strict=True`` raises
    :class:`ste.errors.PruningTargetError` instead, before anything is copied. Once a layer's schedule has begun
    (its step >= ``begin_step``), the target is ``ConstantSparsity``'s ``target_sparsity``; ``PolynomialDecay``'s
    ``final_sparsity`` while the layer is short of ``end_step`` (stripping ends the training, and a user who strips
    early gets less than the schedule was set up to reach: the warning says so), and from ``end_step`` on the
    sparsity of its last update; ``m`` zeros in every ``n`` with ``sparsity_m_by_n``. A schedule class of your own is
    not checked. docs/sparsity.md, "What strip_pruning checks"."""
    owner = "ste.sparsity.strip_pruning"
    check_targets(model, owner, check_bool(owner, "strict", strict))
    if isinstance(model, PruneLowMagnitude):
        return Strip().replace(copy_layer(model, owner), model)
    if not isinstance(model, keras.Model):
        raise ParameterTypeError(
            f"{owner}: expected a Keras 3 model or a PruneLowMagnitude layer; received {type(model).__name__} "
            f"{_short(model)}. Fix: pass the model that prune_low_magnitude returned (after training)."
        )
    return Rewriter(Strip()).run(model)


@contextlib.contextmanager
def prune_scope() -> Iterator[None]:
    """Load models saved with pruning wrappers (TFMOT's ``prune_scope``). ``ste``'s classes are registered with
    Keras, so ``keras.models.load_model`` finds them anyway; this scope is kept for TFMOT code."""
    objects = {
        "PruneLowMagnitude": PruneLowMagnitude,
        "ConstantSparsity": ConstantSparsity,
        "PolynomialDecay": PolynomialDecay,
    }
    with keras.saving.custom_object_scope(objects):
        yield
