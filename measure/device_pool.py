"""Run built kernels on every GPU of this host: one runner (one worker process) per device.

A `RunnerPool` holds one runner per device, each pinned to its device and holding its own
copies of the references. A candidate goes to whichever runner is free, so a batch is timed by
all GPUs at once while the builders (shared, one `LocalBuilder`) keep compiling. The pool has
the runner's interface (`run`, `start`, `close`), plus `submit` for one candidate at a time.

Timings from different GPUs enter one search, so they must be comparable: the pool refuses
devices of different models (`DeviceMismatchError`), and `time_on_each` times one kernel on
every device (the benchmark and a GPU test check that they agree within 3%).

A runner whose worker process dies (not a kernel's CUDA error: the process itself, killed or
crashed) is restarted at its next candidate (`LocalRunner` does so lazily), and the candidate it
lost is retried once, on another runner when there is one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence

from measure.artifact import KernelArtifact
from measure.builder import BuildResult
from measure.errors import DeviceMismatchError, GPUUnavailableError, MeasureErrorKind
from measure.reference import Reference
from measure.runner import LocalRunner, RunResult


def visible_devices() -> list[int]:
    """Indices of the CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies); [0] when
    pycuda cannot count them (the runner then reports why there is no GPU)."""
    try:
        import pycuda.driver as drv

        drv.init()
        count = drv.Device.count()
    except Exception:
        return [0]
    return list(range(count)) or [0]


def local_runner(devices: Sequence[int] | None = None, **options):
    """The default runner: a `LocalRunner` for one device, a `RunnerPool` over several.
    `devices` None means every visible device; `options` go to each `LocalRunner`."""
    chosen = list(visible_devices() if devices is None else devices)
    if not chosen:
        raise ValueError("devices is empty: name at least one CUDA device")
    if len(chosen) == 1:
        return LocalRunner(device=chosen[0], **options)
    return RunnerPool.for_devices(chosen, **options)


class RunnerPool:
    """Dispatches candidates to several runners (anything with `run(artifacts, builds,
    references)`; `start()`, `close()` and `device_name` used when present), one candidate per
    runner at a time, each to whichever runner is free. Thread-safe: several batches (of
    different tasks) may be submitted at once. `check_models` refuses runners whose devices are
    of different models, at `start()` (called by the first `submit`)."""

    def __init__(self, runners: Sequence, check_models: bool = True) -> None:
        if not runners:
            raise ValueError("a RunnerPool needs at least one runner")
        self.runners = list(runners)
        self.check_models = check_models
        self.retries = 0  # candidates retried after their runner's worker died
        self.per_runner = [0] * len(self.runners)  # candidates each runner ran
        self._idle = set(range(len(self.runners)))
        self._lost: set[int] = set()  # runners whose device cannot be used any more
        self._cond = threading.Condition()
        self._start_lock = threading.Lock()
        self._started = False
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    @classmethod
    def for_devices(cls, devices: Sequence[int], **options) -> RunnerPool:
        """One `LocalRunner(device=d, **options)` per device."""
        if len(set(devices)) != len(devices):
            raise ValueError(f"devices {list(devices)} name a device twice")
        return cls([LocalRunner(device=d, **options) for d in devices])

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start every runner (in parallel: each waits for its CUDA context), then check that
        their devices are one model. Raises DeviceMismatchError, or GPUUnavailableError."""
        with self._start_lock:
            if self._started:
                return
            starters = [r for r in self.runners if hasattr(r, "start")]
            if starters:
                with concurrent.futures.ThreadPoolExecutor(len(starters)) as pool:
                    for done in [pool.submit(r.start) for r in starters]:
                        done.result()
            if self.check_models:
                check_same_model(self.runners)
            self._executor = concurrent.futures.ThreadPoolExecutor(
                len(self.runners), thread_name_prefix="gpu-runner"
            )
            self._started = True

    def close(self) -> None:
        """Stop the dispatch threads and every runner's worker (they restart if used again)."""
        with self._start_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            self._started = False
        for runner in self.runners:
            close = getattr(runner, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> RunnerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what the runners report, summed -----------------------------------------------------

    @property
    def device_name(self) -> str | None:
        """The devices' model (one, `start` checked it), with their count."""
        names = [getattr(r, "device_name", None) for r in self.runners]
        if names[0] is None:
            return None
        return f"{len(names)} x {names[0]}"

    @property
    def worker_starts(self) -> int:
        return sum(getattr(r, "worker_starts", 0) for r in self.runners)

    @property
    def back_to_back_timings(self) -> int:
        return sum(getattr(r, "back_to_back_timings", 0) for r in self.runners)

    @property
    def early_stops(self) -> int:
        return sum(getattr(r, "early_stops", 0) for r in self.runners)

    @property
    def phase_seconds(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for r in self.runners:
            for name, seconds in getattr(r, "phase_seconds", {}).items():
                total[name] = total.get(name, 0.0) + seconds
        return total

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        artifacts: Sequence[KernelArtifact],
        build_results: Sequence[BuildResult],
        references: Mapping[str, Reference] | None = None,
        cost_bound: float | None = None,
    ) -> list[RunResult]:
        """Run and time each built artifact on whichever runner is free; results in order.
        `cost_bound`: as `LocalRunner.run`'s."""
        if len(artifacts) != len(build_results):
            raise ValueError(f"{len(artifacts)} artifacts but {len(build_results)} build results")
        futures = [
            self.submit(a, b, references, cost_bound=cost_bound)
            for a, b in zip(artifacts, build_results, strict=True)
        ]
        return [f.result() for f in futures]

    def submit(
        self,
        artifact: KernelArtifact,
        build: BuildResult,
        references: Mapping[str, Reference] | None = None,
        on_start: Callable[[], object] | None = None,
        cost_bound: float | None = None,
    ) -> concurrent.futures.Future[RunResult]:
        """Queue one candidate; its future gives its RunResult (never an error of the
        candidate's; GPUUnavailableError when no runner can be used any more). `on_start()` is
        called when a runner takes the candidate (after its wait for a free one), at each try.
        `cost_bound`: as `LocalRunner.run`'s."""
        self.start()
        assert self._executor is not None
        return self._executor.submit(
            self._run_one, artifact, build, references or {}, on_start or _nothing, cost_bound
        )

    def time_on_each(
        self,
        artifact: KernelArtifact,
        build: BuildResult,
        references: Mapping[str, Reference] | None = None,
    ) -> list[RunResult]:
        """Run one kernel on every runner in turn (one result per runner, in order): how the
        devices' timings of the same kernel compare. Raises GPUUnavailableError when a runner
        cannot use its GPU any more."""
        self.start()
        results = []
        for i, runner in enumerate(self.runners):
            self._take(only=i)
            try:
                results.append(runner.run([artifact], [build], references or {})[0])
            finally:
                self._give_back(i)
        return results

    def _run_one(self, artifact, build, references, on_start, cost_bound) -> RunResult:
        if not build.ok or build.cubin is None:  # nothing to run: no runner needed
            on_start()
            return self.runners[0].run([artifact], [build], references, cost_bound)[0]
        first, result = self._attempt(artifact, build, references, None, on_start, cost_bound)
        if not result.worker_lost:
            return result
        with self._cond:
            self.retries += 1
        where, again = self._attempt(artifact, build, references, first, on_start, cost_bound)
        if again.error_kind == MeasureErrorKind.NO_ERROR:
            return again
        note = f" (retried on runner {where} after runner {first}'s worker died)"
        return dataclasses.replace(again, error_msg=again.error_msg + note)

    def _attempt(
        self, artifact, build, references, avoid: int | None, on_start, cost_bound=None
    ) -> tuple[int, RunResult]:
        """(runner index, result) of one try on a free runner (not `avoid` when another can be
        used). A runner whose device cannot be used any more leaves the rotation, and the
        candidate goes to another."""
        while True:
            i = self._take(avoid=avoid)
            try:
                on_start()
                result = self.runners[i].run([artifact], [build], references, cost_bound)[0]
            except GPUUnavailableError:
                with self._cond:
                    self._lost.add(i)
                    self._idle.discard(i)
                    live = len(self.runners) - len(self._lost)
                    self._cond.notify_all()
                if not live:
                    raise
                continue
            except BaseException:
                self._give_back(i)
                raise
            self.per_runner[i] += 1
            self._give_back(i)
            return i, result

    def _take(self, avoid: int | None = None, only: int | None = None) -> int:
        """Wait for a free runner (runner `only`, or any but `avoid` while another is usable)."""
        with self._cond:
            while True:
                if len(self._lost) == len(self.runners):
                    raise GPUUnavailableError("no runner of the pool can use its GPU any more")
                if only is not None and only in self._lost:
                    device = getattr(self.runners[only], "device", only)
                    raise GPUUnavailableError(
                        f"runner {only} (device {device}) of the pool cannot use its GPU any more"
                    )
                usable = len(self.runners) - len(self._lost)
                if only is not None:
                    choices = {only} & self._idle
                elif avoid is not None and usable > 1:
                    choices = self._idle - {avoid}
                else:
                    choices = set(self._idle)
                if choices:
                    i = min(choices)
                    self._idle.discard(i)
                    return i
                self._cond.wait()

    def _give_back(self, i: int) -> None:
        with self._cond:
            if i not in self._lost:
                self._idle.add(i)
            self._cond.notify_all()


def _nothing() -> None:
    pass


def check_same_model(runners: Sequence) -> None:
    """Raise DeviceMismatchError unless every started runner reports the same device model:
    timings of one search must come from one kind of GPU."""
    names = [getattr(r, "device_name", None) for r in runners]
    known = {n for n in names if n is not None}
    if len(known) > 1:
        listing = ", ".join(
            f"device {getattr(r, 'device', i)}: {n}"
            for i, (r, n) in enumerate(zip(runners, names, strict=True))
        )
        raise DeviceMismatchError(
            f"the GPUs are of different models ({listing}); timings from one search must come "
            "from one model: choose devices of one model (devices=[...], or --devices)"
        )
