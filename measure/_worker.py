"""The runner's worker process: the only code in autosched that touches the GPU.

Started by `LocalRunner` as `python -m measure._worker DEVICE`. It owns one CUDA context (made
here, not through pycuda.autoinit), reads request frames on stdin and writes one reply frame per
request on the original stdout; fd 1 is redirected to stderr so that a kernel's printf cannot
corrupt the frame stream. After a CUDA error the context may be corrupted (an illegal address is
sticky), so the worker replies with `fatal: True` and exits; the parent starts a fresh one.

Timing replays CUDA graphs of the candidate's launches (measure.cuda_graph), so that a kernel of
a few microseconds is timed by the GPU's time, not by the host's launch rate; where the driver
refuses graphs it times back-to-back launches instead and says so in the reply (`timing`). A
request's `rotate_bytes` makes consecutive timed runs cycle through copies of the buffers
(measure.rotation), so that operands are read from memory, not from a warm L2 cache.
"""

from __future__ import annotations

import math
import os
import struct
import sys
import time

import numpy as np

from measure.artifact import ArgSpec, Launch
from measure.bfloat16 import storage_dtype
from measure.cuda_graph import Graph, GraphDriver, GraphError, load_graph_driver, stream_handle
from measure.errors import MeasureErrorKind
from measure.framing import FrameEOF, read_frame, write_frame
from measure.launch_state import LaunchSettler
from measure.reference import Reference, compare_outputs, random_array
from measure.rotation import copy_sets, rotation_copies, set_pointers

MAX_NUMBER = 1 << 20  # runs of the launch sequence per repeat, at most
# Kernel launches per captured graph, at most: a longer repeat replays the graph several times.
# Capturing and instantiating cost host time per launch, and the gap between consecutive replays
# on the GPU is small beside a replay of this many launches, so a larger graph would only cost
# time.
MAX_GRAPH_LAUNCHES = 1024
_STREAM_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING: no implicit order with the legacy stream


class _Failure(Exception):
    def __init__(self, kind: MeasureErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Worker:
    """Serves run requests in one CUDA context. With `graphs` (measure.cuda_graph's
    `load_graph_driver()`) it times by CUDA graph replay; with None, back-to-back launches."""

    def __init__(self, drv, device, graphs: GraphDriver | None = None) -> None:
        self.drv = drv
        self.device = device
        self.graphs = graphs
        self.stream = None  # the stream graphs are captured and replayed on, made on first use
        self.side_stream = None  # where settling launches besides the graph stream, made with it
        self.settler: LaunchSettler | None = None  # made with the streams
        self.unsettled_said = False  # whether a failed settling was reported (once)
        self.graph_failures = 0
        self.back_to_back = False  # whether the last candidate was timed back-to-back
        self.references: dict[str, Reference] = {}
        self.phases: dict[str, float] = {}  # seconds per phase of the last candidate
        self.bounds: dict = {}  # ref_id -> output name -> allowed error (compare_outputs' cache)
        self.pristine: dict = {}  # ref_id -> input name -> device copy of the reference input
        self.static_smem_limit = device.get_attribute(
            drv.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK
        )

    def handle(self, req: dict) -> dict:
        """Run one candidate; returns {costs, error_kind, error_msg, fatal}."""
        for dropped in req.get("drop_refs", ()):
            self._forget(dropped)
        ref_id: str | None = req.get("ref_id")
        if ref_id is not None and req.get("ref") is not None:
            self._forget(ref_id)
            self.references[ref_id] = Reference.from_dict(req["ref"])
        reference = self.references.get(ref_id) if ref_id is not None else None
        if ref_id is not None and reference is None:
            return _reply(MeasureErrorKind.UNKNOWN, f"reference {ref_id!r} was never sent")
        self.phases = {}
        self.back_to_back = False
        try:
            costs = self._measure(req, reference)
        except _Failure as exc:
            if exc.kind == MeasureErrorKind.WRONG_ANSWER:
                # A kernel writing out of bounds may have hit the pristine inputs (device memory
                # too): upload them afresh for the next candidate.
                for buf in self.pristine.pop(ref_id, {}).values():
                    buf.free()
            return _reply(exc.kind, str(exc))
        except self.drv.Error as exc:
            return _reply(MeasureErrorKind.RUNTIME_ERROR, f"{type(exc).__name__}: {exc}", True)
        except Exception as exc:  # a bug here; restart to be safe
            return _reply(MeasureErrorKind.UNKNOWN, f"{type(exc).__name__}: {exc}", True)
        return {
            "costs": costs,
            "error_kind": 0,
            "error_msg": "",
            "fatal": False,
            "phases": self.phases,
            "timing": "back-to-back" if self.back_to_back else "graph",
        }

    def _forget(self, ref_id) -> None:
        self.references.pop(ref_id, None)
        self.bounds.pop(ref_id, None)
        for buf in self.pristine.pop(ref_id, {}).values():
            buf.free()

    def _measure(self, req: dict, reference: Reference | None) -> list[float]:
        drv = self.drv
        t0 = time.perf_counter()
        args = [ArgSpec.from_dict(a) for a in req["args"]]
        launches = [Launch.from_dict(x) for x in req["launches"]]
        module = drv.module_from_buffer(req["cubin"])
        # entry functions compiled apart: each from its own module (all kept alive to the end)
        apart = {name: drv.module_from_buffer(c) for name, c in req.get("entry_cubins", {}).items()}
        calls = [self._prepare(apart.get(x.kernel_name, module), x) for x in launches]
        buffers = [drv.mem_alloc(max(1, a.nbytes)) for a in args]
        rotated: list = []  # the extra buffer sets timing cycles through, freed with the rest
        try:
            self._upload(args, buffers, reference, req.get("seed", 0), req.get("ref_id"))
            pointers = [int(b) for b in buffers]
            run_sequence = _sequence(calls, pointers)
            # the sets the timed runs cycle through, inputs copied before any run can touch them
            copies = rotation_copies(sum(a.nbytes for a in args), int(req.get("rotate_bytes", 0)))
            sequences = [run_sequence]
            if copies > 1:
                sizes = [a.nbytes for a in args]
                rotated.append(copy_sets(drv, sizes, buffers, copies - 1))
                sequences += [
                    _sequence(calls, p) for p in set_pointers(sizes, rotated[-1], copies - 1)
                ]

            t1 = time.perf_counter()
            for arg, buf in zip(args, buffers, strict=True):
                if arg.is_output and arg.nbytes:
                    drv.memset_d8(int(buf), 0xFF, arg.nbytes)  # NaN for floats, -1 for ints
            run_sequence()
            drv.Context.synchronize()
            if req.get("check") and reference is not None:
                outputs = {}
                for arg, buf in zip(args, buffers, strict=True):
                    if arg.is_output:
                        host = np.empty(arg.shape, dtype=storage_dtype(arg.dtype))
                        drv.memcpy_dtoh(host, buf)
                        outputs[arg.name] = host
                message = compare_outputs(
                    outputs, reference, self.bounds.setdefault(req.get("ref_id"), {})
                )
                if message:
                    raise _Failure(MeasureErrorKind.WRONG_ANSWER, message)
            t2 = time.perf_counter()
            costs = self._time(_Rotation(sequences), len(calls), req)
            self.phases = {"load": t1 - t0, "check": t2 - t1, "time": time.perf_counter() - t2}
            return costs
        finally:
            for buf in buffers + rotated:
                try:
                    buf.free()
                except Exception:
                    pass

    def _prepare(self, module, launch: Launch):
        drv = self.drv
        func = module.get_function(launch.kernel_name)
        most = func.get_attribute(drv.function_attribute.MAX_THREADS_PER_BLOCK)
        if launch.threads_per_block > most:
            raise _Failure(
                MeasureErrorKind.RESOURCE_LIMIT,
                f"{launch.kernel_name}: {launch.threads_per_block} threads per block, but the "
                f"driver allows at most {most} for this kernel (registers)",
            )
        shared = launch.dynamic_shared_bytes
        static = func.get_attribute(drv.function_attribute.SHARED_SIZE_BYTES)
        if shared and static + shared > self.static_smem_limit:
            func.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
        return func, launch.grid, launch.block, shared

    def _upload(self, args, buffers, reference: Reference | None, seed: int, ref_id=None) -> None:
        """Fill the input buffers: a reference's inputs are copied on the device from a pristine
        copy uploaded once per reference (a candidate may scribble over its inputs, so each one
        gets fresh buffers); without a reference, seeded random data."""
        rng = np.random.default_rng(seed)
        pristine = self.pristine.setdefault(ref_id, {}) if reference is not None else {}
        for arg, buf in zip(args, buffers, strict=True):
            if arg.is_output:
                continue
            if reference is None:
                data = random_array(arg.shape, arg.dtype, rng)
            elif arg.name in reference.inputs:
                data = np.ascontiguousarray(reference.inputs[arg.name])
                if data.shape != arg.shape or data.dtype != storage_dtype(arg.dtype):
                    raise _Failure(
                        MeasureErrorKind.INSTANTIATION_ERROR,
                        f"reference input {arg.name!r} is {data.dtype}{list(data.shape)}, the "
                        f"artifact declares {arg.dtype}{list(arg.shape)}",
                    )
            else:  # a scratch buffer between kernels: poison it like an output
                if arg.nbytes:
                    self.drv.memset_d8(int(buf), 0xFF, arg.nbytes)
                continue
            if not data.size:
                continue
            if reference is None:
                self.drv.memcpy_htod(buf, data)
                continue
            if arg.name not in pristine:
                pristine[arg.name] = self.drv.mem_alloc(data.nbytes)
                self.drv.memcpy_htod(pristine[arg.name], data)
            self.drv.memcpy_dtod(buf, pristine[arg.name], data.nbytes)

    def _time(self, run, launches_per_run: int, req: dict) -> list[float]:
        """Seconds per run of the launch sequence (`run(stream, k)` enqueues the k-th), one per
        repeat: from CUDA graph replays when the driver's graph API is usable and the request
        does not say `graphs: False`, else (flagged in `back_to_back`) from back-to-back
        launches."""
        if self.graphs is not None and req.get("graphs", True):
            try:
                return self._time_graph(run, launches_per_run, req)
            except (GraphError, self.drv.Error) as exc:
                # A capture refused by the driver is no fault of the candidate. Should the
                # context be broken instead, the back-to-back launches below fail for real.
                if not self.graph_failures:
                    print(f"measure worker: timing back-to-back, not by graph: {exc}", flush=True)
                self.graph_failures += 1
        self.back_to_back = True
        return self._time_back_to_back(run, req)

    def _time_graph(self, run, launches_per_run: int, req: dict) -> list[float]:
        """`number` runs captured in a CUDA graph (at most MAX_GRAPH_LAUNCHES launches, replayed
        as often as needed), timed between events without the host's launch cost: the GPU time
        of the kernels. `number` is calibrated as in `_time_back_to_back`."""
        assert self.graphs is not None
        if self.stream is None:
            self.stream = self.drv.Stream(_STREAM_NON_BLOCKING)
            self.side_stream = self.drv.Stream(_STREAM_NON_BLOCKING)
            self.settler = LaunchSettler(self.drv, self.device)
        assert self.settler is not None
        unsettled = self.settler.settle([None, self.side_stream, self.stream])
        if unsettled and not self.unsettled_said:
            print(f"measure worker: timing in an unsettled context: {unsettled}", flush=True)
            self.unsettled_said = True
        timer = _GraphTimer(self.drv, self.graphs, self.stream, run, launches_per_run)
        try:
            number, min_ms = max(run.sets, int(req["number"])), float(req["min_repeat_ms"])
            repeat, cooldown = max(1, int(req["repeat"])), float(req.get("cooldown", 0))
            # Calibrate from a probe of `number` runs (a replay carries no launch latency, so the
            # probe's time per run predicts the next well); then the repeats, consecutively.
            number, times = timer.repeats(number, 1)
            while times[-1] < min_ms and number < MAX_NUMBER:
                per_run = max(times[-1] / number, 1e-5)
                number = min(MAX_NUMBER, max(number + 1, math.ceil(min_ms * 1.05 / per_run)))
                number, times = timer.repeats(number, repeat if cooldown <= 0 else 1)
            while len(times) < repeat:
                if cooldown > 0:
                    time.sleep(cooldown)
                number, more = timer.repeats(number, repeat - len(times) if cooldown <= 0 else 1)
                times += more
            return [ms / number * 1e-3 for ms in times[:repeat]]
        finally:
            timer.close()

    def _time_back_to_back(self, run, req: dict) -> list[float]:
        """CUDA events around `number` back-to-back launches of the sequence per repeat: the
        fallback without graphs, bounded below by the host's launch rate."""
        drv = self.drv
        start, end = drv.Event(), drv.Event()

        def timed(count: int) -> float:
            start.record()
            for k in range(count):
                run(None, k)
            end.record()
            end.synchronize()
            return end.time_since(start)  # milliseconds

        # Calibrate: raise `number` until one repeat lasts min_repeat_ms. Aim 5% above it from the
        # last estimate (a small first probe overestimates the time per run by the launch
        # latency, so this converges from below, in two or three probes, without overshooting).
        number = max(run.sets, int(req["number"]))
        min_ms = float(req["min_repeat_ms"])
        elapsed = timed(number)
        while elapsed < min_ms and number < MAX_NUMBER:
            per_run = max(elapsed / number, 1e-5)
            number = min(MAX_NUMBER, max(number + 1, math.ceil(min_ms * 1.05 / per_run)))
            elapsed = timed(number)
        costs = [elapsed / number * 1e-3]  # the last probe is a full repeat: it counts
        for _ in range(max(1, int(req["repeat"])) - 1):
            if req.get("cooldown", 0) > 0:
                time.sleep(req["cooldown"])
            costs.append(timed(number) / number * 1e-3)
        return costs


def _sequence(calls, pointers: list[int]):
    """A function launching the whole kernel sequence on a pycuda stream (None: the legacy
    default stream), asynchronously, with the least Python overhead.

    The parameter buffer is packed once; `Function._launch_kernel` (pycuda's launch primitive,
    stable since 2011) takes it as is. Without it, fall back to the public prepared call.
    """
    params = struct.pack("P" * len(pointers), *pointers)
    if all(hasattr(func, "_launch_kernel") for func, *_ in calls):

        def run_sequence(stream=None) -> None:
            for func, grid, block, shared in calls:
                func._launch_kernel(grid, block, params, shared, stream)

        return run_sequence
    for func, *_ in calls:
        func.prepare("P" * len(pointers))

    def run_prepared(stream=None) -> None:
        for func, grid, block, shared in calls:
            func.prepared_async_call(grid, block, stream, *pointers, shared_size=shared)

    return run_prepared


class _Rotation:
    """run(stream, k): the k-th timed run of the launch sequence, on buffer set k mod `sets`
    (one set: the same buffers every run). A timing runs at least `sets` runs in a row, so that
    every set is read before any is read again."""

    def __init__(self, sequences: list) -> None:
        self.sequences = sequences
        self.sets = len(sequences)

    def __call__(self, stream, k: int) -> None:
        self.sequences[k % self.sets](stream)


class _GraphTimer:
    """Times repeats of `number` runs of a launch sequence by replaying a captured graph of at
    most MAX_GRAPH_LAUNCHES launches; captures again only when the graph's size changes."""

    def __init__(self, drv, graphs: GraphDriver, stream, run, launches_per_run: int):
        self.drv, self.graphs, self.stream = drv, graphs, stream
        self.handle = stream_handle(stream)
        self.run = run
        # a graph holds every buffer set's run at least, however many launches that takes
        self.most_runs = max(run.sets, MAX_GRAPH_LAUNCHES // max(1, launches_per_run))
        self.graph: Graph | None = None
        self.graph_runs = 0

    def repeats(self, number: int, count: int) -> tuple[int, list[float]]:
        """(runs per repeat, at least `number`; milliseconds of `count` consecutive repeats)."""
        replays = -(-number // self.most_runs)
        runs = -(-number // replays)  # as even as possible over the replays
        graph = self._graph(runs)
        events = [self.drv.Event() for _ in range(count + 1)]
        # One untimed replay first: the GPU is busy while the host enqueues the timed ones, so
        # no repeat includes the host's time to submit it.
        graph.launch(self.handle)
        events[0].record(self.stream)
        for event in events[1:]:
            for _ in range(replays):
                graph.launch(self.handle)
            event.record(self.stream)
        events[-1].synchronize()
        return runs * replays, [b.time_since(a) for a, b in zip(events, events[1:], strict=False)]

    def _graph(self, runs: int) -> Graph:
        if self.graph is None or runs != self.graph_runs:
            self.close()
            stream, run = self.stream, self.run
            self.graph = self.graphs.capture(
                self.handle, lambda: [run(stream, k) for k in range(runs)]
            )
            self.graph_runs = runs
        return self.graph

    def close(self) -> None:
        """Release the graph."""
        if self.graph is not None:
            self.graph.close()
            self.graph = None


def _reply(kind: MeasureErrorKind, message: str, fatal: bool = False) -> dict:
    return {"costs": [], "error_kind": int(kind), "error_msg": message, "fatal": fatal}


def main() -> None:
    """Serve requests until stdin closes or an `exit` request arrives."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    device_index = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    try:
        import pycuda.driver as drv

        drv.init()
        if drv.Device.count() == 0:
            raise RuntimeError("pycuda found no CUDA device")
        device = drv.Device(device_index)
        context = device.make_context()
    except Exception as exc:
        write_frame(out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    major, minor = device.compute_capability()
    write_frame(out, {"ready": True, "device": device.name(), "arch": f"sm_{major}{minor}"})
    worker = Worker(drv, device, load_graph_driver())
    if worker.graphs is None:
        print("measure worker: no CUDA graph API; timing back-to-back launches", flush=True)
    try:
        while True:
            try:
                req = read_frame(inp)
            except FrameEOF:
                break
            if req.get("op") == "exit":
                break
            reply = worker.handle(req)
            write_frame(out, reply)
            if reply["fatal"]:
                out.close()
                os._exit(3)  # the context may be corrupted: do not touch it again
    finally:
        context.pop()


if __name__ == "__main__":
    main()
