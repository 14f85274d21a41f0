"""``lq.context``: larq's ``quantized_scope``, ``should_quantize``, ``metrics_scope`` and ``get_training_metrics``.

``quantized_scope(True)`` makes the kernels of built quantized layers read as their quantized values
(``model.get_weights()``, ``layer.kernel``, ``np.asarray``, arithmetic, ``model.save``); see
:func:`ste.layers.quantized_scope` and docs/larq.md for what stays latent (training, checkpoints, ``variable.value``).

``metrics_scope(["flip_ratio"])``: quantized layers of ``ste.larq.layers`` constructed inside it track the flip ratio
of their kernels (as if given ``metrics=["flip_ratio"]``), and ``lq.quantizers.get_kernel_quantizer`` tags the
quantizers it makes, as larq does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from ..layers import quantized_scope, should_quantize
from ..metrics import check_metric_names

__all__ = ["get_training_metrics", "metrics_scope", "quantized_scope", "should_quantize"]

_TRAINING_METRICS: set[str] = set()  # process-wide, as larq's


@contextlib.contextmanager
def metrics_scope(metrics: Iterable[str] = ()) -> Iterator[set[str]]:
    """Add ``metrics`` (only ``"flip_ratio"`` exists) to the quantized layers and kernel quantizers created inside
    the block; an unknown name raises :class:`ste.errors.ParameterError` (a ``ValueError``, as larq)."""
    names = check_metric_names("lq.context.metrics_scope", list(metrics))
    backup = set(_TRAINING_METRICS)
    _TRAINING_METRICS.update(names)
    try:
        yield _TRAINING_METRICS
    finally:
        _TRAINING_METRICS.clear()
        _TRAINING_METRICS.update(backup)


def get_training_metrics() -> set[str]:
    """The live set of training metrics of the current scope (larq: ``get_training_metrics().add("flip_ratio")``)."""
    return _TRAINING_METRICS
