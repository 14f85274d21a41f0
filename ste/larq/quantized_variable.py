"""``lq.quantized_variable``: ``QuantizedVariable``, the kernels of built quantized layers.

A view of a Keras 3 variable that reads quantized inside ``lq.context.quantized_scope(True)``; docs/larq.md lists
what differs from larq.
"""

from ..layers import QuantizedVariable

__all__ = ["QuantizedVariable"]
