"""The public calls: :func:`prune_low_magnitude`, :func:`strip_pruning`, :func:`prune_scope` (TFMOT's names, for
Keras 3). Every argument and every layer is checked before anything is built or copied."""

from __future__ import annotations

import contextlib
import difflib
import numbers
from collections.abc import Iterator
from typing import Any

import keras

from .._common._arguments import check_bool
from .._keras._rewrite import Rewriter, copy_layer
from ..errors import ParameterError, ParameterTypeError, UnsupportedLayerError
from ._layers import check_weights, input_channel_axis, is_prunable, prunable_weights
from ._mask import GRADIENTS
from ._rewrites import Prune, Strip, wrap
from ._schedule import ConstantSparsity, PolynomialDecay, PruningSchedule, number_error
from ._wrapper import PruneLowMagnitude

__all__ = ["prune_low_magnitude", "prune_scope", "strip_pruning"]

_OWNER = "ste.sparsity.prune_low_magnitude"
SR_STE_DECAY = 2e-4  # Zhou et al. (ICLR 2021)'s λ


_PAIR_FIXES = {
    "block_size": "block_size=(1, 1) to prune single weights (the default), or a block's (rows, columns), e.g. (1, 4)",
    "sparsity_m_by_n": "sparsity_m_by_n=(2, 4) for 2:4 sparsity (m zeros in every n consecutive input channels)",
}


def _pair(name: str, value: Any) -> tuple[int, int]:
    try:
        pair = tuple(value) if not isinstance(value, str) else ()
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pair):
        fix = _PAIR_FIXES[name]
        if isinstance(value, str) and len(value.replace("x", ":").split(":")) == 2:
            parts = value.replace("x", ":").split(":")
            if all(part.strip().isdigit() for part in parts):
                fix = f"{name}=({int(parts[0])}, {int(parts[1])}), a tuple, not a string"
        elif len(pair) == 2 and all(
            (isinstance(v, numbers.Integral) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
            for v in pair
        ):
            fix = f"{name}=({int(pair[0])}, {int(pair[1])}), with int entries"
        raise ParameterTypeError(
            f"{_OWNER}: {name} must be a tuple of 2 integers; received {value!r} ({type(value).__name__}). "
            f"Fix: pass {fix}."
        )
    return int(pair[0]), int(pair[1])


def _schedule_fix(schedule: Any) -> str:
    """What to pass instead of ``schedule``, which is not a ste.sparsity.PruningSchedule."""
    module = type(schedule).__module__ or ""
    if module.startswith("tensorflow_model_optimization"):
        return (
            f"use ste.sparsity's schedule of the same name, which takes the same arguments, e.g. "
            f"pruning_schedule=ste.sparsity.{type(schedule).__name__}(...) (TFMOT's schedules are tf-keras objects)"
        )
    if isinstance(schedule, numbers.Real) and not isinstance(schedule, bool):
        return (
            f"wrap the sparsity in a schedule, e.g. pruning_schedule=ste.sparsity.ConstantSparsity({schedule!r}, "
            f"begin_step=0), as in TFMOT"
        )
    return (
        "pass a schedule object, e.g. pruning_schedule=ste.sparsity.ConstantSparsity(0.5, begin_step=0) or "
        "ste.sparsity.PolynomialDecay(0.0, 0.8, begin_step=0, end_step=1000), or a PruningSchedule subclass"
    )


def _check_schedule(schedule: Any) -> None:
    if not isinstance(schedule, PruningSchedule):
        raise ParameterTypeError(
            f"{_OWNER}: pruning_schedule must be a ste.sparsity.PruningSchedule (ConstantSparsity, PolynomialDecay or "
            f"a subclass); received {schedule!r} ({type(schedule).__name__}). Fix: {_schedule_fix(schedule)}."
        )
    missing = [
        name for name in ("__call__", "get_config") if getattr(type(schedule), name) is getattr(PruningSchedule, name)
    ]
    if missing:
        raise ParameterError(
            f"{_OWNER}: the pruning schedule {type(schedule).__name__} does not define {' and '.join(missing)}, "
            f"which every PruningSchedule subclass must (__call__(step) -> (should_prune, sparsity), get_config() -> "
            f"its arguments); received an instance of {type(schedule).__name__}. Fix: define them in "
            f"{type(schedule).__name__}, or derive it from ConstantSparsity or PolynomialDecay."
        )


def _check_arguments(
    schedule: Any, block_size: Any, pooling: Any, m_by_n: Any, gradient: Any, decay: Any
) -> tuple[Any, tuple[int, int], str, tuple[int, int] | None, str, float]:
    _check_schedule(schedule)
    block = _pair("block_size", block_size)
    if min(block) < 1:
        raise ParameterError(
            f"{_OWNER}: block_size must hold two integers >= 1 (the rows and columns of a pruned block); received "
            f"{block_size!r}. Fix: pass block_size=({max(block[0], 1)}, {max(block[1], 1)}), or (1, 1) to prune "
            f"single weights."
        )
    if pooling not in ("AVG", "MAX"):
        if isinstance(pooling, str) and pooling.strip().upper() in ("AVG", "MAX"):
            fix = f"block_pooling_type={pooling.strip().upper()!r} (upper case, as in TFMOT)"
        else:
            fix = "block_pooling_type='AVG' (a block's mean magnitude, the default) or 'MAX' (its largest)"
        raise ParameterError(
            f"{_OWNER}: block_pooling_type must be 'AVG' or 'MAX'; received {pooling!r}. Fix: pass {fix}."
        )
    pattern = None
    if m_by_n is not None:
        zeros, group = _pair("sparsity_m_by_n", m_by_n)
        if group < 2 or not 1 <= zeros < group:
            raise ParameterError(
                f"{_OWNER}: sparsity_m_by_n=(m, n) zeroes m of every n consecutive weights, so it needs "
                f"1 <= m < n; received {m_by_n!r}. Fix: e.g. sparsity_m_by_n=(2, 4) for 2:4 sparsity."
            )
        if block != (1, 1):
            raise ParameterError(
                f"{_OWNER}: block_size and sparsity_m_by_n cannot be combined (N:M groups single weights); received "
                f"block_size={block_size!r} and sparsity_m_by_n={m_by_n!r}. Fix: pass sparsity_m_by_n with the "
                f"default block_size=(1, 1), or leave sparsity_m_by_n out for block sparsity."
            )
        pattern = (zeros, group)
    if not isinstance(gradient, str) or gradient not in GRADIENTS:
        close = difflib.get_close_matches(str(gradient).lower().replace("-", "_"), list(GRADIENTS), n=1, cutoff=0.5)
        fix = f"gradient={close[0]!r}" if close else "gradient='masked' (the default) or gradient='sr_ste'"
        raise ParameterError(
            f"{_OWNER}: gradient must be 'masked' (pruned weights get no gradient, TFMOT's) or 'sr_ste' "
            f"(straight through plus decay·(1 − mask)·weight); received {gradient!r}. Fix: pass {fix}."
        )
    if decay is None:
        rate = SR_STE_DECAY if gradient == "sr_ste" else 0.0
    else:
        if gradient != "sr_ste":
            raise ParameterError(
                f"{_OWNER}: decay={decay!r} applies to gradient='sr_ste' only; the masked gradient has no decay. "
                f"Fix: pass gradient='sr_ste', or leave decay out."
            )
        if isinstance(decay, bool) or not isinstance(decay, numbers.Real) or not float(decay) >= 0:
            kind = number_error(decay)
            raise kind(
                f"{_OWNER}: decay must be a number >= 0 (SR-STE's λ: the pull of pruned weights towards zero); "
                f"received {decay!r}. Fix: pass e.g. decay={SR_STE_DECAY} (the SR-STE paper's λ), or leave decay out "
                f"for that default."
            )
        rate = float(decay)
    return schedule, block, pooling, pattern, gradient, rate


def _check_layer(layer: keras.layers.Layer, settings: tuple[Any, ...]) -> int | None:
    """Check one layer to be pruned (before any copy); returns its N:M axis."""
    if isinstance(layer, PruneLowMagnitude):
        raise ParameterError(
            f"{_OWNER}: layer '{layer.name}' is already pruned (a PruneLowMagnitude). Fix: prune each layer once; "
            f"call ste.sparsity.strip_pruning first to prune again with other settings."
        )
    if not is_prunable(layer):
        raise UnsupportedLayerError(
            f"{_OWNER}: layer '{layer.name}' ({type(layer).__name__}) has no kernel to prune. Fix: prune Dense, "
            f"convolution, Embedding, EinsumDense or MultiHeadAttention layers, or give a custom layer a "
            f"get_prunable_weights() method (ste.sparsity.PrunableLayer)."
        )
    _, block, _, pattern, _, _ = settings
    axis = input_channel_axis(layer)
    if layer.built:
        check_weights(layer, prunable_weights(layer), block, pattern, axis)
    elif pattern is not None and axis is None:
        check_weights(layer, [None], block, pattern, axis)  # refused for want of an axis, whatever its shape
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
      ``Sequential([...])`` list, so that the layer given is never changed), or a Keras 3 model of any kind
      (Sequential, functional, nested, subclassed, KerasHub's): a copy with the trained weights in which every
      prunable layer is wrapped, at any depth (inside a transformer block too); a layer the model calls several times
      stays one (pruned) layer. The copy is not compiled (compile it, as TFMOT's result).
    * ``pruning_schedule``: when and how much (default ``ConstantSparsity(0.5, begin_step=0)``).
    * ``block_size``/``block_pooling_type``: prune blocks of a rank-2 weight, pooled by ``"AVG"`` or ``"MAX"``.
    * ``sparsity_m_by_n=(m, n)``: zero ``m`` of every ``n`` consecutive weights along the input channels (2:4 is
      ``(2, 4)``); the schedule then only says when the mask is recomputed.
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
    settings = _check_arguments(
        ConstantSparsity(0.5, 0) if pruning_schedule is None else pruning_schedule,
        block_size,
        block_pooling_type,
        sparsity_m_by_n,
        gradient,
        decay,
    )
    if isinstance(to_prune, keras.Model):
        rewriter = Rewriter(Prune(settings, _check_layer), filters, strict)
        pruned = rewriter.run(to_prune)
        rewriter.warn(stacklevel=2)
        return pruned
    if filters is not None:
        raise ParameterError(
            f"{_OWNER}: filters selects layers of a model; received a single layer with filters={filters!r:.60}. "
            f"Fix: leave filters out, or pass the model."
        )
    if isinstance(to_prune, keras.layers.Layer):
        return wrap(copy_layer(to_prune, _OWNER), settings, _check_layer(to_prune, settings))
    raise ParameterTypeError(
        f"{_OWNER}: expected a Keras 3 layer or a functional/Sequential model; received {type(to_prune).__name__} "
        f"{_short(to_prune)}. Fix: {_keras3_fix(to_prune, 'to_prune')}."
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


def strip_pruning(model: Any) -> Any:
    """The model with each :class:`PruneLowMagnitude` replaced by its layer, whose pruned weights hold
    ``weight · mask`` (zeros in place), as a copy: the layers keep their classes (a KerasHub model stays one), and the
    pruned model is not changed. A single wrapper gives its stripped layer."""
    owner = "ste.sparsity.strip_pruning"
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
