"""The dtypes tensor expressions support, and their properties.

float16 and bfloat16 are storage and arithmetic types. numpy stores float16 natively and
bfloat16 as uint16 bit patterns (`measure.bfloat16`: the array a kernel reading
`__nv_bfloat16*` sees); `numpy_dtype` gives the storage dtype and `to_storage` / `from_storage`
convert values. Half-precision arithmetic (the rule the CUDA printer and the interpreter share):
every `+ - * /` and math function computes in float32 and rounds its result to the operand dtype,
one rounding per operation and never fused (CUDA's `__hadd_rn`/`__hsub_rn`/`__hmul_rn`; the
division and math functions through float). For `+ - * /` this equals the correctly rounded half
result, since float32 has more than twice the precision of either half type.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from autosched.errors import DTypeError
from measure import bfloat16

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
HALF_DTYPES = frozenset({"float16", "bfloat16"})
INT_DTYPES = frozenset({"int32", "int64"})
_DTYPE_SET = frozenset(DTYPES)
BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1}
CUDA_TYPE = {
    "float16": "half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
    "int32": "int",
    "int64": "long long",
    "bool": "bool",
}


def check_dtype(dtype: str) -> str:
    """Return `dtype` as a canonical string, or raise DTypeError naming it."""
    # the common case first: every expression node's constructor checks its dtype
    if type(dtype) is str and dtype in _DTYPE_SET:
        return dtype
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = np.dtype(dtype).name
    if dtype not in DTYPES:
        raise DTypeError(f"unknown dtype {dtype!r}; supported dtypes are {', '.join(DTYPES)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_half(dtype: str) -> bool:
    """float16 or bfloat16: computed through float32, rounded after every operation."""
    return dtype in HALF_DTYPES


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype that stores `dtype` (uint16 bit patterns for bfloat16)."""
    return bfloat16.STORAGE if dtype == "bfloat16" else np.dtype(dtype)


def compute_dtype(dtype: str) -> np.dtype:
    """The numpy dtype values of `dtype` are computed in (float32 holding bfloat16 values)."""
    return np.dtype("float32") if dtype == "bfloat16" else np.dtype(dtype)


def round_to(values: ArrayLike, dtype: str) -> np.ndarray:
    """`values` rounded to `dtype`, in its compute dtype (see `compute_dtype`)."""
    if dtype == "bfloat16":
        return bfloat16.round_bfloat16(values)
    return np.asarray(values).astype(compute_dtype(dtype), copy=False)


# TF32 (Tensor Core operands of float32 matrix products): float32's sign and 8-bit exponent
# with a 10-bit mantissa, held in float32 with the low 13 bits zero.
TF32_DROPPED_BITS = 13


def round_tf32(values: ArrayLike) -> np.ndarray:
    """float32 `values` rounded to TF32 as CUDA's `__float_to_tf32` (PTX cvt.rna.tf32.f32)
    does: to nearest, ties away from zero (half of the dropped range added to the magnitude's
    bits, which carries into the exponent when it must), the low 13 bits cleared; NaN stays
    NaN, infinities stay, values that round past the largest TF32 become infinite."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    half = np.uint32(1 << (TF32_DROPPED_BITS - 1))
    keep = np.uint32((0xFFFFFFFF >> TF32_DROPPED_BITS) << TF32_DROPPED_BITS)
    rounded = ((bits + half) & keep).view(np.float32)
    return np.where(np.isnan(x), x, rounded)


def to_storage(values: ArrayLike, dtype: str) -> np.ndarray:
    """`values` rounded to `dtype`, in its storage dtype (see `numpy_dtype`)."""
    if dtype == "bfloat16":
        return bfloat16.to_bits(values)
    return np.asarray(values).astype(numpy_dtype(dtype), copy=False)


def from_storage(values: ArrayLike, dtype: str) -> np.ndarray:
    """Stored `values` of `dtype` as computed values (bfloat16 patterns become float32)."""
    if dtype == "bfloat16" and np.asarray(values).dtype == bfloat16.STORAGE:
        return bfloat16.from_bits(values)
    return np.asarray(values)
