"""Running a BuiltKernel in this process on the GPU (pycuda), for users and benchmarks."""

from __future__ import annotations

import atexit
import functools
from typing import Any

import numpy as np

from measure import GPUUnavailableError, compile_source


@functools.lru_cache(maxsize=64)
def _module(source: str, arch: str):
    import pycuda.driver as drv

    kind, msg, cubin, _ = compile_source(source, arch=arch)
    if cubin is None:
        raise RuntimeError(f"nvcc failed ({kind.name}): {msg}")
    return drv.module_from_buffer(cubin)


def _context():
    """pycuda's driver module and the device's arch, with the device's primary context current
    (the one PyTorch uses too, so that torch tensors and our kernels share memory)."""
    try:
        import pycuda.driver as drv
    except ImportError as exc:
        raise GPUUnavailableError(
            "running a kernel needs pycuda: pip install 'autosched[cuda]'"
        ) from exc
    drv.init()
    if drv.Context.get_current() is None:
        ctx = drv.Device(0).retain_primary_context()
        ctx.push()
        atexit.register(_pop_context, ctx)
    from measure import device_arch

    return drv, device_arch() or "sm_90"


def _pop_context(ctx) -> None:
    try:
        ctx.pop()
    except Exception:
        pass


class GPULauncher:
    """Launches the kernels of a BuiltKernel on fixed device buffers, with no copies and no
    synchronisation: the call to put between CUDA events when timing back-to-back runs."""

    def __init__(self, kernel, arrays: tuple[Any, ...]) -> None:
        drv, arch = _context()
        mod = _module(kernel.source, arch)
        self.keep, self.pointers = [], []
        for spec, arr in zip(kernel.args, list(arrays) + [None] * (len(kernel.args) - len(arrays))):
            if arr is None:  # a global temporary of a multi-kernel program
                buf = drv.mem_alloc(
                    max(1, int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize)
                )
                self.keep.append(buf)
                self.pointers.append(np.uintp(int(buf)))
            elif hasattr(arr, "data_ptr"):
                self.keep.append(arr)
                self.pointers.append(np.uintp(arr.data_ptr()))
            else:
                raise TypeError(
                    f"GPULauncher takes torch CUDA tensors, got {type(arr).__name__} for {spec.name}"
                )
        self.calls = []
        for launch in kernel.launches:
            fn = mod.get_function(launch.kernel_name)
            fn.prepare("P" * len(self.pointers))
            self.calls.append(
                (
                    fn,
                    tuple(launch.grid) + (1,) * (3 - len(launch.grid)),
                    tuple(launch.block) + (1,) * (3 - len(launch.block)),
                )
            )

    def __call__(self) -> None:
        for fn, grid, block in self.calls:
            fn.prepared_call(grid, block, *self.pointers)


def launch_on_gpu(kernel, arrays: tuple[Any, ...]) -> None:
    """Launch every kernel of `kernel` (a BuiltKernel) on `arrays` (numpy or torch CUDA)."""
    drv, arch = _context()
    mod = _module(kernel.source, arch)
    ptrs, copies = [], []
    for spec, arr in zip(kernel.args, list(arrays) + [None] * (len(kernel.args) - len(arrays))):
        if arr is None:
            buf = drv.mem_alloc(max(1, int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize))
            ptrs.append(buf)
        elif hasattr(arr, "data_ptr"):  # torch tensor on the GPU
            ptrs.append(np.uintp(arr.data_ptr()))
        else:
            arr = np.ascontiguousarray(arr)
            buf = drv.mem_alloc(arr.nbytes)
            drv.memcpy_htod(buf, arr)
            ptrs.append(buf)
            if spec.is_output:
                copies.append((arrays[len(ptrs) - 1], buf))
    for launch in kernel.launches:
        fn = mod.get_function(launch.kernel_name)
        fn(*ptrs, grid=launch.grid, block=launch.block)
    drv.Context.synchronize()
    for host, buf in copies:
        out = np.empty_like(host)
        drv.memcpy_dtoh(out, buf)
        host[...] = out
