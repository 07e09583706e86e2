"""Whether this machine can tune: a CUDA compiler and a GPU."""

from __future__ import annotations

from autosched.errors import AutoschedError


def check_gpu_tools() -> None:
    """Raise AutoschedError (one line) unless a CUDA compiler (NVRTC or nvcc, as the builder
    uses) and a GPU with pycuda are there."""
    from measure import NvccNotFoundError, find_compiler, gpu_available

    try:
        find_compiler()
    except NvccNotFoundError as exc:
        raise AutoschedError(f"tuning needs a CUDA compiler: {exc}") from None
    ok, reason = gpu_available()
    if not ok:
        raise AutoschedError(
            f"tuning needs a CUDA GPU with pycuda ('pip install autosched[cuda]'): {reason}"
        )
