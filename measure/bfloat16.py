"""bfloat16 in numpy, which has no such dtype.

A bfloat16 tensor is stored as its 16-bit patterns in a `uint16` array: that is what a CUDA
kernel reading `__nv_bfloat16*` sees, so the same array serves the GPU, the CPU interpreter and
the reference evaluation. Values are computed as float32 arrays holding bfloat16-exact
numbers (`round_bfloat16`); `to_bits` / `from_bits` convert between the two.

Rounding is round-to-nearest-even on the upper 16 bits of the float32 pattern, as CUDA's
`__float2bfloat16` does; NaN stays a (quiet) NaN.
"""

from __future__ import annotations

import numpy as np

STORAGE = np.dtype("uint16")
NAME = "bfloat16"


def dtype_name(dtype) -> str:
    """The canonical name of a dtype that numpy or this module knows ("bfloat16" kept)."""
    return NAME if dtype == NAME else np.dtype(dtype).name


def storage_dtype(dtype) -> np.dtype:
    """The numpy dtype an array of `dtype` is stored in (uint16 for bfloat16)."""
    return STORAGE if dtype == NAME else np.dtype(dtype)


def to_bits(values) -> np.ndarray:
    """float values -> uint16 bfloat16 patterns, rounded to nearest even."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    bits = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        bits = np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), bits)
    return bits


def from_bits(bits) -> np.ndarray:
    """uint16 bfloat16 patterns -> float32 values (exact)."""
    b = np.asarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_bfloat16(values) -> np.ndarray:
    """float values rounded to the nearest bfloat16, as a float32 array."""
    return from_bits(to_bits(values))


__all__ = [
    "NAME",
    "STORAGE",
    "dtype_name",
    "from_bits",
    "round_bfloat16",
    "storage_dtype",
    "to_bits",
]
