"""``LeakyCell``: the base of the leaky integrate-and-fire family (``LIFCell``, ``IFCell``, ``ALIFCell``,
``SynapticCell``): a membrane that decays by β per step, ``β·U[t−1]``, with β optionally learned."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from .._common._arguments import check_bool
from ._cell import LearnedValue, SpikingCell, checked_number
from ._constraint import Interval

__all__ = ["LeakyCell"]


class LeakyCell(SpikingCell):
    """Base of the leaky neurons: a membrane decay β per step, in [0, 1], optionally trained.

    A subclass implements :meth:`SpikingCell.step`, using :meth:`decayed` for ``β·U[t−1]``.

    Args:
        beta: membrane decay β per step, in [0, 1] (snnTorch's ``beta``; ``β = exp(−Δt/τ_mem)``).
        threshold: firing threshold ϑ (> 0).
        learn_beta: make β a trainable variable, kept in [0, 1] after every optimizer step.
        **kwargs: the arguments of [`SpikingCell`][ste.spiking.SpikingCell].
    """

    beta = LearnedValue()

    def __init__(self, beta: float = 0.9, threshold: float = 1.0, *, learn_beta: bool = False, **kwargs: Any) -> None:
        super().__init__(threshold, **kwargs)
        self.beta = checked_number(type(self).__name__, "beta", beta, 0.0, 1.0)
        self.learn_beta = check_bool(type(self).__name__, "learn_beta", learn_beta)

    def learned_parameters(self) -> dict[str, tuple[float, Interval]]:
        out = super().learned_parameters()
        if self.learn_beta:
            out["beta"] = (self.beta, Interval(0.0, 1.0))
        return out

    def decayed(self, membrane: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """``β·U[t−1]`` in ``dtype``.

        Args:
            membrane: the membrane ``U[t−1]``.
            dtype: the computation dtype (the input's).
        """
        return self.value("beta", dtype) * membrane

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(beta=self.initial("beta"), learn_beta=self.learn_beta)
        return config
