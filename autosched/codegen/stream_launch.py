"""Launching a built kernel on a caller's CUDA stream through the driver API (ctypes).

The compiled PyTorch model runs its tuned kernels between PyTorch's own ops: on PyTorch's current
stream, in its context, on its tensors, with no synchronisation and no host copies, so a
forward pass can also be captured in a CUDA graph. pycuda launches only on its own streams, so
this small launcher loads the cubin (compiled by `measure.compile_kernel`, exactly as the
search compiled it) and calls `cuLaunchKernel` with a raw stream handle instead. A kernel taking
tensor maps (`Launch.tensor_maps`) gets them after the pointers, encoded for the pointers of the
call (`measure.tensor_map`; the last call's maps are reused while the pointers stay the same).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

from measure import compile_kernel
from measure.cluster_size import allow_clusters_driver
from measure.cuda_driver import CudaDriver, DriverError
from measure.tensor_map import (
    TENSOR_MAP_ALIGN,
    TENSOR_MAP_BYTES,
    encode_launch_maps,
    load_tensor_map_driver,
)

_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class LaunchError(DriverError):
    """A driver call failed, or the kernel did not compile."""


class LaunchDriver(CudaDriver):
    """libcuda's module loading and kernel launch."""

    error = LaunchError
    SIGNATURES = {
        "cuModuleLoadData": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p),
        "cuModuleGetFunction": (
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
            ctypes.c_char_p,
        ),
        "cuFuncSetAttribute": (ctypes.c_void_p, ctypes.c_int, ctypes.c_int),
        "cuLaunchKernel": (ctypes.c_void_p,)
        + (ctypes.c_uint,) * 7
        + (ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p),
    }


@functools.lru_cache(maxsize=1)
def _driver() -> LaunchDriver:
    return LaunchDriver.load()


def driver_available() -> bool:
    """Can libcuda be loaded here (a GPU machine's driver)?"""
    try:
        _driver()
    except (OSError, AttributeError):
        return False
    return True


class StreamKernel:
    """The kernels of a BuiltKernel loaded into the current CUDA context (PyTorch's: create it
    after PyTorch has initialised CUDA), launched in order on any stream of that context."""

    def __init__(self, kernel, arch: str) -> None:
        kind, message, cubin, _ = compile_kernel(kernel.source, arch)
        if cubin is None:
            raise LaunchError(f"the kernel did not compile ({kind.name}): {message}")
        driver = _driver()
        self._cubin = ctypes.create_string_buffer(cubin, len(cubin))  # kept alive with the module
        module = ctypes.c_void_p()
        driver.call("cuModuleLoadData", ctypes.byref(module), self._cubin)
        self._module = module
        self._launches = []
        for launch in kernel.launches:
            fn = ctypes.c_void_p()
            name = launch.kernel_name.encode()
            driver.call("cuModuleGetFunction", ctypes.byref(fn), module, name)
            if launch.dynamic_shared_bytes > 48 * 1024:
                size = launch.dynamic_shared_bytes
                driver.call("cuFuncSetAttribute", fn, _MAX_DYNAMIC_SHARED, size)
            allow_clusters_driver(functools.partial(driver.call, "cuFuncSetAttribute", fn), launch)
            self._launches.append((fn, launch))
        self.n_args = len(kernel.args)
        self._args = tuple(kernel.args)
        self._maps_for: tuple[tuple[int, ...], list[list]] | None = None  # pointers -> maps

    def _maps(self, pointers: tuple[int, ...]) -> list[list]:
        """Per launch, its tensor maps over `pointers` as 64-byte aligned ctypes buffers."""
        if self._maps_for is None or self._maps_for[0] != pointers:
            encoder = (
                load_tensor_map_driver() if any(x.tensor_maps for _, x in self._launches) else None
            )
            maps = []
            for _, launch in self._launches:
                maps.append(
                    [
                        _aligned_map(m)
                        for m in encode_launch_maps(encoder, launch, self._args, pointers)
                    ]
                )
            self._maps_for = (pointers, maps)
        return self._maps_for[1]

    def launch(self, pointers: Sequence[int], stream: int) -> None:
        """Enqueue every kernel on `stream` (a raw CUstream handle; 0 is the legacy default
        stream) with the device pointers of the kernel's arguments, in argument order."""
        if len(pointers) != self.n_args:
            raise LaunchError(f"the kernel takes {self.n_args} pointers, got {len(pointers)}")
        values = [ctypes.c_void_p(int(p)) for p in pointers]
        addresses = [ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values]
        driver = _driver()
        maps = self._maps(tuple(int(p) for p in pointers))
        for (fn, launch), own in zip(self._launches, maps, strict=True):
            params = (ctypes.c_void_p * (len(values) + len(own)))(
                *addresses, *[ctypes.c_void_p(ctypes.addressof(m)) for m in own]
            )
            driver.call(
                "cuLaunchKernel",
                fn,
                *launch.grid,
                *launch.block,
                launch.dynamic_shared_bytes,
                ctypes.c_void_p(stream),
                params,
                None,
            )


def _aligned_map(encoded: bytes):
    """A ctypes copy of an encoded tensor map at a 64-byte aligned host address (the driver
    reads the kernel's parameters from the addresses it is given)."""
    raw = ctypes.create_string_buffer(TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN)
    at = -ctypes.addressof(raw) % TENSOR_MAP_ALIGN
    view = (ctypes.c_char * TENSOR_MAP_BYTES).from_buffer(raw, at)
    ctypes.memmove(ctypes.addressof(view), encoded, TENSOR_MAP_BYTES)
    return view
