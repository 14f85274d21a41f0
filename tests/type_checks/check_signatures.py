"""Checked by mypy --strict (tests/test_static_checks.py), never run: the decorators keep signatures.

``assert_type`` fails the mypy run when a type is not the expected one; a ``# type: ignore[code]`` on a line that
must be an error fails it too when the error disappears (``warn_unused_ignores`` is part of --strict).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_type

import numpy as np
from matplotlib.figure import Figure

import ste
import ste.testing


def scale(x: float, factor: float = 2.0) -> float:
    return x * factor


def rule(dy: float, x: float, factor: float = 2.0) -> float:
    return dy * factor


op = ste.forward(scale).backward(rule)
forward_scale: ste.Forward[[float, float], float] = ste.forward(scale)
wrong_forward: ste.Forward[[str], float] = ste.forward(scale)  # type: ignore[arg-type]
assert_type(op(1.0), float)
assert_type(op(1.0, factor=3.0), float)
op("one")  # type: ignore[arg-type]
op(1.0, unknown=1)  # type: ignore[call-arg]
other_rule: ste.STEFunction[[float, float], float] = op.backward("identity")
like_rule: ste.STEFunction[[float, float], float] = op.backward_like(scale)
wrong_op: ste.STEFunction[[float], str] = op.backward("identity")  # type: ignore[assignment]
forward_fn: Callable[[float, float], float] = op.forward_fn


@ste.backward("straight_through", clip=1.0)
def step(x: float) -> float:
    return float(x > 0)


assert_type(step(0.5), float)
step(0.5, 1.0)  # type: ignore[call-arg]


@ste.backward_like(scale)
def hard(x: float, factor: float = 2.0) -> float:
    return round(x) * factor


assert_type(hard(0.5, factor=1.0), float)


@ste.forward
def binarize(x: float) -> float:
    return 1.0 if x >= 0 else -1.0


binarize_forward: ste.Forward[[float], float] = binarize
binarized = binarize.backward(lambda dy, x: dy)
assert_type(binarized(0.3), float)

surrogate = ste.registry.get("sigmoid_surrogate(beta=4.0)")
assert_type(surrogate, ste.registry.Surrogate)
assert_type(ste.registry.names(), list[str])
assert_type(ste.plot("identity"), Figure)
assert_type(ste.plot(op, x=(-1.0, 1.0), points=11), Figure)
assert_type(ste.testing.check_gradient("identity", np.linspace(-1, 1, 5)), None)
ste.testing.check_gradient("identity", [0.0], rtol="high")  # type: ignore[arg-type]
hyper: dict[str, Any] = {}
ste.testing.check_gradient(op, (1.0,), hyperparams=hyper, reference=scale)

# Surrogate hyperparameters are typed fields (typing.dataclass_transform), not **params: Any.
sigmoid = ste.registry.SigmoidSurrogate(beta=4.0)
assert_type(sigmoid.beta, float)
assert_type(ste.registry.StraightThrough(clip=None).clip, "float | None")
ste.registry.SigmoidSurrogate(beta="4")  # type: ignore[arg-type]
ste.registry.SigmoidSurrogate(bta=4.0)  # type: ignore[call-arg]
sigmoid.beta = 2.0  # type: ignore[misc]
