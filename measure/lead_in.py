"""A kernel that keeps a stream busy for a set time: the cheap lead-in of a calibration probe.

A reading between two CUDA events counts the host's time to enqueue the timed work unless the
GPU is busy when the first event is enqueued. The full timing gets that from an untimed replay
of its own graph in front (so that its repeats follow the same work they time). A calibration
probe only needs the stream to be busy for as long as the host takes to enqueue a replay and an
event: a one-thread kernel spinning on the GPU's nanosecond timer for LEAD_IN_NS does that at a
fraction of a replay's cost. It touches no memory, and it runs on the graph's own stream, where
launches do not change how fast a graph's kernels run (measure.launch_state).
"""

from __future__ import annotations

from measure.launch_state import PTX_ISA_OF_TARGET

# Longer than the host takes to enqueue a probe's replays and events, many times over.
LEAD_IN_NS = 200_000


def spin_kernel_ptx(compute_capability: tuple[int, int]) -> str:
    """PTX of `spin(ns)`, a kernel that returns once `ns` nanoseconds of %globaltimer passed,
    for a device of `compute_capability`."""
    arch = compute_capability[0] * 10 + compute_capability[1]
    known = [t for t in PTX_ISA_OF_TARGET if t <= arch]
    if not known:
        raise ValueError(f"no PTX target known for compute capability {compute_capability}")
    target = max(known)
    return (
        f".version {PTX_ISA_OF_TARGET[target]}\n"
        f".target sm_{target}\n"
        ".address_size 64\n"
        ".visible .entry spin(.param .u64 spin_ns)\n{\n"
        "\t.reg .pred %p;\n"
        "\t.reg .b64 %ns, %start, %now, %passed;\n"
        "\tld.param.u64 %ns, [spin_ns];\n"
        "\tmov.u64 %start, %globaltimer;\n"
        "$wait:\n"
        "\tmov.u64 %now, %globaltimer;\n"
        "\tsub.u64 %passed, %now, %start;\n"
        "\tsetp.lt.u64 %p, %passed, %ns;\n"
        "\t@%p bra $wait;\n"
        "\tret;\n}\n"
    )


class LeadIn:
    """The spin kernel loaded once in the current context; `launch(stream)` enqueues one spin
    of `ns` nanoseconds. `function` is None (and `error` says why) when the driver refused the
    PTX: the caller then leads in some other way."""

    def __init__(self, drv, device, ns: int = LEAD_IN_NS) -> None:
        self.ns = ns
        self.function = None
        self.error: str | None = None
        try:
            ptx = spin_kernel_ptx(device.compute_capability()).encode() + b"\0"
            self.function = drv.module_from_buffer(ptx).get_function("spin")
            self.function.prepare("Q")
        except Exception as exc:
            self.function, self.error = None, f"{type(exc).__name__}: {exc}"

    def launch(self, stream) -> None:
        """Enqueue one spin on `stream` (a pycuda Stream); asynchronous."""
        assert self.function is not None, "the spin kernel did not load"
        self.function.prepared_async_call((1, 1), (1, 1, 1), stream, self.ns)
