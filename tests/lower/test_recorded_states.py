"""States recorded by searches on the GPU (tests/recorded.py), lowered and run on the
interpreter at a small batch against numpy, with the tolerance the runner checked them with.

resnet50_b16_downsample_tf32: ResNet-50's downsample 1x1 convolution (64 -> 256 channels at
56x56) with its batch-norm scale and shift, TF32 mma.sync over an 8-step K loop fed by two
cp.async pipelines of 5 slots (the slots wrap: tiles 5-7 refill slots 0-2), the accumulators
stored to a shared tile laid over the operand tiles, and a float4 epilogue whose threads follow
the multiply's split (FFSP): every corner of that combination, in the program its record builds.
"""

from __future__ import annotations

import numpy as np

from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.interpreter import run_program
from autosched.lower.lowering import lower
from autosched.task.evaluate import evaluate
from measure.reference import compare_output, default_tolerance
from tests.recorded import recorded_task

DOWNSAMPLE = "resnet50_b16_downsample_tf32"
TF32_TOLERANCE = default_tolerance(["float32", "tf32"])  # what the runner checks a TF32 task with


def _run_and_compare(task, program) -> list[str]:
    """Run `program` on seeded uniform(-1, 1) inputs (outputs poisoned with NaN); the runner's
    messages for the outputs that differ from numpy (empty when all match)."""
    rng = np.random.default_rng(0)
    outputs = {b.name for b in program.outputs}
    arrays = {
        b.name: np.full(b.shape, np.nan, np.float32)
        if b.name in outputs
        else rng.uniform(-1, 1, b.shape).astype(np.float32)
        for b in program.params
    }
    dag = task.compute_dag
    expected = evaluate(dag, {t.name: arrays[t.name] for t in dag.tensors if t.name not in outputs})
    run_program(program, arrays)
    messages = [compare_output(n, arrays[n], expected[n], *TF32_TOLERANCE) for n in outputs]
    return [m for m in messages if m]


def test_the_downsample_state_pipelines_five_slots_and_computes_the_dag():
    task, state = recorded_task(DOWNSAMPLE, batch=1)
    program = device_program(lower(state, verify=True))
    (kernel,) = program.kernels
    operands = [b for b in kernel.allocs if b.scope == "shared" and b.async_copy]
    assert {b.shape[0] for b in operands} == {5} and len(operands) == 2
    waits = [s.pending for s in ir.iter_stmts(kernel.body) if isinstance(s, ir.AsyncWait)]
    assert waits == [3, 0]  # slots - 2 in the K loop, all of them before the epilogue tile
    assert kernel.shared_aliases  # the epilogue tile over the operand tiles
    assert _run_and_compare(task, program) == []


def test_a_wait_one_group_short_is_caught_on_the_downsample_state():
    """The check has teeth on this program: waiting for one group fewer computes tiles before
    their copies land (the wrapped slots still hold tiles four steps old)."""
    task, state = recorded_task(DOWNSAMPLE, batch=1)
    program = device_program(lower(state))
    for s in ir.iter_stmts(program.kernels[0].body):
        if isinstance(s, ir.AsyncWait) and s.pending:
            s.pending += 1
    assert _run_and_compare(task, program)
