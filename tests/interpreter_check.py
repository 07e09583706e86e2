"""Running sampled states' programs on the CPU interpreter against the numpy evaluation of their
DAG; shared by the sketch and cross-thread tests."""

from __future__ import annotations

import numpy as np

from autosched.lower.interpreter import run_program
from autosched.schedule.steps import print_python_schedule
from autosched.te.tensor import PlaceholderOp


def random_inputs(dag, seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform(-1, 1) arrays for the DAG's placeholders."""
    rng = np.random.default_rng(seed)
    return {
        t.name: rng.uniform(-1, 1, t.shape).astype(t.dtype)
        for t in dag.tensors
        if isinstance(t.op, PlaceholderOp)
    }


def assert_matches_dag(dag, program, state, inputs, expected) -> None:
    """Run `program` (of `state`) on copies of `inputs`, outputs poisoned with NaN, and compare
    every DAG output with `expected` (from `evaluate`); the failure shows the schedule."""
    arrays = {k: v.copy() for k, v in inputs.items()}
    for b in program.outputs:
        arrays[b.name] = np.full(b.shape, np.nan, np.float32)
    run_program(program, arrays)
    for op in dag.outputs:
        np.testing.assert_allclose(
            arrays[op.name],
            expected[op.name],
            rtol=1e-4,
            atol=1e-5,
            err_msg=print_python_schedule(state),
        )


__all__ = ["assert_matches_dag", "random_inputs"]
