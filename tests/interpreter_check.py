"""Running lowered programs on the CPU interpreter against the numpy evaluation of their DAG;
shared by the lowering, sketch, cross-thread, vthread and serialisation tests."""

from __future__ import annotations

import numpy as np

from autosched.lower.interpreter import run_program
from autosched.lower.lowering import lower
from autosched.schedule.steps import print_python_schedule
from autosched.task.evaluate import evaluate
from autosched.te.dtype import from_storage, to_storage
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
        if np.allclose(arrays[op.name], expected[op.name], rtol=1e-4, atol=1e-5):
            continue
        np.testing.assert_allclose(
            arrays[op.name],
            expected[op.name],
            rtol=1e-4,
            atol=1e-5,
            err_msg=print_python_schedule(state),
        )


def interpret_and_compare(dag, program, seed: int = 0, rtol: float = 1e-4):
    """Run `program` (lowered from a state of `dag`) on the CPU interpreter: its inputs drawn
    uniform(-1, 1) in parameter order, its outputs poisoned with NaN; compare every output with
    the numpy evaluation of the DAG. Returns the program."""
    rng = np.random.default_rng(seed)
    outputs = {b.name for b in program.outputs}
    arrays = {
        b.name: (
            np.full(b.shape, np.nan, b.dtype)
            if b.name in outputs
            else rng.uniform(-1, 1, b.shape).astype(b.dtype)
        )
        for b in program.params
        if b not in program.temps
    }
    expected = evaluate(dag, {t.name: arrays[t.name] for t in dag.tensors if t.name not in outputs})
    run_program(program, arrays)
    for name in outputs:
        np.testing.assert_allclose(arrays[name], expected[name], rtol=rtol, atol=1e-5)
    return program


def lower_and_compare(dag, state, seed: int = 0, rtol: float = 1e-4):
    """`interpret_and_compare` on the program `lower(state)`; returns it."""
    return interpret_and_compare(dag, lower(state), seed, rtol)


class InterpretedSamples:
    """States sampled from the sketches of a suite workload at its reduced size (REDUCED in
    workloads_for_tests.py), each one's program run on the interpreter against numpy.

    `get(name, n, seed)` returns [(state, program)] of the first `n` states. Sampling is
    prefix-stable (the first n states of a sample of m > n are the sample of n), so within a
    session a sample checked once answers every smaller one of the same seed, and a larger one
    interprets only the states it adds."""

    def __init__(self) -> None:
        self._checked: dict[tuple[str, int], list] = {}

    def get(self, name: str, n: int, seed: int) -> list:
        from autosched.sketch import SketchSampler, generate_sketches
        from tests.workloads_for_tests import suite_dag

        done = self._checked.get((name, seed), [])
        if len(done) >= n:
            return done[:n]
        dag = suite_dag(name, reduced=True)
        sampler = SketchSampler(generate_sketches(dag))
        states = sampler.sample(n, seed)
        assert len(states) == n, (name, len(states), sampler.rejected)
        inputs = random_inputs(dag)
        expected = evaluate(dag.tensors, inputs)
        out = []
        for i, state in enumerate(states):
            program = sampler.programs[state.key()]
            if i >= len(done) or done[i][0].key() != state.key():
                assert_matches_dag(dag, program, state, inputs, expected)
            out.append((state, program))
        self._checked[(name, seed)] = out
        return out


def half_inputs(dag, seed: int = 0) -> dict[str, np.ndarray]:
    """Uniform(-1, 1) arrays for the DAG's placeholders in their storage dtypes (float16, or
    bfloat16 as uint16 bits)."""
    rng = np.random.default_rng(seed)
    return {
        t.name: to_storage(rng.uniform(-1, 1, t.shape), t.dtype)
        for t in dag.tensors
        if isinstance(t.op, PlaceholderOp)
    }


def assert_half_outputs_match(dag, program, inputs, expected, tol: float = 1e-2) -> None:
    """Run `program` on copies of `inputs` (outputs zeroed) and compare every DAG output with
    `expected` as float32 values: fp32 sums in another order, then one rounding to the half
    type, so half precision's tolerance."""
    arrays = {k: v.copy() for k, v in inputs.items()}
    for b in program.outputs:
        arrays[b.name] = np.zeros(b.shape, expected[b.name].dtype)
    run_program(program, arrays)
    for op in dag.outputs:
        dtype = op.output(0).dtype
        got = from_storage(arrays[op.name], dtype).astype(np.float32)
        want = from_storage(expected[op.name], dtype).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


__all__ = [
    "assert_half_outputs_match",
    "half_inputs",
    "InterpretedSamples",
    "assert_matches_dag",
    "interpret_and_compare",
    "lower_and_compare",
    "random_inputs",
]
