"""Quantized reads of a latent kernel: larq's ``QuantizedVariable`` and ``quantized_scope`` on Keras 3.

A built quantized layer's kernel (``layer.kernel``, ``layer.depthwise_kernel``, ...) is the Keras variable Keras
created, with its class extended in place by :class:`QuantizedVariable`: every list that tracks it (``layer.weights``,
the optimizer's variables, the saved-model writer) keeps the same object. Outside :func:`quantized_scope` it is the
Keras variable, unchanged. Inside ``quantized_scope(True)`` its user-facing reads give the layer's quantized kernel,
computed by the layer itself (``layer.quantized_kernels``, one quantization path): ``numpy()`` (so
``model.get_weights()``), ``np.asarray``, ``tf.convert_to_tensor`` and every arithmetic or comparison operator (so the
``.keras`` and ``.weights.h5`` writers, which read ``np.array(variable)``). ``variable.value``, ``assign*`` and the
handle stay latent, because Keras's optimizers, checkpoints and SavedModel export read them: training and
checkpoints are never affected by the scope, as in larq.

The scope is thread-local, as larq's; the replica threads of ``MirroredStrategy.run`` read the scope of the thread
that called ``run`` (larq's replicas saw none).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ..errors import ParameterError

__all__ = ["QuantizedVariable", "quantized_scope", "should_quantize", "view_kernel"]

_STACKS: dict[int, list[bool]] = {}  # thread ident -> the quantized_scope values entered in that thread
_REPLICA_THREAD = "_MirroredReplicaThread"  # tf.distribute's MirroredStrategy replica threads
_SPAWNER = "_call_for_each_replica"  # the MirroredStrategy function whose ``threads`` local holds them


def _spawning_thread(thread: threading.Thread) -> int | None:
    """The ident of the thread whose ``MirroredStrategy.run`` started the replica ``thread`` (it waits meanwhile)."""
    for ident, frame in sys._current_frames().items():
        while frame is not None:
            if frame.f_code.co_name == _SPAWNER and thread in frame.f_locals.get("threads", ()):
                return ident
            frame = frame.f_back  # type: ignore[assignment]
    return None


def should_quantize() -> bool:
    """Whether reads of quantized kernels give quantized values here (the innermost :func:`quantized_scope`)."""
    thread = threading.current_thread()
    stack = _STACKS.get(thread.ident or 0)
    if not stack and type(thread).__name__ == _REPLICA_THREAD:
        stack = _STACKS.get(_spawning_thread(thread) or 0)
    return bool(stack[-1]) if stack else False


@contextlib.contextmanager
def quantized_scope(quantize: bool) -> Iterator[bool]:
    """Within the block, quantized kernels read as their quantized values (``True``) or as latent ones (``False``).

    >>> import numpy as np, ste
    >>> layer = ste.layers.QuantDense(2, kernel_quantizer="sign", kernel_constraint="weight_clip")
    >>> _ = layer(np.ones((1, 3), "float32"))
    >>> with quantized_scope(True):
    ...     binary = layer.get_weights()[0]
    >>> sorted(set(binary.ravel().tolist()))
    [-1.0, 1.0]
    """
    if not isinstance(quantize, bool):
        raise ParameterError(
            f"quantized_scope(quantize): expected True or False; received {type(quantize).__name__} {quantize!r}."
        )
    ident = threading.get_ident()
    stack = _STACKS.setdefault(ident, [])
    stack.append(quantize)
    try:
        yield quantize
    finally:
        stack.pop()
        if not stack:
            _STACKS.pop(ident, None)


class _Read:
    """What Keras's operator methods read from a variable (``value``, ``ndim``), holding the quantized value."""

    def __init__(self, value: tf.Tensor) -> None:
        self.value = value
        self.ndim = len(value.shape)


#: Keras's ``Variable`` methods that read ``self.value``: inside ``quantized_scope(True)`` they read the quantized one.
_READS = (
    "__getitem__ __int__ __float__ __neg__ __pos__ __abs__ __invert__ __eq__ __ne__ __lt__ __le__ __gt__ "
    "__ge__ __add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__ __rfloordiv__ "
    "__mod__ __rmod__ __pow__ __rpow__ __matmul__ __rmatmul__ __and__ __rand__ __or__ __ror__ __xor__ __rxor__ "
    "__round__"
).split()


def _quantized_read(name: str) -> Callable[..., Any]:
    keras_method = getattr(keras.Variable, name)

    def method(self: QuantizedVariable, *args: Any) -> Any:
        quantized = self._quantized_value()
        return keras_method(self if quantized is None else _Read(quantized), *args)

    method.__name__ = name
    return method


class QuantizedVariable:
    """A Keras variable whose user-facing reads are quantized inside ``quantized_scope(True)``; ``variable.value``,
    ``assign*`` and the handle stay latent (optimizers and checkpoints read them).

    ``quantizer``, ``precision`` and ``latent_variable`` are larq's attributes. Create one with
    :meth:`from_variable`; a built quantized layer's kernels already are.
    """

    _ste_quantize: Callable[[], tf.Tensor] | None
    _ste_quantizer: Callable[[], Any]
    _ste_precision: Callable[[], int | None]
    value: Any  # keras.Variable's

    @classmethod
    def from_variable(cls, variable: Any, quantizer: Any = None, precision: int | None = None) -> Any:
        """A view of the Keras ``variable`` (same storage: assigning either changes both) that reads as
        ``quantizer(variable)`` inside ``quantized_scope(True)``; ``precision`` defaults to ``quantizer.precision``."""
        if not isinstance(variable, keras.Variable):
            raise ParameterError(
                f"QuantizedVariable.from_variable: `variable` must be of type keras.Variable (Keras 3); received "
                f"{type(variable).__name__}. Fix: create it with keras.Variable(...) (tf.Variable is Keras 2's)."
            )
        if not (quantizer is None or callable(quantizer)):
            raise ParameterError(
                f"QuantizedVariable.from_variable: `quantizer` must be `callable` or `None`; received "
                f"{type(quantizer).__name__} {quantizer!r}."
            )
        if not (precision is None or type(precision) is int):
            raise ParameterError(
                f"QuantizedVariable.from_variable: `precision` must be of type `int` or `None`; received "
                f"{type(precision).__name__} {precision!r}."
            )
        view: Any = object.__new__(_view_class(type(variable)))
        view.__dict__.update(variable.__dict__)  # the same backend variable (storage), name and path
        view._ste_quantize = None if quantizer is None else (lambda: quantizer(view.value))
        view._ste_quantizer = lambda: quantizer
        view._ste_precision = lambda: precision if precision is not None else _precision(quantizer)
        return view

    def _quantized_value(self) -> tf.Tensor | None:
        """The quantized value when it is to be read here, else ``None`` (read the latent value)."""
        if self._ste_quantize is None or not should_quantize():
            return None
        return self._ste_quantize()  # None: the layer is gone or has no quantizer for it

    @property
    def quantizer(self) -> Any:
        """The quantizer applied inside ``quantized_scope(True)`` (larq's attribute)."""
        return self._ste_quantizer()

    @property
    def precision(self) -> int | None:
        """The bit width of the quantized values (``None`` when not fixed)."""
        return self._ste_precision()

    @property
    def latent_variable(self) -> tf.Variable:
        """The backend variable holding the latent values (larq's attribute); it never reads quantized."""
        return self.value

    def numpy(self) -> Any:
        quantized = self._quantized_value()
        return super().numpy() if quantized is None else quantized.numpy()  # type: ignore[misc]

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        quantized = self._quantized_value()
        if quantized is None:
            return super().__array__(dtype)  # type: ignore[misc]
        return np.asarray(quantized.numpy(), dtype=dtype)

    def __tf_tensor__(self, dtype: Any = None, name: str | None = None) -> tf.Tensor:
        quantized = self._quantized_value()
        if quantized is None:
            return super().__tf_tensor__(dtype, name)  # type: ignore[misc]
        return tf.convert_to_tensor(quantized, dtype=dtype, name=name)

    def assign(self, value: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        """Assign the latent value (as larq) and return this variable (``None`` with ``read_value=False``)."""
        super().assign(value)  # type: ignore[misc]
        return self if read_value else None

    def assign_add(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        """Add ``delta`` to the latent value (never to the quantized one), as larq."""
        delta = self._convert_to_tensor(delta, dtype=self._dtype)  # type: ignore[attr-defined]
        return self.assign(keras.ops.add(self.value, delta), read_value=read_value)

    def assign_sub(self, delta: Any, use_locking: Any = None, name: Any = None, read_value: bool = True) -> Any:
        """Subtract ``delta`` from the latent value, as larq."""
        delta = self._convert_to_tensor(delta, dtype=self._dtype)  # type: ignore[attr-defined]
        return self.assign(keras.ops.subtract(self.value, delta), read_value=read_value)

    def __repr__(self) -> str:
        quantizer = self.quantizer
        label = "None" if quantizer is None else getattr(quantizer, "__name__", type(quantizer).__name__)
        try:
            value = f", value={self.numpy()}"  # quantized inside quantized_scope(True), as larq shows it
        except Exception:  # in a graph, or not initialized
            value = ""
        return (
            f"<QuantizedVariable path={self.path}, shape={self.shape}, dtype={self.dtype}, "  # type: ignore[attr-defined]
            f"quantizer={label}, precision={self.precision}{value}>"
        )


for _name in _READS:
    setattr(QuantizedVariable, _name, _quantized_read(_name))

_CLASSES: dict[type, type] = {}


def _view_class(base: type) -> type:
    """``base`` (a Keras backend variable class) extended by :class:`QuantizedVariable` (one class per base)."""
    if issubclass(base, QuantizedVariable):
        return base
    if base not in _CLASSES:
        _CLASSES[base] = type("QuantizedVariable", (QuantizedVariable, base), {"__module__": __name__})
    return _CLASSES[base]


def _precision(quantizer: Any) -> int | None:
    precision = getattr(quantizer, "precision", None)
    return precision if isinstance(precision, int) else None


def view_kernel(
    variable: Any,
    quantized: Callable[[], tf.Tensor | None],
    quantizer: Callable[[], Any],
    precision: Callable[[], int | None],
) -> None:
    """Make ``variable`` (a built layer's kernel) a :class:`QuantizedVariable` in place: inside
    ``quantized_scope(True)`` it reads as ``quantized()`` (the layer's own quantized kernel; ``None``: latent)."""
    variable.__class__ = _view_class(type(variable))
    variable._ste_quantize = quantized
    variable._ste_quantizer = quantizer
    variable._ste_precision = precision
