"""A TEST-ONLY measurer: runs each state's lowered program in the CPU interpreter, checks it
against numpy, and returns a deterministic cost computed from the program (never the default;
it stands in for the GPU so the search mechanics can be tested in CI)."""

from __future__ import annotations

import threading
import time

import numpy as np

from autosched.lower.interpreter import run_program
from autosched.lower.lowering import lower
from autosched.records import MeasureInput, MeasureRecordResult, now
from autosched.task.evaluate import evaluate
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
    """Measures by interpreting; `last_times` splits a call into build (lowering) and run (each
    thread's own call's: the pipelined loop measures two batches at once)."""

    def __init__(self, task, callbacks=()):
        self.task = task
        self.callbacks = list(callbacks)
        self.count = 0
        self.fingerprints: list[str] = []
        self._calls = threading.local()
        self._counting = threading.Lock()  # two measuring threads count into one tally

    @property
    def last_times(self) -> dict[str, float]:
        return getattr(self._calls, "times", {"build": 0.0, "run": 0.0})

    def measure(self, states):
        """Every state lowered, interpreted and costed in turn."""
        results = []
        self._calls.times = {"build": 0.0, "run": 0.0}
        for s in states:
            with self._counting:
                self.fingerprints.append(s.fingerprint())
                self.count += 1
            results.append(self.measure_one(s))
        dag = self.task.compute_dag.serialized()  # as ProgramMeasurer's records carry it
        inputs = [MeasureInput(self.task.workload_key, s.key(), dag=dag) for s in states]
        for cb in self.callbacks:
            cb(inputs, results)
        return results

    def close(self) -> None:
        """Nothing to release: the interpreter runs in this process."""

    def measure_one(self, state):
        """Lower (timed as build), interpret and check (timed as run), cost the program."""
        t0 = time.perf_counter()
        try:
            program = lower(state)
        except Exception as exc:
            return self._failed(MeasureErrorKind.INSTANTIATION_ERROR, str(exc))
        finally:
            self.last_times["build"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            ok = self.check(program)
        except Exception as exc:
            return self._failed(MeasureErrorKind.RUNTIME_ERROR, str(exc))
        finally:
            self.last_times["run"] += time.perf_counter() - t0
        if not ok:
            return self._failed(MeasureErrorKind.WRONG_ANSWER, "mismatch")
        c = simulated_cost(program)
        return MeasureRecordResult((c, c), 0, "", 0.0, 0.0, now())

    def check(self, program) -> bool:
        """Run the program in the interpreter on seeded inputs and compare with numpy."""
        dag = self.task.compute_dag
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
        given = {t.name: arrays[t.name] for t in dag.tensors if t.name not in outs}
        expected = evaluate(dag, given)
        run_program(program, arrays)
        return all(np.allclose(arrays[n], expected[n], rtol=1e-4, atol=1e-5) for n in outs)

    @staticmethod
    def _failed(kind, msg: str) -> MeasureRecordResult:
        return MeasureRecordResult((), int(kind), msg, timestamp=now())
