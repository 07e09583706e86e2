"""Measure on the GPUs of many hosts through a Dask `distributed` cluster (the `distributed`
extra: `pip install -e '.[distributed]'`).

The tuner is the cluster's client: it lowers and generates code as always (`ProgramMeasurer`),
and `DaskMeasureContext` stands in for `measure.LocalMeasureContext`. A batch is cut into chunks;
each chunk is a Dask task that asks for the resource `GPU` (a worker started with
`--resources GPU=1` and CUDA_VISIBLE_DEVICES set to its device runs one at a time), and the
worker builds and runs it with its own `LocalMeasureContext` (kept across tasks, so its runner
process and its copy of the reference live on). A task's reference is scattered to the
workers once. Results come back to the client, whose callbacks write the one record log.

A worker lost mid-round loses only the chunk it was running: the scheduler runs it again on
another worker (up to `distributed.scheduler.allowed-failures` times), and a chunk that still
cannot be measured, or is not done within `timeout`, comes back as failed candidates, never as
an exception of the search. Dask is imported only when a context is made; `import autosched`
never loads it.

Start a cluster (one worker per GPU):
    dask scheduler                                   # prints tcp://HOST:8786
    CUDA_VISIBLE_DEVICES=0 dask worker tcp://HOST:8786 --nthreads 1 --resources GPU=1
    CUDA_VISIBLE_DEVICES=1 dask worker tcp://HOST:8786 --nthreads 1 --resources GPU=1
then `autosched tune ... --scheduler tcp://HOST:8786`.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from measure import (
    GPUUnavailableError,
    KernelArtifact,
    MeasureContext,
    MeasureErrorKind,
    MeasureResult,
    Reference,
)

RESOURCE = "GPU"


@dataclasses.dataclass(frozen=True)
class WorkerSetup:
    """How a worker builds and runs: keyword arguments of its `LocalBuilder` and `LocalRunner`,
    or `context_factory()` making the whole context (tests pass a fake; it must be importable
    by the workers)."""

    builder_options: tuple[tuple[str, Any], ...] = ()
    runner_options: tuple[tuple[str, Any], ...] = ()
    context_factory: Callable[[], MeasureContext] | None = None

    def make_context(self) -> MeasureContext:
        """The worker's measure context."""
        if self.context_factory is not None:
            return self.context_factory()
        from measure import LocalBuilder, LocalMeasureContext, local_runner

        return LocalMeasureContext(
            LocalBuilder(**dict(self.builder_options)), local_runner(**dict(self.runner_options))
        )


# Per worker (keyed by its address, as workers of an in-process cluster share this module):
# its context and a lock, so that a worker with several threads measures one chunk at a time.
_CONTEXTS: dict[tuple[str, WorkerSetup], tuple[MeasureContext, threading.Lock]] = {}
_CONTEXTS_LOCK = threading.Lock()


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return "local"


def measure_chunk(
    artifacts: Sequence[KernelArtifact],
    references: Mapping[str, Reference],
    setup: WorkerSetup,
    cost_bound: float | None = None,
) -> list[MeasureResult]:
    """Build and run a chunk of candidates on this worker's GPU (the Dask task); `cost_bound`
    as `MeasureContext.measure_batch`'s."""
    key = (_worker_address(), setup)
    with _CONTEXTS_LOCK:
        if key not in _CONTEXTS:
            _CONTEXTS[key] = (setup.make_context(), threading.Lock())
        context, lock = _CONTEXTS[key]
    with lock:
        return context.measure_batch(artifacts, references, cost_bound)


def close_worker_contexts() -> int:
    """Close this process's worker contexts (their runner and compiler processes); how many."""
    with _CONTEXTS_LOCK:
        contexts = list(_CONTEXTS.values())
        _CONTEXTS.clear()
    for context, lock in contexts:
        with lock:
            close = getattr(context, "close", None)
            if close is not None:
                close()
    return len(contexts)


def _failed(kind: MeasureErrorKind, message: str) -> MeasureResult:
    return MeasureResult((), kind, message, 0.0, 0.0, {})


class DaskMeasureContext:
    """`measure_batch(artifacts, references)` on a Dask cluster's GPU workers.

    `cluster`: a `distributed.Client`, or a scheduler address (a client is made, and closed by
    `close()`). `chunk_size`: candidates per Dask task (default: a batch cut into two chunks per
    GPU worker, so that a fast worker takes more and a lost one loses little). `timeout`: seconds
    a batch may take; what is not measured by then comes back failed. `builder_options` /
    `runner_options`: keyword arguments of the workers' `LocalBuilder` / `LocalRunner` (for two
    workers on one 16-core host, `builder_options={"n_parallel": 7}` shares the cores).
    Thread-safe: the tasks of a model may measure through one context at once."""

    def __init__(
        self,
        cluster,
        *,
        chunk_size: int | None = None,
        timeout: float = 900.0,
        wait_for_workers: float = 60.0,
        builder_options: Mapping[str, object] | None = None,
        runner_options: Mapping[str, object] | None = None,
        context_factory: Callable[[], MeasureContext] | None = None,
    ) -> None:
        try:
            import distributed
        except ImportError as exc:
            raise GPUUnavailableError(
                "measuring on a Dask cluster needs the `distributed` extra: "
                f"pip install -e '.[distributed]' ({exc})"
            ) from None
        self._distributed = distributed
        self.owns_client = not isinstance(cluster, distributed.Client)
        self.client = distributed.Client(cluster) if self.owns_client else cluster
        self.chunk_size = chunk_size
        self.timeout = timeout
        self.wait_for_workers = wait_for_workers
        self.setup = WorkerSetup(
            tuple(sorted((builder_options or {}).items())),
            tuple(sorted((runner_options or {}).items())),
            context_factory,
        )
        self.timeline: list = []  # per-candidate times stay on the workers
        self.lost_chunks = 0  # chunks that came back failed (worker lost, error, timeout)
        self._refs: dict[str, tuple[Reference, object]] = {}
        self._lock = threading.Lock()

    def gpu_workers(self) -> int:
        """How many workers of the cluster offer the GPU resource now."""
        workers = self.client.scheduler_info(n_workers=-1)["workers"].values()
        return sum(1 for w in workers if w.get("resources", {}).get(RESOURCE, 0) >= 1)

    def gpu_count(self) -> int:
        """The cluster's GPU workers now, at least 1 (the measure context's parallelism)."""
        return max(1, self.gpu_workers())

    def _require_workers(self) -> int:
        deadline = time.monotonic() + self.wait_for_workers
        while True:
            n = self.gpu_workers()
            if n or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if not n:
            raise GPUUnavailableError(
                f"the Dask cluster at {getattr(self.client.scheduler, 'address', '?')} has no "
                f"worker with the "
                f"resource {RESOURCE} (start one per GPU: CUDA_VISIBLE_DEVICES=i dask worker "
                f"ADDRESS --nthreads 1 --resources {RESOURCE}=1)"
            )
        return n

    def _scattered(self, references: Mapping[str, Reference]) -> dict[str, object]:
        """Each reference scattered to every worker once (again when its object changes)."""
        out = {}
        with self._lock:
            for ref_id, ref in references.items():
                known = self._refs.get(ref_id)
                if known is None or known[0] is not ref:
                    future = self.client.scatter(ref, broadcast=True, hash=False)
                    self._refs[ref_id] = (ref, future)
                out[ref_id] = self._refs[ref_id][1]
        return out

    def measure_batch(
        self,
        artifacts: Sequence[KernelArtifact],
        references: Mapping[str, Reference] | None = None,
        cost_bound: float | None = None,
    ) -> list[MeasureResult]:
        """Build and run every artifact on the cluster; one result per artifact, in order.
        At most one chunk per GPU worker is in flight at a time (the next goes out when one
        comes back), so that a lost worker takes only the chunk it was given. `cost_bound`
        goes with every chunk (`MeasureContext.measure_batch`)."""
        if not artifacts:
            return []
        workers = self._require_workers()  # refused now, not after `timeout`, when none
        size = self.chunk_size or math.ceil(len(artifacts) / workers)
        waiting = [
            list(range(s, min(s + size, len(artifacts)))) for s in range(0, len(artifacts), size)
        ]
        refs = self._scattered(references or {})
        results: list[MeasureResult | None] = [None] * len(artifacts)
        in_flight: dict = {}
        done = self._distributed.as_completed(
            loop=self.client.loop, raise_errors=False, timeout=self.timeout
        )

        def send() -> None:
            while waiting and len(in_flight) < max(1, self.gpu_workers()):
                chunk = waiting.pop(0)
                future = self.client.submit(
                    measure_chunk,
                    [artifacts[i] for i in chunk],
                    refs,
                    self.setup,
                    cost_bound,
                    resources={RESOURCE: 1},
                    pure=False,
                )
                in_flight[future] = chunk
                done.add(future)

        send()
        while in_flight:
            try:
                future = done.next()  # the next chunk to come back
            except (StopIteration, self._distributed.TimeoutError):
                break
            self._collect(future, in_flight.pop(future), results)
            send()
        self.client.cancel(list(in_flight))
        for future, chunk in in_flight.items():
            self._collect(future, chunk, results)
        for chunk in waiting:
            for i in chunk:
                results[i] = _failed(
                    MeasureErrorKind.RUNTIME_ERROR,
                    f"not measured within the {self.timeout:g} s timeout",
                )
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def _collect(self, future, chunk: list[int], results: list) -> None:
        """Fill the chunk's results from its future, or fail them saying why."""
        why = f"not measured within the {self.timeout:g} s timeout ({future.status})"
        if future.status == "finished":
            try:
                measured = future.result()
            except Exception as exc:  # lost in transfer: the same as a failed chunk
                why = f"{type(exc).__name__}: {exc}"
            else:
                if len(measured) == len(chunk):
                    for i, m in zip(chunk, measured, strict=True):
                        results[i] = m
                    return
                why = f"{len(measured)} results for {len(chunk)} candidates"
        elif future.status == "error":
            error = future.exception()
            why = f"{type(error).__name__}: {error}"
        self.lost_chunks += 1
        for i in chunk:
            results[i] = _failed(MeasureErrorKind.RUNTIME_ERROR, f"lost on the cluster: {why}")

    def close(self) -> None:
        """Close the workers' contexts (their runner and compiler processes; a given client's
        workers too) and, when this context made it, the client. A cluster already gone or
        not answering in time leaves nothing to close."""
        import asyncio

        try:
            self.client.run(close_worker_contexts)
        except (OSError, asyncio.TimeoutError, self._distributed.TimeoutError):
            pass
        finally:
            if self.owns_client:
                self.client.close()

    def __enter__(self) -> DaskMeasureContext:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
