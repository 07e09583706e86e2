"""A builder and a runner paired: the one call autosched's search makes per batch."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import threading
import time
from collections.abc import Mapping, Sequence

from measure.artifact import KernelArtifact
from measure.builder import BuildResult, LocalBuilder
from measure.device_pool import RunnerPool, local_runner
from measure.errors import MeasureErrorKind
from measure.ptxas import KernelResources
from measure.reference import Reference
from measure.runner import LocalRunner, RunResult


@dataclasses.dataclass(frozen=True)
class MeasureResult:
    """Build and run outcome of one candidate. `costs` are seconds per run, one per repeat
    (fewer when `stopped_early`: its timing stopped at the batch's `cost_bound`)."""

    costs: tuple[float, ...]
    error_kind: MeasureErrorKind
    error_msg: str
    build_seconds: float
    run_seconds: float
    resources: dict[str, KernelResources]
    stopped_early: bool = False

    @property
    def mean_cost(self) -> float:
        """Mean of `costs` in seconds, or inf when the candidate failed."""
        if self.error_kind != MeasureErrorKind.NO_ERROR or not self.costs:
            return math.inf
        return sum(self.costs) / len(self.costs)

    @classmethod
    def combine(cls, build: BuildResult, run: RunResult | None) -> MeasureResult:
        """Merge a build result and (when it was run) its run result."""
        if run is None or not build.ok:
            return cls(
                (), build.error_kind, build.error_msg, build.build_seconds, 0.0, build.kernels
            )
        return cls(
            run.costs,
            run.error_kind,
            run.error_msg,
            build.build_seconds,
            run.run_seconds,
            build.kernels,
            run.stopped_early,
        )

    def to_dict(self) -> dict:
        """Plain-dict form (for records)."""
        return {
            "costs": list(self.costs),
            "error_kind": int(self.error_kind),
            "error_msg": self.error_msg,
            "build_seconds": self.build_seconds,
            "run_seconds": self.run_seconds,
            "resources": {k: v.to_dict() for k, v in self.resources.items()},
            "stopped_early": self.stopped_early,
        }

    @classmethod
    def from_dict(cls, data: dict) -> MeasureResult:
        """Inverse of `to_dict`."""
        return cls(
            tuple(data["costs"]),
            MeasureErrorKind(data["error_kind"]),
            data["error_msg"],
            data["build_seconds"],
            data["run_seconds"],
            {k: KernelResources.from_dict(v) for k, v in data.get("resources", {}).items()},
            bool(data.get("stopped_early", False)),
        )


@dataclasses.dataclass(frozen=True)
class BatchEvent:
    """When one candidate of the last batch was built and run, in seconds since the batch began
    (`run_end` None: not run). `LocalMeasureContext.timeline` holds one per candidate."""

    index: int
    build_start: float
    build_end: float
    run_start: float
    run_end: float | None


def _event(
    index: int, build: BuildResult, start: float, run_start: float | None, run_end: float | None
) -> BatchEvent:
    """The BatchEvent of one candidate from perf_counter times (`start`: the batch's); a
    candidate not run (`run_start` None) starts its run when its build ends."""
    built = build.finished_at - start
    return BatchEvent(
        index,
        built - build.build_seconds,
        built,
        built if run_start is None else run_start - start,
        None if run_end is None else run_end - start,
    )


class LocalMeasureContext:
    """Builds a batch in parallel and runs each candidate as soon as its build finishes, so that
    the GPU times kernels while nvcc still compiles the rest: a batch costs about the longer of
    the two, not their sum. A failed build is never run. With no arguments it makes a default
    `LocalBuilder()` and `local_runner(devices)` (which raises GPUUnavailableError without
    pycuda): this is where a measurer's `devices` are resolved. `timeline` says when each
    candidate of the last batch was built and run (`BatchEvent`; a run starts when its runner
    takes it, after any wait for a free GPU). The builder's compiler workers start in the
    background at once (`LocalBuilder.start_workers`), while the caller lowers its first batch.

    The default runner uses every visible GPU (`local_runner`; `devices` narrows it): with a
    `RunnerPool`, each built candidate goes to whichever GPU is free. One context may serve
    several threads at once (the tasks of a model tuned in parallel): a pool dispatches their
    candidates, a single runner runs one at a time."""

    def __init__(
        self,
        builder: LocalBuilder | None = None,
        runner: LocalRunner | RunnerPool | None = None,
        devices: Sequence[int] | None = None,
    ):
        self.builder = builder or LocalBuilder()
        self.runner = runner or local_runner(devices)
        self.timeline: list[BatchEvent] = []
        self._run_lock = threading.Lock()  # a single runner: one candidate at a time
        start_workers = getattr(self.builder, "start_workers", None)  # a test's builder has none
        if start_workers is not None:
            start_workers()

    def measure_batch(
        self,
        artifacts: Sequence[KernelArtifact],
        references: Mapping[str, Reference] | None = None,
        cost_bound: float | None = None,
    ) -> list[MeasureResult]:
        """Build and run every artifact; one result per artifact, in the artifacts' order.
        `cost_bound` (seconds per run): a candidate shown slower stops timing early."""
        references = references or {}
        if isinstance(self.runner, RunnerPool):
            return self._measure_on_pool(self.runner, artifacts, references, cost_bound)
        results: dict[int, MeasureResult] = {}
        start, timeline = time.perf_counter(), []
        for i, build in self.builder.build_as_completed(artifacts):
            run_start = run_end = None
            run = None
            if build.ok:
                with self._run_lock:
                    run_start = time.perf_counter()
                    run = self.runner.run([artifacts[i]], [build], references, cost_bound)[0]
                run_end = time.perf_counter()
            results[i] = MeasureResult.combine(build, run)
            timeline.append(_event(i, build, start, run_start, run_end))
        self.timeline = timeline
        return [results[i] for i in range(len(artifacts))]

    def _measure_on_pool(
        self,
        pool: RunnerPool,
        artifacts: Sequence[KernelArtifact],
        references,
        cost_bound: float | None,
    ) -> list[MeasureResult]:
        """`measure_batch` over several GPUs: each candidate is queued as soon as it is built
        and runs on the first free runner while the others compile and run."""
        start = time.perf_counter()
        timeline: list[BatchEvent] = []
        lock = threading.Lock()

        def run(i: int, build: BuildResult) -> RunResult:
            started: list[float] = []  # when a runner took it (each try; the first counts)
            result = pool.submit(
                artifacts[i],
                build,
                references,
                lambda: started.append(time.perf_counter()),
                cost_bound,
            ).result()
            end = time.perf_counter()
            with lock:
                timeline.append(_event(i, build, start, started[0] if started else end, end))
            return result

        builds: dict[int, BuildResult] = {}
        runs: dict[int, concurrent.futures.Future[RunResult]] = {}
        with concurrent.futures.ThreadPoolExecutor(len(pool.runners)) as waiters:
            for i, build in self.builder.build_as_completed(artifacts):
                builds[i] = build
                if build.ok:
                    runs[i] = waiters.submit(run, i, build)
                else:
                    with lock:
                        timeline.append(_event(i, build, start, None, None))
        results = [
            MeasureResult.combine(builds[i], runs[i].result() if i in runs else None)
            for i in range(len(artifacts))
        ]
        self.timeline = timeline
        return results

    def gpu_count(self) -> int:
        """The runners of a pool, 1 for a plain runner (it runs one candidate at a time)."""
        return len(self.runner.runners) if isinstance(self.runner, RunnerPool) else 1

    def close(self) -> None:
        """Stop the runner's worker and the builder's compiler workers."""
        self.runner.close()
        self.builder.close()

    def __enter__(self) -> LocalMeasureContext:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
