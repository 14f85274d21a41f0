"""Quantizers with a learned parameter: :class:`LSQ` (step size) and :class:`PACT` (clipping level).

Each passes its ``keras.Variable`` to the ``ste`` op positionally, op(x, variable): the op reads it (so the
gradient reaches it through the read) and its explicit two-input rule returns one gradient for ``x`` and one for the
variable. Both round with ``tf.round`` (half to even).
"""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from .._common._arguments import check_bool, check_number
from .._core._dsl import forward
from .._core._xla import compiling_with_xla
from ..errors import NotBuiltError
from ._base import Quantizer, as_tensor, check_bits, register
from ._dtypes import Levels, check_levels, wide

__all__ = ["LSQ", "PACT"]


def _sum_to(value: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """Sum ``value`` (accumulated in at least float32) to a scalar of ``like``'s shape and dtype."""
    total = tf.reduce_sum(tf.cast(value, wide(value.dtype)))
    return tf.cast(tf.reshape(total, tf.shape(like)), like.dtype)


# -- LSQ -------------------------------------------------------------------------------------------------------


def lsq(x: tf.Tensor, step: tf.Tensor, *, q_n: int, q_p: int, replicas: int = 1) -> tf.Tensor:
    """round(clip(x/s, −Q_N, Q_P))·s (round half to even; half precision computes in float32); ``replicas`` only
    concerns the gradient."""
    w = tf.cast(x, wide(x.dtype))
    s = tf.cast(step, w.dtype)
    low, high = tf.constant(-q_n, w.dtype), tf.constant(q_p, w.dtype)
    return tf.cast(tf.round(tf.clip_by_value(w / s, low, high)) * s, x.dtype)


def lsq_vjp(
    dy: tf.Tensor, x: tf.Tensor, step: tf.Tensor, *, q_n: int, q_p: int, replicas: int = 1
) -> tuple[tf.Tensor, tf.Tensor]:
    """d/dx = 1[−Q_N < x/s < Q_P]; d/ds = Σ dy·(round(x/s) − x/s inside, −Q_N below, Q_P above)/√(N·Q_P).

    N = size(x)·``replicas``: x is one of ``replicas`` equal shards of the global batch whose step gradients the
    distribution strategy sums, so the scale is the one a single device computes for the whole batch.
    """
    inside, ds_each = _lsq_derivatives(x, step, q_n, q_p, replicas)
    dx = dy * inside
    ds = _sum_to(tf.cast(dy, ds_each.dtype) * ds_each, step)
    return dx, ds


def _lsq_derivatives(x: tf.Tensor, step: tf.Tensor, q_n: int, q_p: int, replicas: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(∂y/∂x = 1[−Q_N < x/s < Q_P] in x's dtype, each element's ∂y/∂s including the gradient scale, in at least
    float32)."""
    compute = wide(x.dtype)  # as the forward: v = x/s in float32 for half precision
    s = tf.cast(step, compute)
    v = tf.cast(x, compute) / s
    below = v <= -q_n
    above = v >= q_p
    inside = tf.logical_not(below | above)
    ds_each = tf.where(inside, tf.round(v) - v, tf.where(below, tf.constant(-q_n, compute), tf.constant(q_p, compute)))
    scale = tf.math.rsqrt(tf.cast(tf.size(x), compute) * replicas * q_p)
    return tf.cast(inside, x.dtype), ds_each * scale


def lsq_jvp(
    tangents: tuple[tf.Tensor, tf.Tensor], x: tf.Tensor, step: tf.Tensor, *, q_n: int, q_p: int, replicas: int = 1
) -> tf.Tensor:
    """The JVP of :func:`lsq_vjp`'s derivative: 1[inside]·t_x + (round(x/s) − x/s inside, −Q_N, Q_P)·g·t_s."""
    tx, ts = tangents
    inside, ds_each = _lsq_derivatives(x, step, q_n, q_p, replicas)
    return tf.cast(tx, x.dtype) * inside + tf.cast(ds_each * tf.cast(ts, ds_each.dtype), x.dtype)


lsq_op = forward(lsq).backward(lsq_vjp, jvp=lsq_jvp)


def _replicas_in_sync() -> int:
    """Replicas that each run this call on their own shard (1 outside a strategy's replica context)."""
    context = tf.distribute.get_replica_context()
    return 1 if context is None else int(context.num_replicas_in_sync)


def _on_tpu() -> bool:
    return isinstance(tf.distribute.get_strategy(), tf.distribute.TPUStrategy)


@keras.saving.register_keras_serializable(package="ste")
@register("lsq")
class LSQ(Quantizer):
    """Learned step size quantization (Esser et al. 2019, LSQ) with a trainable scalar step size s.

    Signed: Q_N = 2^(bits−1), Q_P = 2^(bits−1) − 1 (needs bits >= 2); unsigned: Q_N = 0, Q_P = 2^bits − 1.
    Forward round(clip(x/s, −Q_N, Q_P))·s (``tf.round``, half to even). Backward: ∂/∂x = 1 where
    −Q_N < x/s < Q_P, else 0; ∂/∂s = round(x/s) − x/s inside, −Q_N where x/s <= −Q_N, Q_P where x/s >= Q_P,
    summed over x after multiplying by the gradient scale g = 1/√(N·Q_P) (N = number of elements of x).
    s is initialised to 2·mean(abs(x))/√Q_P (at least 1e-8, so that an all-zero input does not give s = 0) by the
    first eager call or the first call traced with ``training=True`` (as ``fit`` does); graphs traced without
    ``training=True`` (``predict``, ``model.export``) only read s. s is not constrained afterwards. Spec name ``"lsq"``.

    Distribution strategies (``MirroredStrategy``, ``MultiWorkerMirroredStrategy``; in a replica context with
    ``num_replicas_in_sync`` = R > 1, as in ``fit`` or ``strategy.run``): LSQ gives what one device gives for the
    global batch. With ``sharded=True`` (the default: x is an activation, each replica sees its shard of the global
    batch) the initial s is 2·mean(abs(x))/√Q_P over the whole global batch (the sum, in float64, and the count are
    all-reduced across replicas; in every training step, since a graph cannot skip the exchange once s is
    initialised) and N in the gradient scale is the replica's element count × R. That is the global count when the
    global batch splits evenly; a shard of an unevenly split (last, partial) batch gets a scale off by
    √(global count / (R × its count)), as Keras's own per-replica loss averaging is off there.
    ``sharded=False`` declares that every replica quantizes the same tensor (a replicated weight): nothing is
    exchanged and N = size(x). The quantized layers of ``ste.layers`` set it for their kernel quantizers; set it
    yourself when you apply LSQ to a weight in your own layer (with ``sharded=True`` the step gradient of a
    replicated tensor under R replicas is √R too small).
    """

    has_weights = True  # the trainable step size s

    def __init__(self, bits: int = 4, signed: bool = True, sharded: bool = True, **kwargs: Any) -> None:
        signed = check_bool("LSQ", "signed", signed)
        sharded = check_bool(
            "LSQ", "sharded", sharded
        )  # True: x is a per-replica shard (an activation); False: a weight
        self.bits = check_bits("LSQ", bits, low=2 if signed else 1)
        self.signed = signed
        self.sharded = sharded
        self.q_n = 2 ** (self.bits - 1) if signed else 0
        self.q_p = 2 ** (self.bits - 1) - 1 if signed else 2**self.bits - 1
        self.precision = self.bits
        super().__init__(**kwargs)
        self.op = lsq_op

    def build(self, input_shape: Any) -> None:
        self.step = self.add_weight(
            name="step", shape=(), initializer="ones", trainable=True, aggregation="only_first_replica"
        )
        self.initialized = self.add_weight(
            name="initialized", shape=(), initializer="zeros", trainable=False, aggregation="only_first_replica"
        )
        self.built = True

    def initial_step(self, x: tf.Tensor) -> tf.Tensor:
        """2·mean(abs(x))/√Q_P (at least 1e-8), as float32; the mean is over the global batch when sharded.

        Summed in float64, so that the float32 result does not depend on how the batch is split among replicas.
        """
        total = tf.reduce_sum(tf.abs(tf.cast(x, tf.float64)))
        count = tf.cast(tf.size(x), tf.float64)
        if self.sharded and _replicas_in_sync() > 1:
            context = tf.distribute.get_replica_context()
            total, count = context.all_reduce(tf.distribute.ReduceOp.SUM, [total, count])
        return tf.cast(tf.maximum(2.0 * (total / count) / math.sqrt(self.q_p), 1e-8), tf.float32)

    def _initialize(self, x: tf.Tensor, training: Any) -> None:
        if tf.executing_eagerly():
            if float(self.initialized.numpy()) == 0.0:
                self.step.assign(self.initial_step(x))
                self.initialized.assign(1.0)
            return
        if not training:  # inference graphs (model.export, predict) stay free of variable writes
            return
        if compiling_with_xla() and _replicas_in_sync() > 1 and not _on_tpu():
            # XLA around a multi-device strategy.run on CPU or GPU (fit with jit_compile=True under a strategy):
            # once initialised (checked now, while tracing) the step needs neither the all-reduce nor the write, so
            # the compiled step has none; the first step's initialisation cannot be compiled there (TPUStrategy
            # compiles it: the code below).
            with tf.init_scope():
                done = float(keras.ops.convert_to_numpy(self.initialized)) > 0
            if done:
                return
            raise NotBuiltError(
                f"LSQ {self.name!r}: its step is initialised from the first training batch, which XLA cannot compile "
                f"inside a multi-replica strategy here (an all-reduce and a variable write across devices); "
                f"received an uninitialised step in an XLA-compiled replica step. Fix: run one step without XLA "
                f"first (model.fit(..., epochs=1) with jit_compile=False, or model(x, training=True) under "
                f"strategy.run), or load a trained step, then compile."
            )
        # In a graph: assign unconditionally (the step keeps its value once initialised). An assign (or the
        # all-reduce of initial_step) inside tf.cond would break under MirroredStrategy, whose replica-context
        # assign and all-reduce are merge_calls.
        step = tf.convert_to_tensor(self.step)
        done = tf.convert_to_tensor(self.initialized) > 0
        self.step.assign(tf.where(done, step, tf.cast(self.initial_step(x), step.dtype)))
        self.initialized.assign(1.0)

    def call(self, inputs: Any, training: Any = None) -> tf.Tensor:
        x = as_tensor(inputs, self)
        check_levels(self, x.dtype, bits=self.bits, levels_for_bits=self._levels)
        self._initialize(x, training)
        replicas = _replicas_in_sync() if self.sharded else 1
        if replicas == 1:  # the op exactly as on one device (same hyperparameters, same compiled function)
            return self.op(x, self.step, q_n=self.q_n, q_p=self.q_p)
        return self.op(x, self.step, q_n=self.q_n, q_p=self.q_p, replicas=replicas)

    def _levels(self, bits: int) -> Levels:
        """The integer grid −Q_N … Q_P (its multiples by s merge in a dtype exactly when these do)."""
        q_n = 2 ** (bits - 1) if self.signed else 0
        q_p = 2 ** (bits - 1) - 1 if self.signed else 2**bits - 1
        return Levels(-q_n, q_p, q_n + q_p + 1, {"Q_N": q_n, "Q_P": q_p})

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "bits": self.bits, "signed": self.signed, "sharded": self.sharded}


# -- PACT ------------------------------------------------------------------------------------------------------


def pact(x: tf.Tensor, alpha: tf.Tensor, *, bits: int) -> tf.Tensor:
    """round(clip(x, 0, α)·n/α)·α/n with n = 2^bits − 1 (round half to even; half precision computes in float32)."""
    w = tf.cast(x, wide(x.dtype))
    a = tf.cast(alpha, w.dtype)
    n = tf.constant(2**bits - 1, w.dtype)
    y = tf.clip_by_value(w, tf.zeros([], w.dtype), a)
    return tf.cast(tf.round(y * n / a) * a / n, x.dtype)


def pact_vjp(dy: tf.Tensor, x: tf.Tensor, alpha: tf.Tensor, *, bits: int) -> tuple[tf.Tensor, tf.Tensor]:
    """d/dx = 1[0 <= x <= α]; d/dα = Σ dy·1[x >= α]."""
    w = tf.cast(x, wide(x.dtype))  # compared as in the forward (float32 for half precision)
    a = tf.cast(alpha, w.dtype)
    dx = dy * tf.cast((w >= 0) & (w <= a), x.dtype)
    dalpha = _sum_to(dy * tf.cast(w >= a, dy.dtype), alpha)
    return dx, dalpha


def pact_jvp(tangents: tuple[tf.Tensor, tf.Tensor], x: tf.Tensor, alpha: tf.Tensor, *, bits: int) -> tf.Tensor:
    """The JVP of :func:`pact_vjp`'s derivative: 1[0 <= x <= α]·t_x + 1[x >= α]·t_α."""
    tx, ta = tangents
    w = tf.cast(x, wide(x.dtype))
    a = tf.cast(alpha, w.dtype)
    inside = tf.cast((w >= 0) & (w <= a), x.dtype)
    return tf.cast(tx, x.dtype) * inside + tf.cast(w >= a, x.dtype) * tf.cast(ta, x.dtype)


pact_op = forward(pact).backward(pact_vjp, jvp=pact_jvp)


@keras.saving.register_keras_serializable(package="ste")
@register("pact")
class PACT(Quantizer):
    """Parameterized clipping activation (Choi et al. 2018, PACT) with a trainable clipping level α.

    Forward: the ``bits``-bit uniform quantization of clip(x, 0, α), round(clip(x, 0, α)·n/α)·α/n with
    n = 2^bits − 1 (``tf.round``, half to even). Backward (an explicit rule, not autodiff through ``round``):
    ∂/∂x = 1[0 <= x <= α]; ∂/∂α = 1[x >= α], summed over x. α starts at ``alpha`` and is not constrained
    (keep it positive, e.g. with weight decay as in the paper). Spec name ``"pact"``.
    """

    has_weights = True  # the trainable clipping level α

    def __init__(self, bits: int = 4, alpha: float = 6.0, **kwargs: Any) -> None:
        self.bits = check_bits("PACT", bits)
        self.alpha_init = check_number("PACT", "alpha", alpha, positive=True)
        self.precision = self.bits
        super().__init__(**kwargs)
        self.op = pact_op

    def build(self, input_shape: Any) -> None:
        self.alpha = self.add_weight(
            name="alpha", shape=(), initializer=keras.initializers.Constant(self.alpha_init), trainable=True
        )
        self.built = True

    def call(self, inputs: Any) -> tf.Tensor:
        x = as_tensor(inputs, self)
        check_levels(self, x.dtype, bits=self.bits, levels_for_bits=self._levels)
        return self.op(x, self.alpha, bits=self.bits)

    def _levels(self, bits: int) -> Levels:
        alpha = self.alpha_init
        try:  # the current α (trained or loaded) when it can be read now; else the initial one
            with tf.init_scope():
                alpha = float(tf.convert_to_tensor(self.alpha).numpy())
        except Exception:  # e.g. a variable a strategy keeps per replica: check the initial α
            pass
        return Levels(0.0, alpha, 2**bits, {"alpha": alpha, "2^bits - 1": 2**bits - 1})

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "bits": self.bits, "alpha": self.alpha_init}
