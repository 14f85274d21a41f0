"""The public calls: :func:`prune_low_magnitude`, :func:`strip_pruning`, :func:`prune_scope` (TFMOT's names, for
Keras 3). Every argument and every layer is checked before anything is built or copied."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from .._common._arguments import check_bool
from ..errors import ParameterError, ParameterTypeError, UnsupportedLayerError
from ._arguments import check_arguments
from ._layers import check_weights, input_channel_axis, is_prunable, prunable_weights, unsupported_reason
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
        check_weights(layer, prunable_weights(layer), block, pattern, axis)
    elif pattern is not None and axis is None:
        check_weights(layer, [None], block, pattern, axis)  # refused for want of an axis, whatever its shape
    return axis


def _wrap(layer: keras.layers.Layer, settings: tuple[Any, ...], axis: int | None) -> PruneLowMagnitude:
    schedule, block, pooling, pattern, gradient, decay = settings
    return PruneLowMagnitude(
        layer,
        pruning_schedule=schedule,
        block_size=block,
        block_pooling_type=pooling,
        sparsity_m_by_n=pattern,
        gradient=gradient,
        decay=decay,
        m_by_n_axis=axis,
    )


def _all_layers(model: keras.Model) -> list[keras.layers.Layer]:
    found: dict[int, keras.layers.Layer] = {}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if not isinstance(layer, keras.layers.InputLayer):
            found.setdefault(id(layer), layer)
    return list(found.values())


def _leaf_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The layers a clone visits: nested functional and Sequential models are opened, other layers are leaves."""
    leaves: dict[int, keras.layers.Layer] = {}

    def visit(inner: keras.Model) -> None:
        for layer in inner.layers:
            if isinstance(layer, keras.layers.InputLayer):
                continue
            if isinstance(layer, keras.Model) and _is_graph(layer):
                visit(layer)
            else:
                leaves.setdefault(id(layer), layer)

    visit(model)
    return list(leaves.values())


def _is_graph(model: keras.Model) -> bool:
    return isinstance(model, keras.Sequential) or hasattr(model, "_nodes_by_depth")


def _copy(layer: keras.layers.Layer, owner: str) -> keras.layers.Layer:
    try:
        return type(layer).from_config(layer.get_config())
    except Exception as error:  # a custom layer's own from_config/get_config: any exception
        raise UnsupportedLayerError(
            f"{owner}: cannot copy the layer '{layer.name}' ({type(layer).__name__}): "
            f"{type(layer).__name__}.from_config(layer.get_config()) raised {type(error).__name__}: {error}. Fix: give "
            f"{type(layer).__name__} a get_config() that returns every argument of its __init__."
        ) from error


def _check_model(model: Any, owner: str) -> None:
    if not _is_graph(model):
        raise ParameterError(
            f"{owner}: {type(model).__name__} '{model.name}' is a subclassed model, whose layers cannot be replaced. "
            f"Fix: build it as a functional or Sequential model, or call prune_low_magnitude on its layers in its "
            f"__init__."
        )
    if isinstance(model, keras.Sequential) and not model.built:
        raise ParameterError(
            f"{owner}: the Sequential model '{model.name}' is not built. Fix: give it an input, "
            f"keras.Sequential([keras.Input(shape), ...]), or call model.build(input_shape) first."
        )


def _clone(model: keras.Model, replace: Any) -> keras.Model:
    """A copy of ``model`` in which each leaf layer is ``replace(layer)``: (new layer, the layer whose weights it
    takes, the weight values or None to copy them)."""
    pending: list[tuple[keras.layers.Layer, Any]] = []

    def clone_function(layer: keras.layers.Layer) -> keras.layers.Layer:
        new, target, values = replace(layer)
        values = values if values is not None else layer.get_weights()
        source = layer.layer if isinstance(layer, PruneLowMagnitude) else layer
        build = source.get_build_config() if source.built and not target.built else None
        if build:  # built as the original was (a layer with several inputs, e.g. attention, needs every shape)
            target.build_from_config(build)
            target.set_weights(values)
        else:
            pending.append((target, values))
        return new

    new_model = keras.models.clone_model(model, clone_function=clone_function, recursive=True)
    for target, values in pending:
        target.set_weights(values)
    return new_model


def prune_low_magnitude(
    to_prune: Any,
    pruning_schedule: PruningSchedule | None = None,
    block_size: tuple[int, int] = (1, 1),
    block_pooling_type: str = "AVG",
    sparsity_m_by_n: tuple[int, int] | None = None,
    gradient: str = "masked",
    decay: float | None = None,
    strict: bool = False,
) -> Any:
    """A layer or model whose weights are pruned by magnitude during training (TFMOT's ``prune_low_magnitude``).

    * ``to_prune``: a layer (wrapped in :class:`PruneLowMagnitude` as it is, e.g. inside a ``Sequential([...])``
      list), a list of layers (a list of wrappers, as TFMOT: a layer already pruned and an ``InputLayer`` are kept
      as they are), or a functional or Sequential model (nested ones too): a copy with the trained weights in which
      every prunable layer is wrapped; a layer the model calls several times stays one (pruned) layer.
    * ``pruning_schedule``: when and how much (default ``ConstantSparsity(0.5, begin_step=0)``).
    * ``block_size``/``block_pooling_type``: prune blocks of a rank-2 weight, pooled by ``"AVG"`` or ``"MAX"``.
    * ``sparsity_m_by_n=(m, n)``: zero ``m`` of every ``n`` consecutive weights along the input channels (2:4 is
      ``(2, 4)``); the schedule then only says when the mask is recomputed.
    * ``gradient``: ``"masked"`` (TFMOT's) or ``"sr_ste"`` with ``decay`` (default 2e-4).
    * ``strict``: a model layer that has weights but no known way to prune them stays dense, named in one warning;
      ``strict=True`` makes it an error.

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
        return _prune_model(to_prune, settings, strict)
    if isinstance(to_prune, keras.layers.Layer):
        return _wrap(to_prune, settings, _check_layer(to_prune, settings))
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
                pruned.append(_wrap(layer, settings, axis))
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


def _prune_model(model: keras.Model, settings: tuple[Any, ...], strict: bool) -> keras.Model:
    _check_model(model, _OWNER)
    axes: dict[int, int | None] = {}
    uncovered = []
    for layer in _all_layers(model):
        if isinstance(layer, PruneLowMagnitude):
            _check_layer(layer, settings)  # raises: already pruned
    for layer in _leaf_layers(model):
        if isinstance(layer, keras.Model):
            if any(is_prunable(inner) for inner in _all_layers(layer)):
                uncovered.append(f"{layer.name} ({type(layer).__name__}, a subclassed model)")
        elif is_prunable(layer):
            axes[id(layer)] = _check_layer(layer, settings)
        elif any(len(w.shape) >= 2 for w in layer.trainable_weights):
            uncovered.append(f"{layer.name} ({type(layer).__name__})")
    if uncovered and strict:
        raise UnsupportedLayerError(
            f"{_OWNER}(strict=True): no known way to prune {', '.join(uncovered)}. Fix: give such a layer a "
            f"get_prunable_weights() method (ste.sparsity.PrunableLayer), or pass strict=False to keep it dense "
            f"with a warning."
        )

    def replace(layer: keras.layers.Layer) -> tuple[Any, Any, Any]:
        copy = _copy(layer, _OWNER)
        if id(layer) in axes:
            return _wrap(copy, settings, axes[id(layer)]), copy, None
        return copy, copy, None

    new = _clone(model, replace)
    if uncovered:
        warnings.warn(
            f"{_OWNER}: {len(uncovered)} layer(s) have weights but no known way to prune them, and stay dense: "
            f"{', '.join(uncovered)}. Give them a get_prunable_weights() method, or pass strict=True to make this "
            f"an error.",
            UserWarning,
            stacklevel=3,
        )
    return new


def strip_pruning(model: Any, strict: bool = False) -> Any:
    """The model with each :class:`PruneLowMagnitude` replaced by a plain copy of its layer whose pruned weights
    hold ``weight · mask`` (zeros in place); other layers are copied with their weights. A single wrapper gives its
    stripped layer.

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
        copy, values = _stripped(model, owner)
        build = model.layer.get_build_config() if model.layer.built else None
        if build:
            copy.build_from_config(build)
            copy.set_weights(values)
        return copy
    if not isinstance(model, keras.Model):
        raise ParameterTypeError(
            f"{owner}: expected a Keras 3 model or a PruneLowMagnitude layer; received {type(model).__name__} "
            f"{_short(model)}. Fix: pass the model that prune_low_magnitude returned (after training)."
        )
    _check_model(model, owner)

    def replace(layer: keras.layers.Layer) -> tuple[Any, Any, Any]:
        if isinstance(layer, PruneLowMagnitude):
            copy, values = _stripped(layer, owner)
            return copy, copy, values
        copy = _copy(layer, owner)
        return copy, copy, None

    return _clone(model, replace)


def _stripped(wrapper: PruneLowMagnitude, owner: str) -> tuple[keras.layers.Layer, list[Any]]:
    copy = _copy(wrapper.layer, owner)
    masks = {id(weight): mask for weight, mask, _ in wrapper.pruning_vars}
    values = []
    for weight in wrapper.layer.weights:
        value = keras.ops.convert_to_numpy(weight.value)
        if id(weight) in masks:
            value = np.where(keras.ops.convert_to_numpy(masks[id(weight)].value), value, np.zeros((), value.dtype))
        values.append(value)
    return copy, values


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
