"""Measuring states: lower + codegen here, build + run in measure/, results as records."""

from __future__ import annotations

import time
from typing import Callable, Sequence

from measure import LocalBuilder, LocalMeasureContext, LocalRunner, MeasureErrorKind, make_reference

from .build_module import build
from .evaluate import evaluate
from .records import MeasureInput, MeasureRecordResult, now


def task_reference(task, args, seed: int = 0):
    """Seeded random inputs and the naive evaluator's outputs for a task's kernel arguments."""
    dag = task.compute_dag
    out_names = {a.name for a in args if a.is_output}

    def fn(**inputs):
        got = evaluate(dag, {t.name: inputs[t.name] for t in dag.tensors if t.name not in out_names})
        return {n: got[n] for n in out_names}

    return make_reference(args, fn, seed=seed)


class ProgramMeasurer:
    """Measures batches of States for one task, calling `callbacks(inputs, results)` after each."""

    def __init__(self, task, builder: LocalBuilder | None = None, runner: LocalRunner | None = None,
                 callbacks: Sequence[Callable] = ()) -> None:
        self.task = task
        self.context = LocalMeasureContext(builder or LocalBuilder(), runner or LocalRunner())
        self.callbacks = list(callbacks)
        self.reference = None
        self.time = {"lower": 0.0, "build": 0.0, "run": 0.0}

    def measure(self, states: Sequence) -> list[MeasureRecordResult]:
        t0 = time.perf_counter()
        artifacts, slots, results = [], [], [None] * len(states)
        for i, s in enumerate(states):
            try:
                kernel = build(self.task.compute_dag, s)
            except Exception as exc:  # a state that cannot be lowered costs one failed record
                results[i] = MeasureRecordResult((), int(MeasureErrorKind.INSTANTIATION_ERROR),
                                                 f"{type(exc).__name__}: {exc}", timestamp=now())
                continue
            if self.reference is None:
                self.reference = task_reference(self.task, kernel.args)
            artifacts.append(kernel.artifact(reference_id=self.task.workload_key, tag=s.fingerprint()))
            slots.append(i)
        self.time["lower"] += time.perf_counter() - t0
        if artifacts:
            measured = self.context.measure_batch(artifacts, {self.task.workload_key: self.reference})
            for i, m in zip(slots, measured):
                self.time["build"] += m.build_seconds
                self.time["run"] += m.run_seconds
                results[i] = MeasureRecordResult(tuple(m.costs), int(m.error_kind), m.error_msg or "",
                                                 m.build_seconds, m.run_seconds, now())
        inputs = [MeasureInput(self.task.workload_key, tuple(st.to_record() for st in s.steps)) for s in states]
        for cb in self.callbacks:
            cb(inputs, results)
        return results

    def close(self) -> None:
        self.context.close()
