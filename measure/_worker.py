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
(measure.rotation), so that operands are read from memory, not from a warm L2 cache. How many
runs and repeats a candidate gets, and whether it stops early at the request's `cost_bound`, is
measure.timing_plan's decision; measure.timers does the timing. A launch's tensor maps
(`Launch.tensor_maps`) are encoded for each buffer set it runs on (measure.tensor_map) and passed
by value after the pointers.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from measure.artifact import ArgSpec, Launch
from measure.bfloat16 import storage_dtype
from measure.cluster_size import allow_clusters_pycuda
from measure.cuda_graph import GraphDriver, GraphError, load_graph_driver
from measure.errors import MeasureErrorKind
from measure.framing import FrameEOF, read_frame, write_frame
from measure.guard_bands import GuardedBuffer, stray_writes
from measure.launch_state import LaunchSettler
from measure.lead_in import LeadIn
from measure.reference import Reference, compare_outputs, random_array
from measure.rotation import copy_sets, rotation_copies, set_pointers
from measure.tensor_map import (
    TensorMapDriver,
    TensorMapError,
    encode_launch_maps,
    kernel_param_offsets,
    load_tensor_map_driver,
    pack_params,
    param_format,
)
from measure.timers import BackToBackTimer, GraphTimer
from measure.timing_plan import Timing, TimingSettings, time_candidate

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
        self.lead_in: LeadIn | None = None  # the probes' spin kernel, made with the streams
        self.unsettled_said = False  # whether a failed settling was reported (once)
        self.graph_failures = 0
        self.back_to_back = False  # whether the last candidate was timed back-to-back
        self.stopped_early = False  # whether the last candidate's timing stopped at its bound
        self.references: dict[str, Reference] = {}
        self.phases: dict[str, float] = {}  # seconds per phase of the last candidate
        self.bounds: dict = {}  # ref_id -> output name -> allowed error (compare_outputs' cache)
        self.pristine: dict = {}  # ref_id -> input name -> device copy of the reference input
        self.encoder: TensorMapDriver | None = None  # loaded for the first launch with tensor maps
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
        self.stopped_early = False
        try:
            costs = self._measure_judged(req, reference, ref_id)
        except _Failure as exc:
            if exc.kind == MeasureErrorKind.WRONG_ANSWER:
                # A kernel writing out of bounds may have hit the pristine inputs (device memory
                # too): upload them afresh for the next candidate.
                self._drop_pristine(ref_id)
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
            "stopped_early": self.stopped_early,
        }

    def _measure_judged(self, req: dict, reference: Reference | None, ref_id) -> list[float]:
        """`_measure`, with a wrong answer judged on intact inputs: when the device's pristine
        copy of the reference's inputs no longer holds them (a kernel measured before wrote out
        of bounds into it), they are uploaded afresh and the candidate measured again, so that
        another kernel's stray writes never fail a correct one."""
        try:
            return self._measure(req, reference)
        except _Failure as exc:
            if exc.kind != MeasureErrorKind.WRONG_ANSWER or reference is None:
                raise
            if not self._pristine_spoiled(ref_id, reference):
                raise
            self._drop_pristine(ref_id)
        return self._measure(req, reference)

    def _pristine_spoiled(self, ref_id, reference: Reference) -> bool:
        """Whether a pristine input on the device differs, byte for byte, from the reference's."""
        for name, buf in self.pristine.get(ref_id, {}).items():
            want = np.ascontiguousarray(reference.inputs[name])
            held = np.empty(want.shape, want.dtype)
            self.drv.memcpy_dtoh(held, buf)
            if not np.array_equal(held.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8)):
                return True
        return False

    def _forget(self, ref_id) -> None:
        self.references.pop(ref_id, None)
        self.bounds.pop(ref_id, None)
        self._drop_pristine(ref_id)

    def _drop_pristine(self, ref_id) -> None:
        """Free the pristine inputs of `ref_id`: the next candidate uploads them afresh."""
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
        buffers = [GuardedBuffer(drv, max(1, a.nbytes)) for a in args]
        rotated: list = []  # the extra buffer sets timing cycles through, freed with the rest
        try:
            self._upload(args, buffers, reference, req.get("seed", 0), req.get("ref_id"))
            pointers = [int(b) for b in buffers]
            offsets = [_param_offsets(req, x) for x in launches]
            run_sequence = _sequence(calls, pointers, self._maps(launches, args, pointers), offsets)
            # the sets the timed runs cycle through, inputs copied before any run can touch them
            copies = rotation_copies(sum(a.nbytes for a in args), int(req.get("rotate_bytes", 0)))
            sequences = [run_sequence]
            if copies > 1:
                sizes = [a.nbytes for a in args]
                rotated.append(copy_sets(drv, sizes, pointers, copies - 1))
                sequences += [
                    _sequence(calls, p, self._maps(launches, args, p), offsets)
                    for p in set_pointers(sizes, rotated[-1], copies - 1)
                ]

            t1 = time.perf_counter()
            for arg, buf in zip(args, buffers, strict=True):
                if arg.is_output and arg.nbytes:
                    drv.memset_d8(int(buf), 0xFF, arg.nbytes)  # NaN for floats, -1 for ints
            run_sequence()
            drv.Context.synchronize()
            stray = stray_writes(drv, [a.name for a in args], buffers)
            if stray:
                raise _Failure(MeasureErrorKind.WRONG_ANSWER, stray)
            if req.get("check") and reference is not None:
                outputs = {}
                for arg, buf in zip(args, buffers, strict=True):
                    if arg.is_output:
                        host = np.empty(arg.shape, dtype=storage_dtype(arg.dtype))
                        drv.memcpy_dtoh(host, int(buf))
                        outputs[arg.name] = host
                message = compare_outputs(
                    outputs, reference, self.bounds.setdefault(req.get("ref_id"), {})
                )
                if message:
                    raise _Failure(MeasureErrorKind.WRONG_ANSWER, message)
            t2 = time.perf_counter()
            timing = self._time(_Rotation(sequences), len(calls), req)
            self.phases = {"load": t1 - t0, "check": t2 - t1, "time": time.perf_counter() - t2}
            self.stopped_early = timing.stopped_early
            return timing.costs
        finally:
            for buf in buffers + rotated:
                try:
                    buf.free()
                except Exception:
                    pass

    def _maps(self, launches: list[Launch], args: list[ArgSpec], pointers: list[int]) -> list:
        """Each launch's tensor maps encoded over the buffers at `pointers`."""
        if not any(x.tensor_maps for x in launches):
            return [[] for _ in launches]
        try:
            if self.encoder is None:
                self.encoder = load_tensor_map_driver()
            return [encode_launch_maps(self.encoder, x, args, pointers) for x in launches]
        except TensorMapError as exc:
            raise _Failure(MeasureErrorKind.INSTANTIATION_ERROR, f"tensor map: {exc}") from exc

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
        try:
            allow_clusters_pycuda(drv, func, launch)
        except Exception as exc:  # a driver or pycuda that refuses the opt-in
            raise _Failure(
                MeasureErrorKind.RESOURCE_LIMIT,
                f"{launch.kernel_name}: clusters of {launch.cluster_blocks} blocks need the "
                f"non-portable cluster size allowed, which failed: {exc}",
            ) from exc
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
            else:  # a scratch buffer between kernels: poison it like an output, or zero it
                if arg.nbytes:
                    self.drv.memset_d8(int(buf), 0 if arg.zeroed else 0xFF, arg.nbytes)
                continue
            if not data.size:
                continue
            if reference is None:
                self.drv.memcpy_htod(int(buf), data)
                continue
            if arg.name not in pristine:
                pristine[arg.name] = self.drv.mem_alloc(data.nbytes)
                self.drv.memcpy_htod(pristine[arg.name], data)
            self.drv.memcpy_dtod(int(buf), pristine[arg.name], data.nbytes)

    def _time(self, run, launches_per_run: int, req: dict) -> Timing:
        """Seconds per run of the launch sequence (`run(stream, k)` enqueues the k-th), one per
        repeat, as measure.timing_plan decides (stopping early at the request's `cost_bound`):
        from CUDA graph replays when the driver's graph API is usable and the request does not
        say `graphs: False`, else (flagged in `back_to_back`) from back-to-back launches."""
        settings = TimingSettings.from_request(req, run.sets)
        if self.graphs is not None and req.get("graphs", True):
            try:
                rotate_bytes = int(req.get("rotate_bytes", 0))
                return self._time_graph(run, launches_per_run, settings, rotate_bytes)
            except (GraphError, self.drv.Error) as exc:
                # A capture refused by the driver is no fault of the candidate. Should the
                # context be broken instead, the back-to-back launches below fail for real.
                if not self.graph_failures:
                    print(f"measure worker: timing back-to-back, not by graph: {exc}", flush=True)
                self.graph_failures += 1
        self.back_to_back = True
        return time_candidate(BackToBackTimer(self.drv, run), settings)

    def _time_graph(
        self, run, launches_per_run: int, settings: TimingSettings, rotate_bytes: int
    ) -> Timing:
        """Runs captured in a CUDA graph and replayed (measure.timers.GraphTimer), timed between
        events without the host's launch cost: the GPU time of the kernels."""
        assert self.graphs is not None
        if self.stream is None:
            self.stream = self.drv.Stream(_STREAM_NON_BLOCKING)
            self.side_stream = self.drv.Stream(_STREAM_NON_BLOCKING)
            self.settler = LaunchSettler(self.drv, self.device)
            self.lead_in = LeadIn(self.drv, self.device)
            if self.lead_in.error:
                print(f"measure worker: probes lead in by replay: {self.lead_in.error}", flush=True)
        assert self.settler is not None
        unsettled = self.settler.settle([None, self.side_stream, self.stream])
        if unsettled and not self.unsettled_said:
            print(f"measure worker: timing in an unsettled context: {unsettled}", flush=True)
            self.unsettled_said = True
        flush = rotate_bytes if run.sets > 1 else 0  # a probe's lead-in evicts rotated sets
        timer = GraphTimer(
            self.drv, self.graphs, self.stream, run, launches_per_run, self.lead_in, flush
        )
        try:
            return time_candidate(timer, settings)
        finally:
            timer.close()


def _param_offsets(req: dict, launch: Launch) -> list[int] | None:
    """Where the compiled kernel of a launch with tensor maps takes each parameter."""
    if not launch.tensor_maps:
        return None
    cubin = req.get("entry_cubins", {}).get(launch.kernel_name, req["cubin"])
    return kernel_param_offsets(bytes(cubin), launch.kernel_name)


def _sequence(calls, pointers: list[int], maps: list[list[bytes]], offsets=None):
    """A function launching the whole kernel sequence on a pycuda stream (None: the legacy
    default stream), asynchronously, with the least Python overhead; call i takes `pointers`,
    then its encoded tensor maps `maps[i]`, at the parameter offsets `offsets[i]` of its
    compiled kernel where given.

    The parameter buffers are packed once (`measure.tensor_map.pack_params`);
    `Function._launch_kernel` (pycuda's launch primitive, stable since 2011) takes them as they
    are. Without it, fall back to the public prepared call.
    """
    offsets = offsets or [None] * len(maps)
    params = [pack_params(pointers, m, o) for m, o in zip(maps, offsets, strict=True)]
    if all(hasattr(func, "_launch_kernel") for func, *_ in calls):

        def run_sequence(stream=None) -> None:
            for (func, grid, block, shared), buf in zip(calls, params, strict=True):
                func._launch_kernel(grid, block, buf, shared, stream)

        return run_sequence
    for (func, *_), m in zip(calls, maps, strict=True):
        func.prepare(param_format(len(pointers), len(m)))

    def run_prepared(stream=None) -> None:
        for (func, grid, block, shared), m in zip(calls, maps, strict=True):
            func.prepared_async_call(grid, block, stream, *pointers, *m, shared_size=shared)

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
