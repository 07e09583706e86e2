"""Run built kernels on the GPU in one long-lived, isolated worker process, and time them."""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import math
import time
from collections.abc import Mapping, Sequence

from measure.artifact import KernelArtifact
from measure.builder import BuildResult
from measure.errors import GPUUnavailableError, MeasureErrorKind
from measure.framing import (
    FrameEOF,
    FrameTimeout,
    ReadyWorker,
    WorkerStartError,
    start_ready_worker,
    write_frame,
)
from measure.reference import Reference
from measure.rotation import ROTATION_BYTES


@dataclasses.dataclass(frozen=True)
class RunResult:
    """Timing of one candidate: `costs` holds seconds per run of the launch sequence, one per
    repeat (empty on error); `stopped_early` when it was shown slower than the run's
    `cost_bound` before all its repeats (its costs are then the readings it had)."""

    costs: tuple[float, ...]
    error_kind: MeasureErrorKind = MeasureErrorKind.NO_ERROR
    error_msg: str = ""
    run_seconds: float = 0.0
    # the worker process died (killed, or crashed outside a CUDA call): no fault of the candidate
    # for sure, so a pool of runners retries it elsewhere
    worker_lost: bool = False
    stopped_early: bool = False

    @property
    def mean_cost(self) -> float:
        """Mean of `costs`, or inf on error."""
        if self.error_kind != MeasureErrorKind.NO_ERROR or not self.costs:
            return math.inf
        return sum(self.costs) / len(self.costs)

    def to_dict(self) -> dict:
        """Plain-dict form."""
        return {
            "costs": list(self.costs),
            "error_kind": int(self.error_kind),
            "error_msg": self.error_msg,
            "run_seconds": self.run_seconds,
            "worker_lost": self.worker_lost,
            "stopped_early": self.stopped_early,
        }

    @classmethod
    def from_dict(cls, data: dict) -> RunResult:
        """Inverse of `to_dict`."""
        return cls(
            tuple(data["costs"]),
            MeasureErrorKind(data["error_kind"]),
            data["error_msg"],
            data["run_seconds"],
            bool(data.get("worker_lost", False)),
            bool(data.get("stopped_early", False)),
        )


def gpu_available(device: int = 0) -> tuple[bool, str]:
    """(True, device description) when pycuda imports and sees CUDA device `device`, else
    (False, why not). Initialises the CUDA driver in this process (no context is created)."""
    try:
        import pycuda.driver as drv
    except Exception as exc:
        return False, f"pycuda is not importable ({type(exc).__name__}: {exc})"
    try:
        drv.init()
        count = drv.Device.count()
        if count <= device:
            return False, f"pycuda sees {count} CUDA device(s), device {device} does not exist"
        dev = drv.Device(device)
        major, minor = dev.compute_capability()
        return True, f"{dev.name()} (sm_{major}{minor})"
    except Exception as exc:
        return False, f"no usable CUDA device ({type(exc).__name__}: {exc})"


def _require_pycuda() -> None:
    if importlib.util.find_spec("pycuda") is None:
        raise GPUUnavailableError(
            "pycuda is not installed, so kernels cannot be run here: the runner needs pycuda and "
            "a CUDA GPU (pip install 'autosched[cuda]'); building with LocalBuilder needs only nvcc"
        )


class LocalRunner:
    """Times built kernels in a worker process that owns the CUDA context.

    Per candidate: load the cubin, upload the reference inputs, poison the outputs (0xFF bytes:
    NaN), run the launch sequence once and compare with the reference (if `check_correctness`),
    then time the GPU: `number` runs of the sequence are captured in a CUDA graph and its replay
    timed between CUDA events (cost = elapsed / number), `number` raised until a repeat lasts
    `min_repeat_ms`, `repeat` repeats in all. Graph replay carries no host launch cost, so a
    kernel of a few microseconds is timed as the GPU runs it, as benchmarks/timing.py
    times PyTorch's. Where the driver refuses graphs the worker times `number` back-to-back
    launches instead, bounded below by the host's launch rate (a few microseconds per launch);
    `graphs=False` asks for that method always; `back_to_back_timings` counts the candidates
    timed so. The defaults (3, 3, 5 ms) are tuned for search speed: two passes over the same
    random candidates rank them almost identically (repeat differences of a few tenths of a
    percent), while a longer
    `min_repeat_ms` costs proportionally more time per candidate. Raise them for final numbers.
    `run(..., cost_bound=s)` lets a candidate stop timing once a reading shows it slower than `s`
    seconds per run (measure.timing_plan): its result then has fewer repeats and says
    `stopped_early`; a candidate within the bound is timed exactly as without one.
    With `rotate_inputs` (the default) consecutive runs cycle through copies of the candidate's
    buffers spanning 128 MB (measure.rotation), so that every run reads its operands from
    memory as the benchmarks time kernels and as an operator meets them in a model, not from
    the L2 cache the previous run warmed; False times the same buffers every run.
    A CUDA error gives RUNTIME_ERROR and a fresh worker (the context may be corrupted); a
    candidate past `timeout` seconds gives RUN_TIMEOUT and the worker is killed (SIGKILL) and
    restarted.

    Raises GPUUnavailableError at construction without pycuda, and at the first run without a
    usable device. The worker starts lazily (or with `start()`); `close()` stops it.
    """

    def __init__(
        self,
        number: int = 3,
        repeat: int = 3,
        min_repeat_ms: float = 5.0,
        timeout: float = 10.0,
        cooldown_interval: float = 0.0,
        check_correctness: bool = True,
        device: int = 0,
        startup_timeout: float = 120.0,
        max_cached_references: int = 8,
        seed: int = 0,
        graphs: bool = True,
        rotate_inputs: bool = True,
    ) -> None:
        _require_pycuda()
        self.number = number
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms
        self.timeout = timeout
        self.cooldown_interval = cooldown_interval
        self.check_correctness = check_correctness
        self.device = device
        self.startup_timeout = startup_timeout
        self.max_cached_references = max(1, max_cached_references)
        self.seed = seed
        self.graphs = graphs
        self.rotate_inputs = rotate_inputs
        self.device_name: str | None = None
        self.worker_starts = 0
        self.back_to_back_timings = 0  # candidates timed without graphs (asked, or refused)
        self.early_stops = 0  # candidates whose timing stopped at their cost bound
        self._worker: ReadyWorker | None = None
        self._sent: collections.OrderedDict[str, Reference] = collections.OrderedDict()
        # Diagnostics: seconds spent per phase, summed over candidates (load = cubin, buffers and
        # inputs; check = first run and comparison; time = calibration and repeats; other =
        # transport and worker overhead).
        self.phase_seconds: dict[str, float] = {
            "load": 0.0,
            "check": 0.0,
            "time": 0.0,
            "other": 0.0,
        }

    # -- worker lifecycle --------------------------------------------------------------------

    def start(self) -> ReadyWorker:
        """Start the worker (if not running), wait for its CUDA context, and return it."""
        if self._worker is not None and self._worker.proc.poll() is None:
            return self._worker
        self._sent.clear()
        self.worker_starts += 1
        try:
            worker = start_ready_worker(
                self, "measure._worker", str(self.device), timeout=self.startup_timeout
            )
        except WorkerStartError as exc:
            self._stop_worker()
            if exc.replied:
                raise GPUUnavailableError(f"no usable CUDA device: {exc.detail}") from None
            raise GPUUnavailableError(
                f"the GPU worker process did not start: {exc.detail}"
            ) from None
        self._worker = worker
        hello = worker.hello
        self.device_name = f"{hello['device']} ({hello['arch']})"
        return worker

    def close(self) -> None:
        """Stop the worker politely (then by force)."""
        worker = self._worker
        if worker is None:
            return
        if worker.proc.poll() is None:
            try:
                write_frame(worker.stdin, {"op": "exit"})
                worker.proc.wait(timeout=5.0)
            except Exception:
                pass
        self._stop_worker()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.finalizer()  # SIGKILL if still alive, then reap
        self._worker = None
        self._sent.clear()

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        artifacts: Sequence[KernelArtifact],
        build_results: Sequence[BuildResult],
        references: Mapping[str, Reference] | None = None,
        cost_bound: float | None = None,
    ) -> list[RunResult]:
        """Run and time each built artifact, in order. A failed build is not run: its result
        carries the build's error. Every `reference_id` must be a key of `references`.
        `cost_bound` (seconds per run): stop timing a candidate shown slower than it."""
        if len(artifacts) != len(build_results):
            raise ValueError(f"{len(artifacts)} artifacts but {len(build_results)} build results")
        references = references or {}
        missing = {
            a.reference_id
            for a, b in zip(artifacts, build_results, strict=True)
            if b.ok and a.reference_id is not None and a.reference_id not in references
        }
        if missing:
            raise KeyError(f"no Reference given for reference_id(s) {sorted(missing)}")
        results = []
        for artifact, build in zip(artifacts, build_results, strict=True):
            if not build.ok or build.cubin is None:
                kind = build.error_kind if not build.ok else MeasureErrorKind.UNKNOWN
                results.append(RunResult((), kind, build.error_msg or "no cubin"))
                continue
            ref = references.get(artifact.reference_id) if artifact.reference_id else None
            results.append(
                self._run_one(artifact, build.cubin, ref, build.entry_cubins, cost_bound)
            )
        return results

    def _run_one(
        self,
        artifact: KernelArtifact,
        cubin: bytes,
        ref: Reference | None,
        entry_cubins: dict[str, bytes] | None = None,
        cost_bound: float | None = None,
    ) -> RunResult:
        worker = self.start()
        request = self._request(artifact, cubin, ref)
        if entry_cubins:  # entry functions compiled apart: the cubins `cubin` does not hold
            request["entry_cubins"] = entry_cubins
        if cost_bound is not None:
            request["cost_bound"] = float(cost_bound)
        started = time.monotonic()
        try:
            write_frame(worker.stdin, request)
            reply = worker.reader.read(started + self.timeout)
        except FrameTimeout:
            self._stop_worker()
            return RunResult(
                (),
                MeasureErrorKind.RUN_TIMEOUT,
                f"ran past the {self.timeout:g} s timeout; the worker was killed and restarted",
                time.monotonic() - started,
            )
        except (FrameEOF, BrokenPipeError, OSError) as exc:
            code = worker.proc.poll()
            self._stop_worker()
            return RunResult(
                (),
                MeasureErrorKind.RUNTIME_ERROR,
                f"the worker process died (exit code {code}, {type(exc).__name__}); restarted",
                time.monotonic() - started,
                worker_lost=True,
            )
        elapsed = time.monotonic() - started
        phases = reply.get("phases") or {}
        for name, seconds in phases.items():
            self.phase_seconds[name] = self.phase_seconds.get(name, 0.0) + seconds
        self.phase_seconds["other"] += elapsed - sum(phases.values())
        if reply.get("fatal"):
            self._stop_worker()
        if reply.get("timing") == "back-to-back":
            self.back_to_back_timings += 1
        if reply.get("stopped_early"):
            self.early_stops += 1
        return RunResult(
            tuple(float(c) for c in reply["costs"]),
            MeasureErrorKind(reply["error_kind"]),
            reply["error_msg"],
            elapsed,
            stopped_early=bool(reply.get("stopped_early", False)),
        )

    def _request(self, artifact: KernelArtifact, cubin: bytes, ref: Reference | None) -> dict:
        ref_id = artifact.reference_id if ref is not None else None
        payload, drop = None, []
        if ref is not None and ref_id is not None:
            if self._sent.get(ref_id) is not ref:  # new id, or the same id given a new object
                payload = ref.to_dict()
                self._sent[ref_id] = ref
            self._sent.move_to_end(ref_id)
            while len(self._sent) > self.max_cached_references:
                drop.append(self._sent.popitem(last=False)[0])
        return {
            "op": "run",
            "cubin": cubin,
            "launches": [x.to_dict() for x in artifact.launches],
            "args": [a.to_dict() for a in artifact.args],
            "ref_id": ref_id,
            "ref": payload,
            "drop_refs": drop,
            "check": self.check_correctness,
            "number": self.number,
            "repeat": self.repeat,
            "min_repeat_ms": self.min_repeat_ms,
            "cooldown": self.cooldown_interval,
            "seed": self.seed,
            "graphs": self.graphs,
            "rotate_bytes": ROTATION_BYTES if self.rotate_inputs else 0,
        }
