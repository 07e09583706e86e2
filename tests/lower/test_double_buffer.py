"""Double buffering (lower/double_buffer.py) and its asynchronous copies (codegen/async_copy.py):
the step, the loop lowering emits (two slots, one barrier per iteration, the next tile fetched
ahead), the CPU interpreter's result against numpy, the printed cp.async and its waits, and
the init rule that draws it."""

from __future__ import annotations

import random
import re

import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import ScheduleError
from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.lowering import lower
from autosched.schedule.steps import print_python_schedule
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.init_rules import DoubleBuffer, InitContext
from autosched.sketch.utils import SketchParams
from autosched.task.evaluate import evaluate
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.interpreter_check import assert_half_outputs_match, half_inputs, lower_and_compare
from tests.sketch.test_tensor_core_sketch import tc_dag
from tests.workloads_for_tests import matmul_dag, matmul_shared_state

CACHES = ("A.shared", "B.shared")


def double_buffered(state, caches=CACHES):
    for name in caches:
        state = state.double_buffer(name)
    return state


def reduction_loop(kernel: ir.Kernel) -> ir.For:
    """The loop whose body holds the barrier (the shared caches' attach loop)."""
    return next(
        s
        for s in ir.iter_stmts(kernel.body)
        if isinstance(s, ir.For)
        and any(isinstance(c, ir.Barrier) for c in getattr(s.body, "stmts", ()))
    )


def test_the_loop_fetches_the_next_tile_into_the_other_slot():
    dag = matmul_dag()
    plain, state = matmul_shared_state(dag), double_buffered(matmul_shared_state(dag))
    before, after = lower(plain).kernels[0], lower(state, verify=True).kernels[0]
    shared = {b.name: b for b in after.allocs if b.scope == "shared"}
    old = {b.name: b for b in before.allocs if b.scope == "shared"}
    for name, b in shared.items():
        assert b.shape == (2, *old[name].shape) and b.async_copy and not old[name].async_copy
    loop = reduction_loop(after)
    barriers = [s for s in ir.iter_stmts(loop.body) if isinstance(s, ir.Barrier)]
    assert len(barriers) == 1 and loop.body.stmts[0] is barriers[0]
    ahead = loop.body.stmts[1]
    assert isinstance(ahead, ir.IfThenElse) and f"{loop.var.name} + 1" in str(ahead.cond)
    # a barrier after the loop, none left between fetch and compute
    count = sum(isinstance(s, ir.Barrier) for s in ir.iter_stmts(after.body))
    assert count == 2 < sum(isinstance(s, ir.Barrier) for s in ir.iter_stmts(before.body)) + 1


@pytest.mark.parametrize("vectors", [(2, 1), (1, 4)])
def test_double_buffered_matmul_equals_numpy(vectors):
    dag = matmul_dag()
    lower_and_compare(dag, double_buffered(matmul_shared_state(dag, vectors=vectors)))


def test_step_is_printed_recorded_and_checked():
    dag = matmul_dag()
    state = double_buffered(matmul_shared_state(dag))
    text = print_python_schedule(state)
    assert "s[A_shared].double_buffer()" in text and "s[B_shared].double_buffer()" in text
    assert state.steps[-1].to_record() == ("DB", state.stage_index("B.shared"))
    with pytest.raises(ScheduleError, match=r"double_buffer on 'C.local'.*only a shared stage"):
        state.double_buffer("C.local")


def test_a_loop_that_runs_once_keeps_one_buffer():
    dag = matmul_dag(64, 64, 8)  # k_o_o has extent 1
    state = double_buffered(matmul_shared_state(dag, tiles=_one_k_tile()))
    kernel = lower(state, verify=True).kernels[0]
    assert all(len(b.shape) == 2 and not b.async_copy for b in kernel.allocs if b.scope == "shared")
    lower_and_compare(dag, state)


def _one_k_tile():
    from tests.workloads_for_tests import MATMUL_TILES

    return {**MATMUL_TILES, "k": (4, 2)}


def test_cp_async_is_printed_and_waited_for_before_every_barrier():
    dag = matmul_dag()
    source = codegen_program(
        device_program(lower(double_buffered(matmul_shared_state(dag, vectors=(1, 4)))))
    )
    assert "as_cp_async_16(&B_shared[" in source and "as_cp_async_4(&A_shared[" in source
    lines = [line.strip() for line in source.splitlines()]
    barriers = [k for k, line in enumerate(lines) if line == "__syncthreads();"]
    assert barriers and all(lines[k - 1] == "as_cp_async_wait_all();" for k in barriers)
    plain = codegen_program(device_program(lower(matmul_shared_state(dag))))
    assert "cp_async" not in plain
    # the copy's shared address through the intrinsic ptxas knows, not an inline cvta asm
    # (through which ptxas let a later load overwrite the address before the copy read it)
    assert "__cvta_generic_to_shared(p)" in source and "cvta.to.shared" not in source


@needs_nvcc
def test_cp_async_compiles_for_sm90_and_falls_back_below_sm80():
    from measure.compiler import compile_kernel

    dag = matmul_dag()
    source = codegen_program(
        device_program(lower(double_buffered(matmul_shared_state(dag, vectors=(1, 4)))))
    )
    for arch in ("sm_90", "sm_75"):
        kind, message, cubin, resources = compile_kernel(source, arch)
        assert cubin is not None, f"{arch}: {message}"
        assert not any(r.spill_bytes for r in resources.values())


def test_tensor_core_state_double_buffered_equals_numpy():
    dag = tc_dag("matmul_fp16", args=(32, 32, 128))  # K long enough for several tiles
    params = SketchParams(double_buffer_probability=1.0)
    sampler = SketchSampler(generate_sketches(dag), params=params)
    inputs = half_inputs(dag)
    expected = evaluate(dag, inputs)
    tensorized = [
        s
        for s in sampler.sample(6, 3)
        if any(it.annotation == "tensorize" for st in s.stages for it in st.iters)
    ]
    assert tensorized
    checked = 0
    for state in tensorized[:3]:
        assert all(st.double_buffer for st in state.stages if st.scope == "shared")
        program = sampler.programs[state.key()]
        if not any(b.async_copy for k in program.kernels for b in k.allocs):
            continue  # one K tile: nothing to fetch ahead
        checked += 1
        assert_half_outputs_match(dag, program, inputs, expected)
        assert re.search(r"as_cp_async_(8|16)\(", codegen_program(device_program(program)))
    assert checked


@pytest.mark.parametrize("probability", [0.0, 1.0])
def test_the_rule_marks_every_cache_of_a_loop_or_none(probability):
    dag = matmul_dag()
    state = matmul_shared_state(dag)
    ctx = InitContext(SketchParams(double_buffer_probability=probability), HardwareParams())
    got = DoubleBuffer().apply(ctx, None, state, random.Random(0))
    marks = [st.double_buffer for st in got.stages if st.scope == "shared"]
    assert marks == [bool(probability)] * 2


def test_a_kernel_with_no_asynchronous_copy_still_defines_its_wait():
    """A double-buffered buffer whose stores are not plain copies (here a scaled value) prints
    plain stores, and the wait before its barriers still has its definition."""
    from autosched.te.expr import BinOp, Const, Load

    src = ir.Buffer("A", (64,), "float32")
    out = ir.Buffer("B", (64,), "float32")
    tile = ir.Buffer("T", (2, 64), "float32", "shared", async_copy=True)
    tx = ir.THREAD_VARS["threadIdx.x"]
    body = ir.seq(
        [
            ir.Store(tile, tx, BinOp("*", Load(src, (tx,)), Const(2.0, "float32"), "float32")),
            ir.Barrier(),
            ir.Store(out, tx, Load(tile, (tx,))),
        ]
    )
    kernel = ir.Kernel("k", (1, 1, 1), (64, 1, 1), [tile], body)
    source = codegen_program(ir.Program([kernel], [src, out], [out]))
    assert "as_cp_async_wait_all();" in source and "void as_cp_async_wait_all()" in source
    assert "as_cp_async_4(&" not in source  # no copy of its own to issue
