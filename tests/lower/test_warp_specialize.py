"""Warp-specialised TMA -> wgmma pipelines (`lower/warp_specialize.py`): a producer warpgroup
issues the copies, the consumer warpgroups wait, multiply and release each slot through an
"empty" mbarrier, with no block barrier in the mainloop. The device programs run on the CPU
interpreter (the roles interleaved, `lower/interpret_roles.py`) against numpy: an fp16 matmul
past M's edge, a bf16 batch_matmul, a 3x3 conv through TMA im2col and a cast epilogue laid over
the slots; a broken protocol fails in the interpreter and the verifier; 4096^3 states compile
for sm_90a without spills (`-m slow`) and a `gpu`-marked test runs one on the device."""

from __future__ import annotations

import dataclasses
import re
from unittest import mock

import pytest

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower import warp_roles_ir as wr
from autosched.lower.interpreter import InterpreterError
from autosched.lower.lowering import lower
from autosched.lower.passes import device_program
from autosched.lower.verify import verify_program
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz
from tests.lower.test_tma_fetch import batch_matmul_dag, matmul_dag, recipe_state


def warp_specialized(state):
    """`state` with its wgmma accumulator stage warp-specialised."""
    (acc,) = [
        st.name
        for st in state.stages
        if st.scope == "wmma.accumulator" and st.tensor_core_instruction == "wgmma"
    ]
    return state.warp_specialize(acc)


def device(state) -> ir.Program:
    return device_program(lower(state), verify=True)


def split_of(program: ir.Program) -> ir.IfThenElse:
    (split,) = [s for s in ir.iter_stmts(program.kernels[0].body) if wr.role_split(s)]
    assert isinstance(split, ir.IfThenElse)
    return split


def loops(branch: ir.Stmt) -> list[ir.For]:
    return [s for s in ir.iter_stmts(branch) if isinstance(s, ir.For) and _waits(s)]


def _waits(s: ir.For) -> bool:
    body = s.body.stmts if isinstance(s.body, ir.Seq) else [s.body]
    return isinstance(body[0], ti.MbarrierWait)


def two_warpgroups(dag, slots: int):
    """test_tensorize's recipe as wgmma over two warpgroups (8 warps along M: 128 x 64
    blocks), its tiles TMA-fed over `slots` slots."""
    out = dag.tensors[-1].op.name
    tiles = {"A": ("ax0", "ax1"), "B": ("ax0", "ax1")}
    with mock.patch.multiple(tz, WARPS=(8, 1), REPS=(1, 4), K_SPLIT=(4, 16)):
        state = tz.tensor_core_state(dag, out, tiles, "i", "j", "k")
    state = state.tensor_core_instruction(f"{out}.wmma.accumulator", "wgmma")
    for name in ("A.shared", "B.shared"):
        state = state.double_buffer(name).pipeline_stages(name, slots).operand_copy(name, "tma")
    return state


@pytest.mark.parametrize(
    "make, slots, consumers",
    [
        (lambda: recipe_state(matmul_dag(160, 128, 192), 3), 3, 1),  # M past the last tile
        (lambda: recipe_state(batch_matmul_dag(), 3), 3, 1),
        (lambda: two_warpgroups(matmul_dag(128, 64, 256), 3), 3, 2),
    ],
)
def test_warp_specialized_states_compute_the_dag(make, slots, consumers):
    state = make()
    dag = state.dag
    program = device(warp_specialized(state))
    kernel = program.kernels[0]
    assert kernel.block == (32, 4 * consumers + 4, 1)
    producer, consumer, threads = wr.role_split(split_of(program))
    assert threads == 128 * consumers
    assert wr.role_of(producer).regs == wr.PRODUCER_REGISTERS
    assert wr.role_of(consumer).regs == wr.consumer_registers(threads)
    (issue,) = loops(producer)
    (main,) = loops(consumer)
    # the producer waits for an empty slot, then issues; the consumers wait for a full one,
    # multiply, retire the step before and release its slot: no block barrier
    assert [type(s).__name__ for s in issue.body.stmts[:2]] == ["MbarrierWait", "MbarrierExpectTx"]
    assert not any(isinstance(s, ir.Barrier) for s in ir.iter_stmts(main))
    assert any(isinstance(s, wr.MbarrierArrive) for s in ir.iter_stmts(main))
    assert not any(
        isinstance(s, (ti.TmaLoad, ti.MbarrierExpectTx)) for s in ir.iter_stmts(consumer)
    )
    tz.run_and_compare(dag, program)


def test_the_analysis_program_keeps_the_pipeline_it_replaces():
    """Features read the analysis program: the mark changes only the device program, and the
    features only in the column that reads the kernel's mark."""
    from autosched.features.extract import FEATURE_NAMES, extract_features
    from autosched.lower.ir_text import program_text

    state = recipe_state(matmul_dag(128, 128, 256), 3)
    marked = lower(warp_specialized(state))
    assert program_text(marked) == program_text(lower(state))
    plain, specialised = extract_features(lower(state)), extract_features(marked)
    column = FEATURE_NAMES.index("warp_specialized")
    assert (plain[:, column] == 0).all() and (specialised[:, column] > 0).all()
    others = [i for i in range(len(FEATURE_NAMES)) if i != column]
    assert (plain[:, others] == specialised[:, others]).all()
    assert not wr.uses_warp_roles(device(state).kernels[0])


def test_a_3x3_conv_through_tma_im2col_computes_the_conv():
    from tests.lower.test_tma_im2col import im2col_copies, sampled_conv

    dag, _, state = sampled_conv(1)
    program = device(warp_specialized(state))
    assert im2col_copies(program) and wr.uses_warp_roles(program.kernels[0])
    tz.run_and_compare(dag, program)


def test_the_cast_epilogue_stays_laid_over_the_slots():
    """matmul_fp16's float32 tile over the slots (a sampled TMA state): the consumers' named
    barrier after their last wait separates them; the verifier proves it again on the device
    program, the interpreter fails a copy no wait made visible."""
    from autosched.sketch import SketchSampler, generate_sketches
    from autosched.sketch.utils import SketchParams
    from measure.hardware import HardwareParams
    from tests.sketch.test_warpgroup_tile import matmul_dag as cast_matmul_dag

    dag = cast_matmul_dag(128, 128, 512, cast=True)
    hw = HardwareParams()
    params = SketchParams(
        tensor_core_instructions=("wgmma",), operand_copies=("tma",), pipeline_stages=(3,)
    )
    params = dataclasses.replace(params, warp_specializations=(True,))
    sampler = SketchSampler(generate_sketches(dag, hw, params), hw, params)
    program = next(
        device_program(sampler.programs[s.key()], verify=True)
        for s in sampler.sample(4, 0)
        if any(st.warp_specialized for st in s.stages)
    )
    kernel = program.kernels[0]
    assert kernel.shared_aliases and wr.uses_warp_roles(kernel)
    assert any(isinstance(s, wr.NamedBarrier) for s in ir.iter_stmts(kernel.body))
    tz.run_and_compare(dag, program)


def _broken(program: ir.Program, how: str) -> ir.Program:
    """`program` with one step of the protocol broken."""
    producer, consumer, _ = wr.role_split(split_of(program))
    (issue,) = loops(producer)
    (main,) = loops(consumer)
    if how == "refill before release":  # the producer waits on no empty slot
        issue.body = ir.Seq(list(issue.body.stmts[1:]))
    elif how == "read before full":  # the consumers wait on no full slot
        main.body = ir.Seq(list(main.body.stmts[1:]))
    elif how == "release in flight":  # step k releases its own slot, its wgmmas in flight
        *steps, guarded = main.body.stmts
        (release,) = [s for s in ir.iter_stmts(guarded) if isinstance(s, wr.MbarrierArrive)]
        wait = main.body.stmts[0]
        assert isinstance(wait, ti.MbarrierWait)
        main.body = ir.Seq([*steps, wr.MbarrierArrive(release.bars, wait.slot)])
    return program


@pytest.mark.parametrize(
    "how, error",
    [
        ("refill before release", "overwrites A_shared"),
        ("read before full", "before waiting on the mbarrier"),
        ("release in flight", "a wgmma in flight reads it"),
    ],
)
def test_a_broken_protocol_fails_in_the_interpreter(how, error):
    dag = matmul_dag(64, 64, 384)
    program = _broken(device(warp_specialized(recipe_state(dag, 2))), how)
    with pytest.raises(InterpreterError, match=error):
        tz.run_and_compare(dag, program)


def test_the_verifier_refuses_a_block_barrier_in_a_role_and_a_wrong_arrival_count():
    program = device(warp_specialized(recipe_state(matmul_dag(64, 64, 192), 3)))
    _, consumer, _ = wr.role_split(split_of(program))
    (main,) = loops(consumer)
    main.body = ir.Seq([*main.body.stmts, ir.Barrier()])
    with pytest.raises(LoweringError, match="consumer warp role"):
        verify_program(program, launch_limits=False)
    program = device(warp_specialized(recipe_state(matmul_dag(64, 64, 192), 3)))
    kernel = program.kernels[0]
    inits = [s for s in ir.iter_stmts(kernel.body) if isinstance(s, ti.MbarrierInit)]
    inits[-1].count = 2
    with pytest.raises(LoweringError, match="arrivals"):
        verify_program(program, launch_limits=False)


def test_the_cuda_splits_the_block_and_sets_the_registers():
    from autosched import build

    dag = matmul_dag(160, 128, 192)
    source = build(dag, warp_specialized(recipe_state(dag, 3))).source
    assert "__launch_bounds__(256, 1)" in source
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in source
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in source
    assert "mbarrier.arrive.shared::cta.b64" in source and "bar.sync 1, 128;" in source
    assert "__syncthreads();" in source  # once, after the mbarriers' init
    assert source.count("__syncthreads();") == 1


# the fast 4096^3 configurations: (M, N and K split lengths, slots), as test_operand_copy
FAST = [
    pytest.param(((8, 1, 16), (1, 16, 16), (4, 16)), 3, id="128x256, 3 slots"),
    pytest.param(((8, 1, 16), (1, 8, 16), (4, 16)), 4, id="128x128, 4 slots"),
]


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("lengths, slots", FAST)
def test_the_fast_configurations_compile_warp_specialized_for_sm_90a_without_spills(
    request, lengths, slots
):
    """128x256 over 3 slots and 128x128 over 4 at 4096^3, warp-specialised: 384 threads, the
    consumers at 232 registers, no spills (nvcc 13.0 reports 168, the count at entry)."""
    from autosched import build
    from measure import compile_resources
    from tests.sketch.test_operand_copy import matmul_dag as sampled_matmul_dag
    from tests.sketch.test_operand_copy import with_tiles

    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("compiling 4096^3 kernels takes seconds; run with -m slow")
    dag = sampled_matmul_dag(4096, 4096, 4096)
    state, _ = with_tiles(dag, lengths, slots)
    source = build(dag, warp_specialized(state)).source
    assert "__launch_bounds__(384, 1)" in source
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32 232;", source)
    (res,) = compile_resources(source, arch="sm_90").values()
    assert res.spill_bytes == 0, res


@pytest.mark.gpu
@pytest.mark.parametrize(
    "make, slots", [(lambda: matmul_dag(160, 128, 192), 3), (batch_matmul_dag, 3)]
)
def test_gpu_warp_specialized_states_match_numpy(make, slots):
    from tests.gpu.test_gpu_kernels import run_on_gpu

    dag = make()
    state = warp_specialized(recipe_state(dag, slots))
    kernel = run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
    assert "setmaxnreg" in kernel.source


def test_a_block_with_no_room_for_the_producer_keeps_its_pipeline():
    """The producer warpgroup adds 128 threads: a block of consumers that leaves no room for
    them within 1024 threads keeps today's form instead of becoming unlaunchable."""
    from autosched.lower.passes import DEVICE_PASSES, run_passes
    from autosched.lower.warp_specialize import warp_specialize

    state = warp_specialized(two_warpgroups(matmul_dag(128, 64, 256), 3))
    before = run_passes(lower(state), DEVICE_PASSES[:-1]).kernels[0]
    assert DEVICE_PASSES[-1].name == "warp_specialize"
    assert warp_specialize(before).block == (32, 12, 1)  # two consumer warpgroups, a producer
    full = dataclasses.replace(before, block=(32, 32, 1))  # 1024 consumer threads
    assert warp_specialize(full) is full
    room = dataclasses.replace(before, block=(32, 28, 1))  # 896 + 128 = 1024
    assert warp_specialize(room).block == (32, 32, 1)
