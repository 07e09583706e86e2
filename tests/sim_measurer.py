"""A TEST-ONLY measurer: runs each state's lowered program in the CPU interpreter, checks it
against numpy, and returns a deterministic cost computed from the program (never the default;
it stands in for the GPU so the search mechanics can be tested in CI)."""

from __future__ import annotations

import math

import numpy as np

from autosched.evaluate import evaluate
from autosched.interpreter import run_program
from autosched.lowering import lower
from autosched.records import MeasureInput, MeasureRecordResult, now
from measure import MeasureErrorKind


def simulated_cost(program) -> float:
    """Seconds from a crude roofline of the program: more parallel threads, more reuse -> faster."""
    cost = 0.0
    for k in program.kernels:
        threads = k.grid[0] * k.grid[1] * k.grid[2] * k.threads_per_block
        cost += 1e-6 * (1 + 4096 / max(1, threads)) * (1 + 64 / max(1, k.threads_per_block))
        cost += 1e-9 * k.shared_bytes
    return cost


class SimulatedMeasurer:
    def __init__(self, task, callbacks=()):
        self.task = task
        self.callbacks = list(callbacks)
        self.count = 0
        self.fingerprints: list[str] = []

    def measure(self, states):
        dag = self.task.compute_dag
        results = []
        for s in states:
            self.fingerprints.append(s.fingerprint())
            self.count += 1
            try:
                program = lower(s)
                rng = np.random.default_rng(0)
                outs = {b.name for b in program.outputs}
                arrays = {
                    b.name: (
                        np.full(b.shape, np.nan, b.dtype)
                        if b.name in outs
                        else rng.uniform(-1, 1, b.shape).astype(b.dtype)
                    )
                    for b in program.params
                }
                expected = evaluate(
                    dag, {t.name: arrays[t.name] for t in dag.tensors if t.name not in outs}
                )
                run_program(program, arrays)
                ok = all(np.allclose(arrays[n], expected[n], rtol=1e-4, atol=1e-5) for n in outs)
                if ok:
                    c = simulated_cost(program)
                    results.append(MeasureRecordResult((c, c), 0, "", 0.0, 0.0, now()))
                else:
                    results.append(
                        MeasureRecordResult(
                            (), int(MeasureErrorKind.WRONG_ANSWER), "mismatch", timestamp=now()
                        )
                    )
            except Exception as exc:
                results.append(
                    MeasureRecordResult(
                        (), int(MeasureErrorKind.INSTANTIATION_ERROR), str(exc), timestamp=now()
                    )
                )
        inputs = [
            MeasureInput(self.task.workload_key, tuple(st.to_record() for st in s.steps))
            for s in states
        ]
        for cb in self.callbacks:
            cb(inputs, results)
        return results
