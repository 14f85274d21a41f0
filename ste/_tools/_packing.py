"""Bit-packed storage of binary and ternary kernels: 1 bit per weight for ±s, 2 bits for {−s, 0, +s}, plus s.

A kernel is packed when every element is ±s or 0 with one scale s per index of its last axis (the output channel:
larq's ±1, magnitude-aware signs, ``ste_tern``, BitNet's per-tensor γ): only ±s gives 1 bit per weight, ±s and
zeros 2 bits. The scale is stored once when all channels share it, else once per channel, in the array's dtype.
A packed kernel is a dict::

    {"bits": 1 or 2, "shape": (...), "scale": array of shape () or (channels,), "codes": uint8 array}

The codes are the flattened kernel (C order), little-endian within each byte: 8 per byte for 1 bit (1: +s, 0: −s),
4 per byte for 2 bits (0: +0, 1: +s, 2: −s, 3: −0, so even the sign of a zero is restored). Packing is exact or not
done: the kernel is rebuilt from its codes and compared byte for byte, and anything else (8-bit, float, NaN) is
kept as the array it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ParameterError

__all__ = ["pack_kernel", "unpack_kernel"]

_KEYS = {"bits", "shape", "scale", "codes"}


def _scale(a: np.ndarray) -> np.ndarray:
    """max|a| per index of the last axis; one scalar when every channel has the same."""
    scale: np.ndarray = np.abs(a).max(axis=tuple(range(a.ndim - 1)))
    return np.asarray(scale[0]) if np.all(scale == scale[0]) else scale


def _values(codes: np.ndarray, bits: int, scale: np.ndarray) -> np.ndarray:
    zero = np.zeros_like(scale)
    if bits == 1:
        return np.where(codes == 1, scale, -scale)
    return np.where(codes == 1, scale, np.where(codes == 2, -scale, np.where(codes == 3, -zero, zero)))


def _pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    flat = codes.reshape(-1).astype(np.uint8)
    if bits == 1:
        return np.packbits(flat, bitorder="little")
    quads = np.concatenate([flat, np.zeros((-len(flat)) % 4, np.uint8)]).reshape(-1, 4)
    packed: np.ndarray = (quads[:, 0] | quads[:, 1] << 2 | quads[:, 2] << 4 | quads[:, 3] << 6).astype(np.uint8)
    return packed


def _unpack_codes(packed: np.ndarray, bits: int, size: int) -> np.ndarray:
    if bits == 1:
        return np.unpackbits(packed, count=size, bitorder="little")
    shifts = np.array([0, 2, 4, 6], np.uint8)
    return ((packed[:, None] >> shifts) & 3).reshape(-1)[:size]


def pack_kernel(a: np.ndarray) -> Any:
    """``a`` packed as a dict (see the module docstring), or ``a`` itself when it is not binary or ternary."""
    numeric = a.dtype.kind in "fiu" or a.dtype.name == "bfloat16"
    if a.ndim == 0 or a.size == 0 or not numeric or not np.all(np.isfinite(a.astype(np.float64))):
        return a
    scale = _scale(a)
    positive, negative = a == scale, a == -scale
    binary = bool(np.all(positive | negative) and np.all(scale != 0))
    if binary:
        bits, codes = 1, positive.astype(np.uint8)
    elif np.all(positive | negative | (a == 0)):
        zeros = a == 0
        signed = np.signbit(a.astype(np.float64))
        bits = 2
        codes = np.where(zeros, np.where(signed, 3, 0), np.where(positive, 1, 2)).astype(np.uint8)
    else:
        return a
    if _values(codes, bits, scale).astype(a.dtype).tobytes() != a.tobytes():
        return a  # not exactly representable (cannot happen for ±s and ±0; kept as a guard)
    return {
        "bits": bits,
        "shape": tuple(a.shape),
        "scale": np.asarray(scale, a.dtype),
        "codes": _pack_codes(codes, bits),
    }


def unpack_kernel(entry: Any, where: str) -> np.ndarray:
    """The array of one exported kernel: a packed dict rebuilt, an array returned as it is."""
    if isinstance(entry, np.ndarray):
        return entry
    if not isinstance(entry, dict) or set(entry) != _KEYS or entry["bits"] not in (1, 2):
        raise ParameterError(
            f"ste.unpack_quantized_weights: {where} is neither an array nor a packed kernel; received "
            f"{type(entry).__name__} {str(entry)[:60]}. Expected a numpy array or a dict with keys {sorted(_KEYS)} "
            f"and bits 1 or 2, as ste.export_quantized_weights(model, packed=True) gives."
        )
    shape = tuple(int(n) for n in entry["shape"])
    bits, size = int(entry["bits"]), int(np.prod(shape))
    packed = np.asarray(entry["codes"], np.uint8).reshape(-1)
    scale = np.asarray(entry["scale"])
    if packed.size != -(-size * bits // 8) or scale.ndim > 1 or scale.size not in (1, shape[-1]):
        raise ParameterError(
            f"ste.unpack_quantized_weights: {where} holds {packed.size} code bytes and {scale.size} scale(s); a "
            f"{bits}-bit kernel of shape {shape} needs {-(-size * bits // 8)} bytes and 1 or {shape[-1]} scales. "
            f"Fix: pass the dict ste.export_quantized_weights(model, packed=True) gave, unchanged."
        )
    codes = _unpack_codes(packed, bits, size)
    return np.asarray(_values(codes.reshape(shape), bits, scale), scale.dtype)
