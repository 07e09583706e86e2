"""Put a CUDA context in the state a user's process runs kernels in, before timing any.

A context whose non-default streams have never launched a kernel replays a CUDA graph's kernel
nodes faster than one whose streams have: once a handful of kernels (empty ones too) have run on any
non-default stream, every kernel of a replayed graph takes about a third of a microsecond more
(H200), for the life of the context. Every process that captures graphs has launched on a side
stream (capture needs one, and warm-up runs go there), as has the benchmark that re-times a
search's best. The runner's worker, which only replays graphs on its stream, would otherwise
time every candidate in the faster state and favour programs of several kernels by that much a
kernel. So before its first timing it launches an empty kernel on its stream a few dozen times:
from then on it times what the benchmark and a graph-capturing user get.
"""

from __future__ import annotations

SETTLE_LAUNCHES = 64  # empty launches: eight were enough on an H200, the rest is margin

# The PTX ISA version that first knows each target (the empty kernel's PTX names the newest
# target not above the device's, and the driver compiles it for the device).
PTX_ISA_OF_TARGET = {
    70: "6.0",
    75: "6.3",
    80: "7.0",
    86: "7.1",
    89: "7.8",
    90: "7.8",
    100: "8.6",
    120: "8.7",
}


def empty_kernel_ptx(compute_capability: tuple[int, int]) -> str:
    """PTX of `settle`, an empty kernel, for a device of `compute_capability`."""
    arch = compute_capability[0] * 10 + compute_capability[1]
    known = [t for t in PTX_ISA_OF_TARGET if t <= arch]
    if not known:
        raise ValueError(f"no PTX target known for compute capability {compute_capability}")
    target = max(known)
    return (
        f".version {PTX_ISA_OF_TARGET[target]}\n"
        f".target sm_{target}\n"
        ".address_size 64\n"
        ".visible .entry settle()\n{\n\tret;\n}\n"
    )


def settle_launch_state(drv, device, stream, launches: int = SETTLE_LAUNCHES) -> str | None:
    """Launch an empty kernel `launches` times on `stream` (a pycuda Stream of the current
    context, not the legacy default one) and wait for them. Returns None, or why it could not
    (the timing goes on without it; the caller says so once)."""
    try:
        ptx = empty_kernel_ptx(device.compute_capability()).encode() + b"\0"
        module = drv.module_from_buffer(ptx)
        settle = module.get_function("settle")
        settle.prepare("")
        for _ in range(launches):
            settle.prepared_async_call((1, 1), (32, 1, 1), stream)
        stream.synchronize()
    except Exception as exc:  # a driver that cannot load the PTX: time unsettled, say so
        return f"{type(exc).__name__}: {exc}"
    return None
