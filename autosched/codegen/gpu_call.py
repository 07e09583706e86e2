"""Running a BuiltKernel in this process on the GPU (pycuda), for users and benchmarks.

Every kernel takes the argument pointers, then its launch's tensor maps (`Launch.tensor_maps`),
encoded here for the buffers it runs on (`measure.tensor_map`).
"""

from __future__ import annotations

import atexit
import functools
from typing import Any

import numpy as np

from measure import GPUUnavailableError, compile_kernel
from measure.cluster_size import allow_clusters_pycuda
from measure.tensor_map import (
    encode_launch_maps,
    kernel_param_offsets,
    load_tensor_map_driver,
    pack_params,
    param_format,
)


@functools.lru_cache(maxsize=64)
def _cubin(source: str, arch: str) -> bytes:
    """`source` compiled as the search's builder compiles it (NVRTC when found, else nvcc with
    the options that give the same code), so it runs as it was measured."""
    kind, msg, cubin, _ = compile_kernel(source, arch)
    if cubin is None:
        raise RuntimeError(f"the kernel did not compile ({kind.name}): {msg}")
    return cubin


@functools.lru_cache(maxsize=64)
def _module(source: str, arch: str):
    """The loaded module of `source` (`_cubin`)."""
    import pycuda.driver as drv

    return drv.module_from_buffer(_cubin(source, arch))


def _offsets(kernel, arch: str, launch) -> list[int] | None:
    """Where the compiled kernel of a launch with tensor maps takes each parameter."""
    if not launch.tensor_maps:
        return None
    return kernel_param_offsets(_cubin(kernel.source, arch), launch.kernel_name)


def _function(drv, mod, launch):
    """The kernel function of `launch`, allowed the dynamic shared memory the launch asks for
    (above 48 KB the driver needs the function attribute set first) and its clusters where they
    are larger than the portable size (`measure.cluster_size`)."""
    fn = mod.get_function(launch.kernel_name)
    if launch.dynamic_shared_bytes:
        attr = drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES
        fn.set_attribute(attr, launch.dynamic_shared_bytes)
    allow_clusters_pycuda(drv, fn, launch)
    return fn


@functools.cache
def _encoder():
    """libcuda's tensor map encoder, loaded once."""
    return load_tensor_map_driver()


def _prepared(fn, launch, args, pointers: list[int]) -> list[bytes]:
    """Prepare `fn` for the pointers and the launch's tensor maps over them; the encoded maps,
    which follow the pointers in its calls."""
    maps = encode_launch_maps(_encoder(), launch, args, pointers) if launch.tensor_maps else []
    fn.prepare(param_format(len(pointers), len(maps)))
    return maps


def _dim3(dims) -> tuple[int, int, int]:
    return tuple(dims) + (1,) * (3 - len(dims))


class _Call:
    """One kernel launch with its parameter buffer packed once: through pycuda's launch
    primitive `Function._launch_kernel` (the runner's worker launches the same way), or its
    public prepared call where a pycuda lacks it."""

    def __init__(self, fn, launch, pointers: list[int], maps: list[bytes], offsets=None) -> None:
        self.fn, self.launch = fn, launch
        self.grid, self.block = _dim3(launch.grid), _dim3(launch.block)
        self.shared = launch.dynamic_shared_bytes
        self.args = (*pointers, *maps)
        self.params = pack_params(pointers, maps, offsets)

    def __call__(self, stream=None) -> None:
        if hasattr(self.fn, "_launch_kernel"):
            self.fn._launch_kernel(self.grid, self.block, self.params, self.shared, stream)
        else:
            self.fn.prepared_async_call(
                self.grid, self.block, stream, *self.args, shared_size=self.shared
            )


LAUNCH_ATTRIBUTES = (
    ("registers a thread", "NUM_REGS"),
    ("threads a block at most", "MAX_THREADS_PER_BLOCK"),
    ("static shared bytes", "SHARED_SIZE_BYTES"),
    ("dynamic shared bytes allowed", "MAX_DYNAMIC_SHARED_SIZE_BYTES"),
    ("local bytes a thread", "LOCAL_SIZE_BYTES"),
)


def launch_report(drv, fn, launch, maps: list[bytes]) -> str:
    """What a launch asked for beside what the loaded function needs, for a launch error."""
    asked = (
        f"{launch.kernel_name}: grid {launch.grid}, block {launch.block}, "
        f"{launch.dynamic_shared_bytes} dynamic shared bytes, {len(maps)} tensor maps"
    )
    if launch.cluster_blocks > 1:
        asked += f", clusters of {launch.cluster_blocks} blocks"
    needs = []
    for what, name in LAUNCH_ATTRIBUTES:
        try:
            needs.append(f"{fn.get_attribute(getattr(drv.function_attribute, name))} {what}")
        except Exception:  # an attribute this driver or pycuda lacks
            continue
    return "; ".join([asked, *needs])


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
    synchronisation: the call to time, between CUDA events or captured in a CUDA graph.

    `launcher()` launches on the legacy default stream (PyTorch's default stream too);
    `launcher(stream)` on a pycuda Stream, such as `new_stream()`'s, asynchronously, so that
    the launches can be captured in a graph on that stream (benchmarks/timing.py).
    """

    def __init__(self, kernel, arrays: tuple[Any, ...]) -> None:
        drv, arch = _context()
        mod = _module(kernel.source, arch)
        self.keep, self.pointers = [], []
        for spec, arr in zip(kernel.args, _padded(kernel, arrays), strict=True):
            if arr is None:  # a global temporary of a multi-kernel program
                buf = _temporary(drv, spec)
                self.keep.append(buf)
                self.pointers.append(np.uintp(int(buf)))
            elif hasattr(arr, "data_ptr"):
                self.keep.append(arr)
                self.pointers.append(np.uintp(arr.data_ptr()))
            else:
                raise TypeError(
                    f"GPULauncher takes torch CUDA tensors, got {type(arr).__name__} "
                    f"for {spec.name}"
                )
        addresses = [int(p) for p in self.pointers]
        self.calls = []
        for launch in kernel.launches:
            fn = _function(drv, mod, launch)
            maps = _prepared(fn, launch, kernel.args, addresses)
            offsets = _offsets(kernel, arch, launch)
            self.calls.append(_Call(fn, launch, addresses, maps, offsets))

    def __call__(self, stream=None) -> None:
        """Launch every kernel in order on `stream` (a pycuda Stream; None: the legacy default
        stream)."""
        for call in self.calls:
            call(stream)


def new_stream():
    """A new pycuda Stream in the device's primary context, the one PyTorch uses: our launchers
    take it, and `torch.cuda.ExternalStream(measure.cuda_graph.stream_handle(s))` is the same
    stream for PyTorch. Non-blocking (no implicit order with the legacy default stream), like
    PyTorch's own side streams."""
    drv, _ = _context()
    return drv.Stream(1)  # CU_STREAM_NON_BLOCKING


def _padded(kernel, arrays) -> list:
    """`arrays`, then None for each argument not given (the global temporaries)."""
    kernel.check_array_count("the kernel", len(arrays))
    return list(arrays) + [None] * (len(kernel.args) - len(arrays))


def _temporary(drv, spec):
    """Device memory for the global temporary `spec`, zeroed when it is a workspace (its
    kernels count on zeros at the first launch, and leave it so)."""
    nbytes = int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize
    buf = drv.mem_alloc(max(1, nbytes))
    if spec.zeroed and nbytes:
        drv.memset_d8(int(buf), 0, nbytes)
    return buf


def launch_on_gpu(kernel, arrays: tuple[Any, ...]) -> None:
    """Launch every kernel of `kernel` (a BuiltKernel) on `arrays` (numpy or torch CUDA)."""
    drv, arch = _context()
    mod = _module(kernel.source, arch)
    ptrs, copies = [], []
    for spec, arr in zip(kernel.args, _padded(kernel, arrays), strict=True):
        if arr is None:
            ptrs.append(_temporary(drv, spec))
        elif hasattr(arr, "data_ptr"):  # torch tensor on the GPU
            ptrs.append(np.uintp(arr.data_ptr()))
        else:
            arr = np.ascontiguousarray(arr)
            buf = drv.mem_alloc(arr.nbytes)
            drv.memcpy_htod(buf, arr)
            ptrs.append(buf)
            if spec.is_output:
                copies.append((arrays[len(ptrs) - 1], buf))
    addresses = [int(p) for p in ptrs]
    for launch in kernel.launches:
        fn = _function(drv, mod, launch)
        maps = _prepared(fn, launch, kernel.args, addresses)
        try:
            _Call(fn, launch, addresses, maps, _offsets(kernel, arch, launch))()
        except drv.LaunchError as exc:
            raise drv.LaunchError(f"{exc} ({launch_report(drv, fn, launch, maps)})") from exc
    drv.Context.synchronize()
    for host, buf in copies:
        out = np.empty_like(host)
        drv.memcpy_dtoh(out, buf)
        host[...] = out
