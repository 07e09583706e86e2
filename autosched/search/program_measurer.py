"""Measuring states: lower + codegen here (or in the search's worker processes), build + run in
measure/, results as records.

`ProgramMeasurer` is the GPU's `protocols.Measurer`: `measure(states) -> [MeasureRecordResult]`,
and after each call `last_times = {"build": s, "run": s}` (adding up to the call's wall-clock
time), with which auto_schedule splits the round's measuring time. The pipelined tuning loop
measures two batches at once, from two threads: `last_times` is then each thread's own call's,
and the callbacks see one batch at a time.

Where kernels are built and run is the measure context's business: `measure.LocalMeasureContext`
(this host, every visible GPU by default) or `autosched.search.distributed.DaskMeasureContext`
(workers of a Dask cluster, one per GPU). Both take the same artifacts and references and give
the same results, so the records and callbacks stay here, on the tuner's host.

The measurer knows its task's best cost so far, and asks the context to stop timing a candidate
once it shows slower than `early_stop_factor` times that (`MeasureContext.measure_batch`'s
`cost_bound`): a search needs a slow candidate's rank, not its fourth digit, and the best kernel
and every candidate within the factor are still timed in full.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autosched.records import MeasureInput, MeasureRecordResult, now
from autosched.task.evaluate import evaluate
from measure import (
    LocalBuilder,
    LocalMeasureContext,
    LocalRunner,
    MeasureErrorKind,
    RunnerPool,
    default_tolerance,
    make_reference,
)

if TYPE_CHECKING:
    from autosched.schedule.loop_state import State
    from autosched.search.protocols import MeasureCallback
    from autosched.search.workers import Workers
    from autosched.task.search_task import SearchTask
    from measure import MeasureContext, Reference

# the tolerance dtype of each task option that loosens a kernel's arithmetic
TF32_TOLERANCE_DTYPE = "tf32"
# A candidate shown slower than this times the task's best so far stops timing early. Its
# probe, already a reading of a millisecond or more, ranks it well enough for the search; the
# candidates that could become the best are timed in full. In a steady search about half of a
# batch is that much slower than the best, so timing them in full would spend half the GPU's
# time on readings the search does not need.
EARLY_STOP_FACTOR = 1.2


def task_reference(task, args, seed: int = 0):
    """Seeded random inputs and the naive evaluator's outputs for a task's kernel arguments;
    tolerances by the outputs' dtypes, loosened to TF32's for a task that allows it.

    Only the arguments that are the DAG's tensors enter the reference. A multi-kernel
    program's global temporaries (a split-K sketch's partial sums, shaped by its number of
    parts) are scratch that the runner poisons: were they reference inputs, one sketch's
    temporary would fix a shape that every other sketch's candidates then fail on."""
    dag = task.compute_dag
    tensors = {t.name for t in dag.tensors}
    args = [a for a in args if a.name in tensors]
    out_names = {a.name for a in args if a.is_output}

    def fn(**inputs):
        given = {t.name: inputs[t.name] for t in dag.tensors if t.name not in out_names}
        got = evaluate(dag, given)
        return {n: got[n] for n in out_names}

    return make_reference(args, fn, seed=seed, **_option_tolerance(task, args))


def _option_tolerance(task, args) -> dict:
    """{rtol, atol} for a task whose options loosen its arithmetic (TF32); {} for the
    defaults of the output dtypes."""
    if not getattr(task, "allow_tf32", False):
        return {}
    dtypes = [a.dtype for a in args if a.is_output] + [TF32_TOLERANCE_DTYPE]
    rtol, atol = default_tolerance(dtypes)
    return {"rtol": rtol, "atol": atol}


def _local_workers(task):
    from autosched.search.workers import TaskContext, Workers

    return Workers(TaskContext(task.compute_dag, task.hardware_params), None, 1)


class ProgramMeasurer:
    """Measures batches of States for one task, calling `callbacks(inputs, results)` after each.
    `workers` (a workers.Workers, e.g. the policy's) lowers and generates the sources,
    in its process pool when it has one. `devices` picks this host's GPUs (default: all);
    `context` replaces the local context (one shared by several tasks, or a distributed one):
    this measurer then leaves it open at `close()`, for its owner to close.
    `early_stop_factor`: a candidate shown slower than this times the best cost measured so far
    (`best_cost`) stops timing with the readings it has (its record says `stopped_early`);
    None times every candidate in full."""

    def __init__(
        self,
        task: SearchTask,
        builder: LocalBuilder | None = None,
        runner: LocalRunner | RunnerPool | None = None,
        callbacks: Sequence[MeasureCallback] = (),
        workers: Workers | None = None,
        *,
        devices: Sequence[int] | None = None,
        context: MeasureContext | None = None,
        early_stop_factor: float | None = EARLY_STOP_FACTOR,
    ) -> None:
        from autosched.checks import optional_number

        self.early_stop_factor = optional_number("early_stop_factor", early_stop_factor, 1.0)
        self.best_cost = math.inf  # the fastest mean cost this measurer measured, seconds
        self.task = task
        self.owns_context = context is None
        self.context: MeasureContext = context or LocalMeasureContext(
            builder, runner, devices=devices
        )
        self.callbacks = list(callbacks)
        self.workers = workers
        self.reference: Reference | None = None
        self.time = {"codegen": 0.0, "build": 0.0, "run": 0.0}  # totals, wall-clock
        self._calls = threading.local()  # each measuring thread's last call's times
        self._lock = threading.Lock()  # the reference, totals, best cost and callbacks

    @property
    def last_times(self) -> dict[str, float]:
        """The build / run split of this thread's last `measure` call's wall-clock seconds."""
        return getattr(self._calls, "times", {"build": 0.0, "run": 0.0})

    def measure(self, states: Sequence[State]) -> list[MeasureRecordResult]:
        """Build and run every state; one result per state, in order (never raises for one).
        Two threads may measure at once (see the module docstring)."""
        t0 = time.perf_counter()
        if self.workers is None:
            self.workers = _local_workers(self.task)
        tags = [s.fingerprint() for s in states]
        built = self.workers.build([s.key() for s in states], tags)
        results: list[MeasureRecordResult | None] = [None] * len(states)
        artifacts, slots = [], []
        for i, b in enumerate(built):
            if isinstance(b, str):
                results[i] = MeasureRecordResult(
                    (), int(MeasureErrorKind.INSTANTIATION_ERROR), b, timestamp=now()
                )
                continue
            with self._lock:
                if self.reference is None:
                    self.reference = task_reference(self.task, b.args)
            artifacts.append(b)
            slots.append(i)
        codegen = time.perf_counter() - t0
        run = 0.0
        if artifacts and self.reference is not None:  # made from the first built artifact
            measured = self.context.measure_batch(
                artifacts, {self.task.workload_key: self.reference}, self.cost_bound()
            )
            # the runners' seconds (each candidate's own) per GPU, as the GPUs run side by side;
            # the rest of the wall time waits for the compilers
            run = sum(m.run_seconds for m in measured) / max(1, self.context.gpu_count())
            for i, m in zip(slots, measured, strict=True):
                results[i] = MeasureRecordResult(
                    tuple(m.costs),
                    int(m.error_kind),
                    m.error_msg or "",
                    m.build_seconds,
                    m.run_seconds,
                    now(),
                    m.stopped_early,
                )
                with self._lock:
                    self.best_cost = min(self.best_cost, m.mean_cost)
        wall = time.perf_counter() - t0
        self._calls.times = {"build": wall - run, "run": run}
        finished = [r for r in results if r is not None]
        assert len(finished) == len(states), "every state is either refused or measured"
        dag = self.task.compute_dag.serialized()
        inputs = [MeasureInput(self.task.workload_key, s.key(), dag=dag) for s in states]
        with self._lock:
            self.time["codegen"] += codegen
            self.time["build"] += wall - run
            self.time["run"] += run
            for cb in self.callbacks:
                cb(inputs, finished)
        return finished

    def cost_bound(self) -> float | None:
        """Seconds per run past which a candidate of the next batch stops timing early: the
        best so far times `early_stop_factor`; None before a first success or when off."""
        if self.early_stop_factor is None or not math.isfinite(self.best_cost):
            return None
        return self.best_cost * self.early_stop_factor

    def close(self) -> None:
        """Close the measure context, unless it was given (a shared one)."""
        if self.owns_context:
            self.context.close()
