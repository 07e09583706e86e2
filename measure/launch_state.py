"""Put a CUDA context in the state a user's process runs kernels in, before timing any.

How fast a replayed CUDA graph runs its kernel nodes depends on where else the context has
launched kernels: once a few have run on a non-blocking side stream other than the one the graph
replays on, each kernel node takes about a third of a microsecond more (H100, H200). Launches on
the legacy default stream or on the graph's own stream do not do it. Every PyTorch process that
captures graphs is in that state (capture and its warm-up run on side streams), and so is the
benchmark that re-times a search's best. The runner's worker, which replays on one stream only,
would otherwise time candidates in the faster state: its records would be a third of a
microsecond a kernel below what the benchmark and a user measure, and favour programs of several
kernels. Nor does a settled state last: workers that settled once, at their start, recorded
some bests of long searches in the faster state again. So before every timing the worker
launches an empty kernel a few dozen times on each kind of stream such a process launches on:
its legacy default stream, a side stream it keeps, and the stream its graphs replay on (the
benchmark does the same with PyTorch kernels). What the driver or the GPU changes is not visible
from here; launching where a PyTorch process launches puts the context where that process's is.
"""

from __future__ import annotations

from typing import Any

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


def ptx_header(compute_capability: tuple[int, int]) -> str:
    """The `.version`, `.target` and `.address_size` lines of a PTX module for a device of
    `compute_capability`: the newest target we know at or below it, and its PTX ISA."""
    arch = compute_capability[0] * 10 + compute_capability[1]
    known = [t for t in PTX_ISA_OF_TARGET if t <= arch]
    if not known:
        raise ValueError(f"no PTX target known for compute capability {compute_capability}")
    target = max(known)
    return f".version {PTX_ISA_OF_TARGET[target]}\n.target sm_{target}\n.address_size 64\n"


def empty_kernel_ptx(compute_capability: tuple[int, int]) -> str:
    """PTX of `settle`, an empty kernel, for a device of `compute_capability`."""
    return ptx_header(compute_capability) + ".visible .entry settle()\n{\n\tret;\n}\n"


def load_ptx_kernel(drv, ptx: str, name: str, arg_types: str) -> tuple[Any, str | None]:
    """(the prepared kernel `name` of `ptx`, loaded by pycuda's `drv` in the current context,
    None) or (None, why the driver refused it): a kernel of our own PTX is a convenience the
    timing does without, so its refusal is reported, not raised."""
    try:
        function = drv.module_from_buffer(ptx.encode() + b"\0").get_function(name)
        function.prepare(arg_types)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return function, None


class LaunchSettler:
    """The empty kernel, loaded once in the current context, launched `launches` times on each
    of a list of streams before a timing."""

    def __init__(self, drv, device, launches: int = SETTLE_LAUNCHES) -> None:
        self.drv, self.launches = drv, launches
        # a driver that cannot load the PTX: time unsettled, say so
        self.function, self.error = load_ptx_kernel(
            drv, empty_kernel_ptx(device.compute_capability()), "settle", ""
        )

    def settle(self, streams) -> str | None:
        """Launch on each of `streams` (pycuda Streams of the current context; None for the
        legacy default stream) and wait for them. Returns None, or why it could not (the
        timing goes on without it; the caller says so once)."""
        if self.function is None:
            return self.error
        try:
            for stream in streams:
                for _ in range(self.launches):
                    self.function.prepared_async_call((1, 1), (32, 1, 1), stream)
            self.drv.Context.synchronize()
        # A failed launch: time unsettled and say so; a broken context fails the timing itself.
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None
