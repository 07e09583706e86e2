"""The dtypes tensor expressions support, and their properties."""

from __future__ import annotations

import numpy as np

from autosched.errors import DTypeError

DTYPES = ("float16", "float32", "float64", "int32", "int64", "bool")
FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})
INT_DTYPES = frozenset({"int32", "int64"})
BYTES = {"float16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1}
CUDA_TYPE = {
    "float16": "half",
    "float32": "float",
    "float64": "double",
    "int32": "int",
    "int64": "long long",
    "bool": "bool",
}


def check_dtype(dtype: str) -> str:
    """Return `dtype` as a canonical string, or raise DTypeError naming it."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = np.dtype(dtype).name
    if dtype not in DTYPES:
        raise DTypeError(f"unknown dtype {dtype!r}; supported dtypes are {', '.join(DTYPES)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype("bool" if dtype == "bool" else dtype)
