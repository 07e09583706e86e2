"""Error kinds of a measurement and the exceptions `measure` raises.

A candidate kernel that fails (does not compile, uses too many resources, crashes, hangs, computes
a wrong answer) is never an exception: it yields a result carrying a `MeasureErrorKind`, so that a
search simply drops it. Exceptions are kept for problems of the environment or of the caller
(no nvcc, no GPU, a malformed request).
"""

from __future__ import annotations

import enum


class MeasureErrorKind(enum.IntEnum):
    """Why a candidate has no valid timing. The integer values are stable (they go in records)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the artifact itself is malformed (unknown kernel name, bad dims)
    COMPILE_ERROR = 2  # nvcc or ptxas rejected the source
    COMPILE_TIMEOUT = 3  # nvcc ran past the builder's timeout
    RESOURCE_LIMIT = 4  # threads, shared memory, registers or spills over the hardware limits
    RUNTIME_ERROR = 5  # a CUDA error while loading or running (illegal address, ...)
    WRONG_ANSWER = 6  # the output differs from the reference (or holds NaN)
    RUN_TIMEOUT = 7  # the candidate ran past the runner's timeout
    UNKNOWN = 8  # anything else; the message says what


class MeasureError(Exception):
    """Base class of the exceptions raised by `measure` (environment or caller problems)."""


class NvccNotFoundError(MeasureError):
    """`nvcc` is not on PATH (nor in $CUDA_HOME/bin or /usr/local/cuda/bin)."""


class GPUUnavailableError(MeasureError):
    """pycuda is not installed or no CUDA device can be used: kernels cannot be run here."""


class CompileError(MeasureError):
    """Raised by `compile_resources` when the source does not compile."""


class DeviceMismatchError(MeasureError):
    """The GPUs given to one measurer are of different models: their timings would not compare."""
