"""The cheap lead-in of a calibration probe: a kernel that keeps a stream busy for a set time,
after a write that leaves the L2 cache holding none of the candidate's buffers.

A reading between two CUDA events counts the host's time to enqueue the timed work unless the
GPU is busy when the first event is enqueued. The full timing gets that from an untimed replay
of its own graph in front (so that its repeats follow the same work they time). A calibration
probe only needs the stream to be busy for as long as the host takes to enqueue a replay and an
event: a one-thread kernel spinning on the GPU's nanosecond timer for LEAD_IN_NS does that at a
fraction of a replay's cost. It touches no memory, and it runs on the graph's own stream, where
launches do not change how fast a graph's kernels run (measure.launch_state).

With input rotation, a replay in front also left the probe's buffer sets out of the L2 cache
(each read `sets` runs before); without one, the sets last written when they were copied would
still be there, and the probe would time part of its runs from the cache. So a rotating probe's
lead-in first writes a scratch buffer as large as the rotation's span (`flush_bytes`), which
evicts them as a replay would, in a few tens of microseconds.
"""

from __future__ import annotations

from measure.launch_state import load_ptx_kernel, ptx_header

# Longer than the host takes to enqueue a probe's replays and events, many times over.
LEAD_IN_NS = 200_000
# Reads of the timer at most: a spin ends even on a timer that does not advance.
MAX_SPIN_READS = 1 << 20


def spin_kernel_ptx(compute_capability: tuple[int, int]) -> str:
    """PTX of `spin(ns)`, a kernel that returns once `ns` nanoseconds of %globaltimer passed
    (or it read the timer MAX_SPIN_READS times), for a device of `compute_capability`."""
    return ptx_header(compute_capability) + (
        ".visible .entry spin(.param .u64 spin_ns)\n{\n"
        "\t.reg .pred %p, %more;\n"
        "\t.reg .b32 %reads;\n"
        "\t.reg .b64 %ns, %start, %now, %passed;\n"
        "\tld.param.u64 %ns, [spin_ns];\n"
        "\tmov.u32 %reads, 0;\n"
        "\tmov.u64 %start, %globaltimer;\n"
        "$wait:\n"
        "\tmov.u64 %now, %globaltimer;\n"
        "\tadd.u32 %reads, %reads, 1;\n"
        "\tsub.u64 %passed, %now, %start;\n"
        "\tsetp.lt.u64 %p, %passed, %ns;\n"
        f"\tsetp.lt.and.u32 %more, %reads, {MAX_SPIN_READS}, %p;\n"
        "\t@%more bra $wait;\n"
        "\tret;\n}\n"
    )


class LeadIn:
    """The spin kernel loaded once in the current context; `launch(stream, flush_bytes)`
    enqueues a write of `flush_bytes` of scratch, then one spin of `ns` nanoseconds. `function`
    is None (and `error` says why) when the driver refused the PTX: the caller then leads in
    some other way."""

    def __init__(self, drv, device, ns: int = LEAD_IN_NS) -> None:
        self.drv, self.ns = drv, ns
        self.scratch = None  # the flush's buffer, grown on demand, kept for the process
        self.scratch_bytes = 0
        self.function, self.error = load_ptx_kernel(
            drv, spin_kernel_ptx(device.compute_capability()), "spin", "Q"
        )

    def launch(self, stream, flush_bytes: int = 0) -> None:
        """Enqueue on `stream` (a pycuda Stream) a write of `flush_bytes` of scratch (rounded up
        to 4 bytes; none for 0), then one spin; asynchronous."""
        assert self.function is not None, "the spin kernel did not load"
        words = -(-flush_bytes // 4)
        if words:
            self.drv.memset_d32_async(int(self._scratch(4 * words)), 0, words, stream)
        self.function.prepared_async_call((1, 1), (1, 1, 1), stream, self.ns)

    def _scratch(self, nbytes: int):
        """The scratch buffer, of `nbytes` at least (a smaller one is freed first)."""
        if self.scratch is None or self.scratch_bytes < nbytes:
            if self.scratch is not None:
                self.scratch.free()
                self.scratch, self.scratch_bytes = None, 0
            self.scratch = self.drv.mem_alloc(nbytes)
            self.scratch_bytes = nbytes
        return self.scratch
