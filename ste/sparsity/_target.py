"""The sparsity a pruned layer's masks should hold when it is stripped, and the check :func:`strip_pruning` makes.

A layer that has run ``s`` training steps (its ``pruning_step``; steps count from 1) is held to its schedule once
the schedule has begun (``s >= max(begin_step, 1)``); before that nothing is checked. Its target is:

* ``ConstantSparsity``: ``target_sparsity``, from ``begin_step`` on, whether or not an update has run yet (with the
  default ``frequency=100``, a run of fewer steps than that has none).
* ``PolynomialDecay``: ``final_sparsity`` while ``s < end_step``. Stripping ends the training, so a model stripped
  before its schedule finished holds less than the sparsity the schedule was set up to reach, and the warning says
  so (the step reached and ``end_step``). From ``end_step`` on, the target is the sparsity of the schedule's last
  update, which is ``final_sparsity`` when ``end_step − begin_step`` is a multiple of ``frequency`` and a hair
  below it otherwise (TFMOT's own tutorial schedules end that way).
* ``sparsity_m_by_n=(m, n)``: ``m`` zeros in every ``n`` weights once the schedule has begun (the schedule's sparsity
  is not used).

Zeros are counted as the mask counts them: a target ``t`` of ``n`` weights is ``n − max(round(n·(1 − t)), 1)`` zeros
(of ``n`` blocks with ``block_size``). A layer short of its target is named with the zeros reached, the target and
the likely cause: a ``frequency`` larger than the steps run, a schedule stopped before ``end_step``, or mask updates
that did not run (training calls without :class:`UpdatePruningStep`'s step, or with ``training`` not True). A schedule
class of your own (one that defines its own ``__call__``) is not checked.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import numpy as np

from ..errors import PruningTargetError
from ._callbacks import pruned_layers
from ._mask import kept_count
from ._schedule import ConstantSparsity, PolynomialDecay, schedule_arguments
from ._wrapper import PruneLowMagnitude

__all__ = ["check_targets"]

_FIXES = {
    "never": "pass a schedule whose updates fall inside [begin_step, end_step] (frequency <= end_step − begin_step)",
    "frequency": (
        "pass a frequency no larger than the number of steps you train (frequency=1 updates the masks at every "
        "step) and prune again, or train past the schedule's first update"
    ),
    "end_step": "train until end_step, or pass an end_step no later than the last step you train",
    "updates": (
        "train with callbacks=[ste.sparsity.UpdatePruningStep()] in fit; in a custom loop, call the callback's "
        "on_train_batch_begin(step) before each step and the model with training=True"
    ),
}


def _first_update(begin: int, frequency: int) -> int:
    """The first training step (steps count from 1) at which a schedule starting at ``begin`` updates."""
    start = max(begin, 1)
    return begin + -(-(start - begin) // frequency) * frequency


def _last_update(step: int, begin: int, end: int, frequency: int) -> int | None:
    """The last training step ``<= step`` at which the schedule updated the masks, or None."""
    stop = step if end < 0 else min(step, end)
    first = _first_update(begin, frequency)
    if first > stop:
        return None
    return begin + (stop - begin) // frequency * frequency


def _zeros_needed(size: int, sparsity: float) -> int:
    return size - int(kept_count(size, sparsity))


def _shortfalls(wrapper: PruneLowMagnitude) -> list[tuple[str, str]]:
    """A line for each of the wrapper's weights that holds fewer zeros than its schedule targets (see the module
    docstring), with the cause."""
    schedule = wrapper.pruning_schedule
    if not wrapper.built or type(schedule).__call__ not in (ConstantSparsity.__call__, PolynomialDecay.__call__):
        return []
    step = int(wrapper.pruning_step.numpy())
    begin, end, frequency = schedule.begin_step, schedule.end_step, schedule.frequency
    if step < max(begin, 1):
        return []
    last = _last_update(step, begin, end, frequency)
    polynomial = isinstance(schedule, PolynomialDecay)
    final = schedule.final_sparsity if polynomial else schedule.target_sparsity
    lines: list[tuple[str, str]] = []
    for weight, mask, _ in wrapper.pruning_vars:
        keep = np.asarray(mask.numpy()).astype(bool)
        if wrapper.sparsity_m_by_n is not None:
            zeros_of, group = wrapper.sparsity_m_by_n
            units, counted, unit = keep, keep.size * zeros_of // group, "weights"
            scheduled = required = counted
            target = zeros_of / group
        else:
            units, unit = keep, "weights"
            if wrapper.block_size != (1, 1):
                units, unit = keep[:: wrapper.block_size[0], :: wrapper.block_size[1]], "blocks"
            at_last = float(schedule(last)[1]) if last is not None else final
            scheduled = _zeros_needed(units.size, at_last)
            target = final if (last is None or (polynomial and step < end)) else at_last
            required = _zeros_needed(units.size, target)
        zeros = int(units.size - np.count_nonzero(units))
        if zeros >= required:
            continue
        first = _first_update(begin, frequency)
        if last is None and end >= 0 and first > end:
            kind, why = (
                "never",
                (
                    f"the schedule never updates the masks: its first update step {first} (begin_step={begin}, "
                    f"frequency={frequency}) is after end_step={end}"
                ),
            )
        elif last is None:
            kind, why = (
                "frequency",
                (
                    f"no mask update ran: the layer trained {step} step(s), and the schedule's first update is at step "
                    f"{first} (frequency={frequency} is larger than the steps run)"
                ),
            )
        elif zeros < scheduled:
            kind, why = (
                "updates",
                (
                    f"the schedule updated the masks at step {last}, but they hold fewer zeros than that update "
                    f"sets: the updates did not run (training calls without UpdatePruningStep's step, or with "
                    f"training not True)"
                ),
            )
        else:
            kind, why = (
                "end_step",
                (
                    f"the layer stopped at step {step}, before end_step={end}, where PolynomialDecay reaches "
                    f"final_sparsity={final}"
                ),
            )
        name = weight.path.split("/")[-1] if hasattr(weight, "path") else str(weight.name)
        arguments = ", ".join(f"{k}={v!r}" for k, v in schedule_arguments(schedule).items())
        pattern = "" if wrapper.sparsity_m_by_n is None else f" with sparsity_m_by_n={wrapper.sparsity_m_by_n}"
        lines.append(
            (
                f"'{wrapper.name}' ({type(wrapper.layer).__name__}) {name}: {zeros} of {units.size} {unit} zero "
                f"({100 * zeros / units.size:.1f} %), target {required} ({100 * target:.1f} %) of "
                f"{type(schedule).__name__}({arguments}){pattern}: {why}",
                kind,
            )
        )
    return lines


def check_targets(model: Any, owner: str, strict: bool) -> None:
    """Warn (or, ``strict``, raise :class:`ste.errors.PruningTargetError`) naming every pruned layer of ``model`` (a
    model or a single :class:`PruneLowMagnitude`) whose masks hold fewer zeros than its schedule targets."""
    if isinstance(model, PruneLowMagnitude):
        wrappers = [model]
    elif isinstance(model, keras.Model):
        wrappers = pruned_layers(model)
    else:
        return
    short = [(wrapper, _shortfalls(wrapper)) for wrapper in wrappers]
    found = [line for _, lines in short for line in lines]
    if not found:
        return
    layers = sum(1 for _, lines in short if lines)
    fixes = "; or ".join(dict.fromkeys(_FIXES[cause] for _, cause in found))
    listing = "\n".join(f"  - {line}" for line, _ in found)
    if strict:
        raise PruningTargetError(
            f"{owner}(strict=True): {layers} pruned layer(s) hold fewer zeros than their pruning schedule targets:\n"
            f"{listing}\nFix: {fixes}; or pass strict=False to strip them as they are, with a warning."
        )
    warnings.warn(
        f"{owner}: {layers} pruned layer(s) hold fewer zeros than their pruning schedule targets, and are stripped "
        f"as they are:\n{listing}\nFix: {fixes}. Pass strict=True to make this an error.",
        UserWarning,
        stacklevel=3,
    )
