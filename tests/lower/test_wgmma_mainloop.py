"""The Hopper mainloop order of a wgmma state with a cp.async pipeline of 3 or 4 slots
(`lower/wgmma_mainloop.py`): one group of wgmmas in flight across the next K step's barrier and
fetch, the fetch only into a slot no wgmma may still read. Sampled float16 / bfloat16 matmul and
batch_matmul states of one and of two warpgroups run on the CPU interpreter against numpy; the
same programs with the fetch moved before the wait that frees its slot fail in the interpreter
(`interpret_wgmma.AsyncReads`) and in the verifier (`verify_wgmma_order`).
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest

from autosched import te, topi
from autosched.errors import LoweringError
from autosched.lower import ir, wgmma_mainloop
from autosched.lower import verify_wgmma_order as vo
from autosched.lower import wgmma_ir as wi
from autosched.lower.interpreter import InterpreterError
from autosched.lower.ir_text import program_text
from autosched.lower.lowering import lower
from autosched.lower.verify import verify_program
from autosched.schedule.compute_dag import ComputeDAG
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz
from tests.lower.test_passes import programs_around
from tests.lower.test_warpgroup_mma import WGMMA_ONLY, sample
from tests.lower.wgmma_programs import wgmma_program


def matmul_dag(dtype: str) -> ComputeDAG:
    a = te.placeholder((128, 256), dtype, "A")
    b = te.placeholder((256, 128), dtype, "B")
    return ComputeDAG([a, b, topi.matmul(a, b, out_dtype="float32")])


def batch_matmul_dag() -> ComputeDAG:
    a = te.placeholder((2, 128, 256), "bfloat16", "A")
    b = te.placeholder((2, 64, 256), "bfloat16", "B")
    return ComputeDAG([a, b, topi.batch_matmul(a, b, out_dtype="float32")])


def main_loop(kernel: ir.Kernel) -> ir.For:
    """The K loop that keeps a wgmma group in flight."""
    return next(
        s
        for s in ir.iter_stmts(kernel.body)
        if isinstance(s, ir.For)
        and isinstance(s.body, ir.Seq)
        and any(isinstance(x, wi.WgmmaWait) and x.pending == 1 for x in s.body.stmts)
    )


def overlapped(dag: ComputeDAG, stages: int, warpgroups: int):
    """(state, program) of the first sampled wgmma state with `stages` slots, `warpgroups`
    warpgroups a block and the mainloop order, its tiles fetched by cp.async (TMA's loop is
    test_tma_fetch's)."""
    params = dataclasses.replace(
        WGMMA_ONLY, pipeline_stages=(stages,), operand_copies=("cp.async",)
    )
    for seed in range(4):
        sampler, _, drawn = sample(dag, params, n=4, seed=seed)
        for s in drawn:
            program = sampler.programs[s.key()]
            kernel = program.kernels[0]
            if kernel.block[1] == 4 * warpgroups and any(
                isinstance(x, wi.WgmmaWait) and x.pending == 1 for x in ir.iter_stmts(kernel.body)
            ):
                return s, program
    raise AssertionError(f"no sampled {stages}-stage state of {warpgroups} warpgroups")


def kinds(stmts) -> list[str]:
    return [type(s).__name__ for s in stmts]


@pytest.mark.parametrize(
    "make, stages",
    [
        (lambda: matmul_dag("float16"), 3),
        (lambda: matmul_dag("bfloat16"), 4),
        (batch_matmul_dag, 3),
    ],
)
def test_one_warpgroup_fetches_after_the_wait_and_computes_the_dag(make, stages):
    dag = make()
    _, program = overlapped(dag, stages, warpgroups=1)
    body = kinds(main_loop(program.kernels[0]).body.stmts)
    assert body[:3] == ["AsyncWait", "ProxyFence", "Barrier"]
    fetch_at = body.index("WgmmaWait") + 1
    assert "WgmmaCommit" in body[:fetch_at] and body[-1] == "AsyncCommit"
    assert fetch_at < len(body) - 1  # the fetch follows the wait that frees its slot
    tz.run_and_compare(dag, program)


@pytest.mark.parametrize(
    "make, stages", [(lambda: matmul_dag("float16"), 4), (batch_matmul_dag, 3)]
)
def test_two_warpgroups_fetch_a_step_later_and_compute_the_dag(make, stages):
    dag = make()
    _, program = overlapped(dag, stages, warpgroups=2)
    loop = main_loop(program.kernels[0])
    body = kinds(loop.body.stmts)
    assert body[:4] == ["AsyncWait", "ProxyFence", "Barrier", "IfThenElse"]
    assert loop.body.stmts[0].pending == stages - 3
    assert body[-2:] == ["WgmmaCommit", "WgmmaWait"]
    tz.run_and_compare(dag, program)


def test_a_fetch_before_the_wait_that_frees_its_slot_fails():
    dag = matmul_dag("float16")
    _, program = overlapped(dag, 3, warpgroups=1)
    loop = main_loop(program.kernels[0])
    stmts = loop.body.stmts
    at = next(i for i, s in enumerate(stmts) if isinstance(s, wi.WgmmaWait))
    stmts.append(stmts.pop(at))  # the wait after the fetch: it overwrites the slot in flight
    with pytest.raises(LoweringError, match="in flight"):
        verify_program(program)
    with pytest.raises(InterpreterError, match="a wgmma in flight reads it"):
        tz.run_and_compare(dag, program)


def test_two_warpgroups_fetching_after_their_own_wait_fail():
    """The one-warpgroup order in a block of two: a thread's wait says nothing of the other
    warpgroup's wgmmas until a barrier."""
    dag = matmul_dag("float16")
    state, _ = overlapped(dag, 3, warpgroups=2)
    with mock.patch.object(wgmma_mainloop, "fetches_after_the_wait", lambda block: True):
        with pytest.raises(LoweringError, match="another warpgroup"):
            lower(state, verify=True)
        program = lower(state, verify=False)
    with pytest.raises(InterpreterError, match="another warpgroup"):
        tz.run_and_compare(dag, program)


def test_the_plain_order_is_kept_without_a_deep_pipeline():
    dag = matmul_dag("float16")
    params = dataclasses.replace(WGMMA_ONLY, pipeline_stages=(2,), operand_copies=("cp.async",))
    sampler, _, drawn = sample(dag, params, n=4)
    for s in drawn:
        stmts = list(ir.iter_stmts(sampler.programs[s.key()].kernels[0].body))
        assert not any(isinstance(x, wi.WgmmaWait) and x.pending for x in stmts)
    assert drawn


@needs_nvcc
def test_the_mainloop_order_compiles_for_sm_90a_without_spills():
    from autosched import build

    dag = matmul_dag("float16")
    state, _ = overlapped(dag, 3, warpgroups=1)
    source = build(dag, state).source
    assert "wgmma.wait_group.sync.aligned 1;" in source
    (res,) = compile_resources(source, arch="sm_90").values()
    assert res.spill_bytes == 0


def test_the_verifier_refuses_a_copy_over_operands_never_waited_for():
    """The hand-built program without its wgmma.wait_group: each K step's copy overwrites the
    tiles the wgmmas of the steps before still read."""
    verify_program(wgmma_program(k=64, bk=16))
    with pytest.raises(LoweringError, match="in flight"):
        verify_program(wgmma_program(k=64, bk=16, wait=False))


def mainloop_recipe_state():
    """test_tensorize's recipe on a 128 x 128 x 128 float16 matmul, one warpgroup (4 warps
    along M, two 16-column tiles each) drawn as wgmma, its shared tiles in a 3-slot pipeline:
    4 K steps of two wgmmas each, issued by a serial loop (one group, chained)."""
    with mock.patch.multiple(tz, WARPS=(4, 1), REPS=(1, 2)):
        dag = tz.matmul_dag(n=128)
        state = tz.tensor_core_state(dag, "T_matmul", tz.MATMUL_TILES, "i", "j", "k")
    state = state.tensor_core_instruction("T_matmul.wmma.accumulator", "wgmma")
    for name in ("A.shared", "B.shared"):
        state = state.double_buffer(name).pipeline_stages(name, 3)
    return state


def test_the_mainloop_golden_computes_the_matmul(golden):
    state = mainloop_recipe_state()
    before, after = programs_around(state, "warpgroup_mma")
    text = f"# before warpgroup_mma\n{program_text(before)}\n# after\n{program_text(after)}\n"
    golden("pass_warpgroup_mma_mainloop.txt", text)
    verify_program(after, launch_limits=False)
    tz.run_and_compare(state.dag, lower(state))


def test_a_guarded_fetch_is_checked_element_by_element():
    """A fetch whose fused loop runs past its tile under a guard: bounded over its threads its
    elements reach into the next slot, which a wgmma reads; enumerated under the guard they do
    not (`verify_wgmma_order`), and the interpreter agrees."""
    dag = matmul_dag("float16")
    params = dataclasses.replace(WGMMA_ONLY, pipeline_stages=(3, 4), operand_copies=("cp.async",))
    for seed in range(4, 6):
        sampler, _, drawn = sample(dag, params, n=4, seed=seed)
        for s in drawn:
            kernel = sampler.programs[s.key()].kernels[0]
            with mock.patch.object(vo._OrderCheck, "exact_overlap", lambda *a: True):
                try:
                    vo.check_async_reads(kernel)
                except LoweringError:
                    pass
                else:
                    continue
            vo.check_async_reads(kernel)
            tz.run_and_compare(dag, sampler.programs[s.key()])
            return
    raise AssertionError("no sampled state whose fetch the bounds alone refuse")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "make, stages, warpgroups",
    [
        (lambda: matmul_dag("float16"), 3, 1),
        (lambda: matmul_dag("bfloat16"), 4, 1),
        (lambda: matmul_dag("float16"), 4, 2),
        (batch_matmul_dag, 3, 2),
    ],
)
def test_gpu_mainloop_states_match_numpy(make, stages, warpgroups):
    from tests.gpu.test_gpu_kernels import run_on_gpu

    dag = make()
    state, _ = overlapped(dag, stages, warpgroups)
    run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
