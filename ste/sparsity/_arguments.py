"""The checks of the pruning arguments that :func:`~ste.sparsity.prune_low_magnitude` and
:class:`~ste.sparsity.PruneLowMagnitude` share: the schedule, ``block_size``, ``block_pooling_type``,
``sparsity_m_by_n``, ``gradient`` and ``decay``. Each error names the call it comes from (``owner``) and the fix."""

from __future__ import annotations

import difflib
import numbers
from typing import Any

from ..errors import ParameterError, ParameterTypeError
from ._mask import GRADIENTS
from ._schedule import PruningSchedule, number_error

__all__ = ["SR_STE_DECAY", "check_arguments", "check_schedule"]

SR_STE_DECAY = 2e-4  # Zhou et al. (ICLR 2021)'s λ


_PAIR_FIXES = {
    "block_size": "block_size=(1, 1) to prune single weights (the default), or a block's (rows, columns), e.g. (1, 4)",
    "sparsity_m_by_n": "sparsity_m_by_n=(2, 4) for 2:4 sparsity (m zeros in every n consecutive input channels)",
}


def _pair(owner: str, name: str, value: Any) -> tuple[int, int]:
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
            f"{owner}: {name} must be a tuple of 2 integers; received {value!r} ({type(value).__name__}). "
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


def check_schedule(owner: str, schedule: Any) -> None:
    if not isinstance(schedule, PruningSchedule):
        raise ParameterTypeError(
            f"{owner}: pruning_schedule must be a ste.sparsity.PruningSchedule (ConstantSparsity, PolynomialDecay or "
            f"a subclass); received {schedule!r} ({type(schedule).__name__}). Fix: {_schedule_fix(schedule)}."
        )


def check_arguments(
    owner: str, schedule: Any, block_size: Any, pooling: Any, m_by_n: Any, gradient: Any, decay: Any
) -> tuple[Any, tuple[int, int], str, tuple[int, int] | None, str, float]:
    check_schedule(owner, schedule)
    block = _pair(owner, "block_size", block_size)
    if min(block) < 1:
        raise ParameterError(
            f"{owner}: block_size must hold two integers >= 1 (the rows and columns of a pruned block); received "
            f"{block_size!r}. Fix: pass block_size=({max(block[0], 1)}, {max(block[1], 1)}), or (1, 1) to prune "
            f"single weights."
        )
    if pooling not in ("AVG", "MAX"):
        if isinstance(pooling, str) and pooling.strip().upper() in ("AVG", "MAX"):
            fix = f"block_pooling_type={pooling.strip().upper()!r} (upper case, as in TFMOT)"
        else:
            fix = "block_pooling_type='AVG' (a block's mean magnitude, the default) or 'MAX' (its largest)"
        raise ParameterError(
            f"{owner}: block_pooling_type must be 'AVG' or 'MAX'; received {pooling!r}. Fix: pass {fix}."
        )
    pattern = None
    if m_by_n is not None:
        zeros, group = _pair(owner, "sparsity_m_by_n", m_by_n)
        if group < 2 or not 1 <= zeros < group:
            raise ParameterError(
                f"{owner}: sparsity_m_by_n=(m, n) zeroes m of every n consecutive weights, so it needs "
                f"1 <= m < n; received {m_by_n!r}. Fix: e.g. sparsity_m_by_n=(2, 4) for 2:4 sparsity."
            )
        if block != (1, 1):
            raise ParameterError(
                f"{owner}: block_size and sparsity_m_by_n cannot be combined (N:M groups single weights); received "
                f"block_size={block_size!r} and sparsity_m_by_n={m_by_n!r}. Fix: pass sparsity_m_by_n with the "
                f"default block_size=(1, 1), or leave sparsity_m_by_n out for block sparsity."
            )
        pattern = (zeros, group)
    if not isinstance(gradient, str) or gradient not in GRADIENTS:
        close = difflib.get_close_matches(str(gradient).lower().replace("-", "_"), list(GRADIENTS), n=1, cutoff=0.5)
        fix = f"gradient={close[0]!r}" if close else "gradient='masked' (the default) or gradient='sr_ste'"
        raise ParameterError(
            f"{owner}: gradient must be 'masked' (pruned weights get no gradient, TFMOT's) or 'sr_ste' "
            f"(straight through plus decay·(1 − mask)·weight); received {gradient!r}. Fix: pass {fix}."
        )
    if decay is None:
        rate = SR_STE_DECAY if gradient == "sr_ste" else 0.0
    else:
        if gradient != "sr_ste":
            raise ParameterError(
                f"{owner}: decay={decay!r} applies to gradient='sr_ste' only; the masked gradient has no decay. "
                f"Fix: pass gradient='sr_ste', or leave decay out."
            )
        if isinstance(decay, bool) or not isinstance(decay, numbers.Real) or not float(decay) >= 0:
            kind = number_error(decay)
            raise kind(
                f"{owner}: decay must be a number >= 0 (SR-STE's λ: the pull of pruned weights towards zero); "
                f"received {decay!r}. Fix: pass e.g. decay={SR_STE_DECAY} (the SR-STE paper's λ), or leave decay out "
                f"for that default."
            )
        rate = float(decay)
    return schedule, block, pooling, pattern, gradient, rate
