"""``ste.layers.BatchNormalization``: Keras's batch norm, computed in training by TensorFlow's fused kernel.

Keras 3's ``BatchNormalization`` on TensorFlow computes the batch moments and the normalization from separate ops
(``tf.nn.moments``, then ``x * inv + (beta - mean * inv)``), and autodiff differentiates them op by op: several
input-sized temporaries in the forward and backward pass. tf-keras (and so larq) uses TensorFlow's fused kernel
(``FusedBatchNormV3`` and its gradient ``FusedBatchNormGradV3``), which makes one pass over the input for the moments,
one for the output and keeps only its input for the backward pass. On the binarized ResNet of
``benchmarks/binary_net.py`` the fused kernel is what most of the float step-time gap between Keras 3 and tf-keras
and a part of the peak-memory gap come from (see docs/performance.md).

This subclass has the same weights, configuration, moving-average update (Keras's momentum and its biased batch
variance), inference behaviour (the parent's own code) and saving; only a training call whose configuration the
fused kernel supports takes the fused path: a 4-D input with the channel axis last or 1, no mask, no renorm, not
synchronized, an input dtype float16, bfloat16 or float32, not compiled by XLA. Anything else (float64, other ranks,
masks, renorm, ``synchronized=True``, a frozen layer, inference, another Keras backend) is Keras's code. Under XLA
(``jit_compile=True``) Keras's ops are compiled and fused by XLA, and were faster than the fused kernel's XLA
lowering: the float network's step took 1.03-1.05x as long with the fused kernel in four runs.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool_arguments
from .._core._xla import compiling_with_xla
from .._keras._configs import rebuild
from .._keras._signatures import ClassSignature
from .._keras._versions import renormalizes
from .._patches import apply as apply_patches
from ..errors import InputError

__all__ = ["BatchNormalization", "hint_fused_batch_norm"]

_FUSED_DTYPES = (tf.float16, tf.bfloat16, tf.float32)


def _fused_layout(layer: Any, rank: int | None, dtype: Any) -> str | None:
    """``"NHWC"`` or ``"NCHW"`` when a training call of batch norm ``layer`` on an input of ``rank`` and ``dtype``
    can run on the fused kernel (no mask, no renorm, not synchronized, not under XLA), else ``None``."""
    if not layer.trainable or renormalizes(layer) or layer.synchronized or keras.backend.backend() != "tensorflow":
        return None
    if compiling_with_xla():  # XLA fuses Keras's own ops; it lowers the fused kernel less well
        return None
    if rank != 4 or dtype is None or tf.as_dtype(dtype) not in _FUSED_DTYPES:
        return None
    axis = layer.axis % rank
    return "NHWC" if axis == 3 else "NCHW" if axis == 1 else None


_HINTED_GRAPHS: weakref.WeakSet[Any] = weakref.WeakSet()  # the traced graphs a hint was given in (once each)


def hint_fused_batch_norm(layer: Any, stacklevel: int) -> None:  # stacklevel: the caller's frame -> the user's
    """A one-line hint (a :class:`UserWarning`) where Keras's own ``BatchNormalization`` takes ``layer``'s output in
    a training call and ``ste.layers.BatchNormalization`` would run it on the fused kernel.

    Once per model: at most one hint per traced graph (a model's training step traces every layer into one), and
    each batch norm is considered once, whatever Python's warning filter (under ``"always"`` too). Eagerly the
    graph is the process's default one, so eager training hints once. Reads the functional graph Keras built (the
    consumers of ``layer``'s output); a subclassed model has none, and gets no hint."""
    graph = tf.compat.v1.get_default_graph()
    if graph in _HINTED_GRAPHS:
        return
    for node in getattr(layer, "_outbound_nodes", ()):
        norm: Any = getattr(node, "operation", None)
        if type(norm) is not keras.layers.BatchNormalization or getattr(norm, "_ste_fused_hint_given", False):
            continue
        inputs = getattr(node, "input_tensors", None) or [None]
        shape, dtype = getattr(inputs[0], "shape", None), getattr(inputs[0], "dtype", None)
        if _fused_layout(norm, None if shape is None else len(shape), dtype) is None:
            continue
        norm._ste_fused_hint_given = True
        _HINTED_GRAPHS.add(graph)
        warnings.warn(
            "keras.layers.BatchNormalization after a quantized layer trains with separate ops on TensorFlow (slower, "
            "more memory): use ste.layers.BatchNormalization, the same layer on TensorFlow's fused kernel (same "
            "arguments and weights; docs/larq.md).",
            UserWarning,
            stacklevel=stacklevel + 1,
        )
        return


@keras.saving.register_keras_serializable(package="ste")
class BatchNormalization(keras.layers.BatchNormalization):  # type: ignore[misc]
    """``keras.layers.BatchNormalization`` whose training step uses TensorFlow's fused batch-norm kernel where its
    configuration allows (see the module docstring); a drop-in replacement with the same arguments, weights and
    saved form."""

    if not TYPE_CHECKING:  # static tools see Keras's __init__ and its parameters

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            apply_patches()  # once per process: the Keras and TensorFlow patches ste needs (ste/_patches.py)
            check_bool_arguments("BatchNormalization", keras.layers.BatchNormalization, args, kwargs)
            super().__init__(*args, **kwargs)

    __signature__ = ClassSignature(inspect.signature(keras.layers.BatchNormalization))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        """The layer of a saved config; a damaged config raises an ste error (not Keras's bare TypeError)."""
        return rebuild(cls, config, super().from_config)

    def _fused_format(self, inputs: Any, training: Any, mask: Any) -> str | None:
        """``"NHWC"`` or ``"NCHW"`` when this call can use the fused kernel, else ``None``."""
        if not training or mask is not None or not isinstance(inputs, (tf.Tensor, tf.Variable)):
            return None
        return _fused_layout(self, inputs.shape.rank, inputs.dtype)

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        dtype = tf.as_dtype(inputs.dtype)
        if not (dtype.is_floating or dtype.is_integer or dtype.is_bool):  # a string or complex input
            raise InputError(
                f"BatchNormalization '{self.name}': its input has dtype {dtype.name}; expected a real number dtype "
                f"(float16, bfloat16, float32, float64; integers are cast, as Keras does). Fix: convert it first."
            )
        data_format = self._fused_format(inputs, training, mask)
        if data_format is None:
            return super().call(inputs, training=training, mask=mask)
        channels = inputs.shape[self.axis % 4]
        if channels is None:
            channels = tf.shape(inputs)[self.axis % 4]
        scale = tf.cast(self.gamma.value, tf.float32) if self.scale else tf.ones([channels], tf.float32)
        offset = tf.cast(self.beta.value, tf.float32) if self.center else tf.zeros([channels], tf.float32)
        empty = tf.constant([], tf.float32)
        outputs, mean, unbiased, *_ = tf.raw_ops.FusedBatchNormV3(
            x=inputs,
            scale=scale,
            offset=offset,
            mean=empty,
            variance=empty,
            epsilon=self.epsilon,
            data_format=data_format,
            is_training=True,
        )
        # The kernel returns the unbiased batch variance (n/(n-1)·var; var itself when n == 1); Keras updates the
        # moving variance with the biased one it normalizes with.
        count = tf.cast(tf.size(inputs, out_type=tf.int64) // tf.cast(channels, tf.int64), tf.float32)
        variance = unbiased * (tf.maximum(count - 1.0, 1.0) / tf.maximum(count, 1.0))
        momentum = self.momentum
        self.moving_mean.assign(tf.cast(self.moving_mean.value, tf.float32) * momentum + mean * (1.0 - momentum))
        self.moving_variance.assign(
            tf.cast(self.moving_variance.value, tf.float32) * momentum + variance * (1.0 - momentum)
        )
        return tf.cast(outputs, self.compute_dtype)
