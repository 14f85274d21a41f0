"""Training metrics of quantized layers: :class:`FlipRatio` (larq's ``metrics=["flip_ratio"]``).

A quantized layer built with ``metrics=["flip_ratio"]`` (every ``ste.layers`` layer takes it; off by default)
tracks one :class:`FlipRatio` per quantized kernel, named ``flip_ratio/<layer name>`` (``flip_ratio/<layer
name>/<kernel>`` for a layer with several kernels). Keras 3 collects metrics tracked by sublayers into
``model.metrics``, so ``fit`` logs it (and ``keras.callbacks.TensorBoard`` writes it) beside the loss: the mean, over
the training steps of the epoch so far, of the fraction of quantized kernel values that changed in a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from .errors import ParameterError

__all__ = ["METRIC_NAMES", "FlipRatio", "check_metric_names"]

#: The metric names a quantized layer's ``metrics=`` accepts.
METRIC_NAMES = ("flip_ratio",)


@keras.saving.register_keras_serializable(package="ste")
class FlipRatio(keras.metrics.Metric):  # type: ignore[misc]
    """The mean fraction of values that changed between consecutive :meth:`update_state` calls.

    Each call compares ``values`` with those of the previous call (exact equality, in float32 or float64) and adds
    the fraction that differ; the first call only records the values. :meth:`result` is the mean over the compared
    calls since the last :meth:`reset_state`, which keeps the recorded values (so the first step of an epoch counts
    the flips of the last update of the previous one). Unlike larq's, values are not cast to int8 first, so
    multi-bit and scaled kernels (DoReFa levels, α·sign) count correctly.

    >>> m = FlipRatio()
    >>> for values in ([1.0, 1.0], [2.0, 2.0], [1.0, 2.0]):
    ...     m.update_state(values)
    >>> float(m.result())  # (1 + 0.5) / 2
    0.75
    """

    stateful = True  # larq's (tf.keras) attribute

    def __init__(self, values_dtype: Any = None, name: str = "flip_ratio", dtype: Any = None) -> None:
        """``values_dtype``: larq's constructor argument; ``None`` (ste's default) compares the values exactly, a
        dtype casts them to it first as larq does (larq's default ``"int8"`` truncates fractional levels)."""
        super().__init__(name=name, dtype=dtype)
        self.values_dtype = None if values_dtype is None else tf.as_dtype(values_dtype)
        self._previous: Any = None

    def build(self, input_shape: Sequence[int]) -> None:
        """larq's ``build``: create the state for values of shape ``input_shape``."""
        self.build_for(tuple(input_shape), self.values_dtype or "float32")

    @property
    def total(self) -> tf.Tensor:
        """The sum of the fractions of changed values (larq's ``total``)."""
        return tf.zeros((), self.dtype) if self._previous is None else tf.convert_to_tensor(self._total.value)

    @property
    def count(self) -> tf.Tensor:
        """The number of :meth:`update_state` calls, the first (recording only) included (larq's ``count``)."""
        if self._previous is None:
            return tf.zeros((), self.dtype)
        return tf.convert_to_tensor(self._count.value + self._has_previous.value)

    @property
    def _previous_values(self) -> Any:
        """The values of the last update (larq's attribute)."""
        return self._previous

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        if self.values_dtype is not None:
            config["values_dtype"] = self.values_dtype.name
        return config

    def build_for(self, shape: Sequence[int], dtype: Any = "float32") -> None:
        """Create the state for values of ``shape`` (float32, or float64 for float64 values); else done by the first
        :meth:`update_state` call."""
        if self._previous is not None:
            return
        wide = "float64" if tf.as_dtype(dtype) == tf.float64 else "float32"
        self._previous = self.add_variable(
            shape=tuple(shape), initializer="zeros", dtype=wide, aggregation="mean", name="previous"
        )
        self._has_previous = self.add_variable(shape=(), initializer="zeros", aggregation="mean", name="has_previous")
        self._total = self.add_variable(shape=(), initializer="zeros", aggregation="mean", name="total")
        self._count = self.add_variable(shape=(), initializer="zeros", aggregation="mean", name="count")

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        values = tf.convert_to_tensor(values)
        if self.values_dtype is not None:
            values = tf.cast(values, self.values_dtype)  # larq's comparison in values_dtype
        wide = tf.float64 if values.dtype == tf.float64 else tf.float32
        values = tf.cast(tf.stop_gradient(values), wide)
        if self._previous is None:
            with tf.init_scope():
                self.build_for(values.shape, wide)
        # Inside a mixed-precision layer call Keras autocasts variable reads to float16; the values are then float16
        # too, so casting the stored (wider) copy back is exact.
        previous = tf.cast(self._previous.value, wide)
        changed = 1.0 - tf.reduce_mean(tf.cast(tf.equal(previous, values), tf.float32))
        compared = tf.cast(self._has_previous.value, tf.float32)
        self._total.assign_add(tf.cast(compared * changed, self._total.dtype))
        self._count.assign_add(tf.cast(compared, self._count.dtype))
        self._previous.assign(values)
        self._has_previous.assign(tf.ones((), self._has_previous.dtype))

    def result(self) -> tf.Tensor:
        if self._previous is None:
            return tf.zeros((), self.dtype)
        return tf.math.divide_no_nan(self._total.value, self._count.value)

    def save_own_variables(self, store: Any) -> None:
        """Saved in ``.weights.h5`` (Keras saves no metric's state): the recorded values and the running mean, so a
        run resumed from a checkpoint (``keras.callbacks.BackupAndRestore``) counts the same flips."""
        for i, variable in enumerate(self.variables):
            store[f"{i}"] = variable

    def load_own_variables(self, store: Any) -> None:
        """Restore what :meth:`save_own_variables` saved; a file saved without it (before ste 0.2) leaves the state
        as it is."""
        if not len(store.keys()):
            return
        if len(store.keys()) != len(self.variables):
            raise ParameterError(
                f"FlipRatio {self.name!r}: the weights file holds {len(store.keys())} state variables, this metric has "
                f"{len(self.variables)}. Fix: load weights saved from the same model."
            )
        for i, variable in enumerate(self.variables):
            variable.assign(store[f"{i}"])

    def reset_state(self) -> None:
        if self._previous is not None:
            self._total.assign(tf.zeros((), self._total.dtype))
            self._count.assign(tf.zeros((), self._count.dtype))


def check_metric_names(owner: str, metrics: Sequence[str] | None) -> tuple[str, ...]:
    """A layer's ``metrics=`` argument as a tuple of known names, or :class:`ste.errors.ParameterError`."""
    if metrics is None:
        return ()
    if isinstance(metrics, str) or not all(isinstance(m, str) for m in metrics):
        raise ParameterError(f"{owner}: metrics must be a list of names such as ['flip_ratio']; received {metrics!r}.")
    unknown = [m for m in metrics if m not in METRIC_NAMES]
    if unknown:
        raise ParameterError(
            f"{owner}: unknown metric(s) {unknown}; quantized layers support {list(METRIC_NAMES)}. Model-level "
            f"metrics such as 'accuracy' go to model.compile(metrics=...)."
        )
    return tuple(dict.fromkeys(metrics))


def in_training() -> bool:
    """True inside a Keras layer call made with ``training=True`` (``fit``, or an explicit ``training=True``).

    Reads (never creates) Keras 3's current call context, where ``Layer.__call__`` keeps the resolved ``training``
    flag for every nested layer, including those whose ``call`` takes no ``training`` argument.
    """
    try:
        from keras.src.backend.common import global_state
    except ImportError:  # pragma: no cover - a Keras that moved its call context
        return False
    context = global_state.get_global_attribute("current_call_ctx")
    return getattr(context, "training", None) is True
