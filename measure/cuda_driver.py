"""libcuda's driver API through ctypes, for the few entry points pycuda does not expose.

A `CudaDriver` subclass lists the entry points it needs with their argument types; the base binds
them (every one returns a CUresult) and turns a failing call into the subclass's `error`, named
by the driver (`cuGetErrorName`). Used for stream capture into CUDA graphs (`measure.cuda_graph`)
and for launching kernels on a caller's raw stream (`autosched.codegen.stream_launch`).
"""

from __future__ import annotations

import ctypes
from typing import Any, ClassVar

LIBRARY = "libcuda.so.1"
SUCCESS = 0


class DriverError(RuntimeError):
    """A driver call failed."""


class CudaDriver:
    """Entry points of libcuda bound with their argument types (`SIGNATURES`, plus
    cuGetErrorName); `call` raises `error` unless the call succeeds."""

    SIGNATURES: ClassVar[dict[str, tuple]] = {}
    error: ClassVar[type[Exception]] = DriverError

    def __init__(self, lib: ctypes.CDLL) -> None:
        """Bind every entry point of `lib`; AttributeError when one is missing (an older
        driver)."""
        self._functions: dict[str, Any] = {}
        error_name = (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
        signatures = {**self.SIGNATURES, "cuGetErrorName": error_name}
        for name, argtypes in signatures.items():
            func = getattr(lib, name)
            func.argtypes = list(argtypes)
            func.restype = ctypes.c_int
            self._functions[name] = func

    @classmethod
    def load(cls):
        """The driver bound from libcuda; OSError when libcuda does not load, AttributeError
        when it lacks an entry point."""
        return cls(ctypes.CDLL(LIBRARY))

    def call(self, name: str, *args) -> None:
        """Call entry point `name`; `error` naming the driver's error unless it succeeds."""
        code = self._functions[name](*args)
        if code != SUCCESS:
            raise self.error(f"{name} failed: {self.error_name(code)}")

    def error_name(self, code: int) -> str:
        """The driver's name of a CUresult (`CUDA_ERROR_...`)."""
        text = ctypes.c_char_p()
        if self._functions["cuGetErrorName"](code, ctypes.byref(text)) == SUCCESS and text.value:
            return text.value.decode()
        return f"CUresult {code}"
