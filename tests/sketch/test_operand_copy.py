"""The `OperandCopy` init rule and its mutation (sketch/operand_copy.py,
search/tensor_core_mutations.py): TMA drawn for a wgmma stage's shared tiles only where listed,
on Hopper and where it fits the tiles; the sampled TMA states compute the product on the
interpreter; the annotation round-trips through the records and the Python schedule; the
mutation switches it and keeps the records a fresh sample would have."""

from __future__ import annotations

import dataclasses
import json
import random
from types import SimpleNamespace

import pytest

from autosched import te, topi
from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower import wgmma_ir as wi
from autosched.lower.lowering import lower
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.loop_state import State
from autosched.schedule.steps import (
    OperandCopyStep,
    PipelineStagesStep,
    SplitStep,
    Step,
    replay,
)
from autosched.search.mutations import MutationContext, TensorCoreChoices
from autosched.search.tensor_core_mutations import OperandCopyMutation
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.fragment_double_buffer import group_lengths
from autosched.sketch.operand_copy import tma_fits
from autosched.sketch.pipeline_stages import group_draw, pipelined_bytes
from autosched.sketch.tensor_core_init import (
    MAX_BLOCK_TILES,
    MAX_TILES_PER_WARP,
    fragment_register_budget,
    fragment_registers,
)
from autosched.sketch.tensor_core_instruction import warpgroup_tiles
from autosched.sketch.utils import SketchParams
from measure import compile_resources
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz

TMA_ONLY = SketchParams(
    tensor_core_instructions=("wgmma",), operand_copies=("tma",), warp_specializations=(False,)
)
OC = OperandCopyStep.TAG


def matmul_dag(m: int, n: int, k: int) -> ComputeDAG:
    a = te.placeholder((m, k), "float16", "A")
    b = te.placeholder((k, n), "float16", "B")
    return ComputeDAG([a, b, topi.matmul(a, b, out_dtype="float32")])


def batch_matmul_dag() -> ComputeDAG:
    a = te.placeholder((2, 64, 256), "bfloat16", "A")
    b = te.placeholder((2, 64, 256), "bfloat16", "B")
    return ComputeDAG([a, b, topi.batch_matmul(a, b, out_dtype="float32")])


def sample(dag, params=TMA_ONLY, n=8, seed=0, hardware=None):
    hardware = hardware or HardwareParams()
    sampler = SketchSampler(generate_sketches(dag, hardware, params), hardware, params)
    return sampler, sampler.sample(n, seed)


def drew_tma(state) -> bool:
    return any(st.operand_copy == "tma" for st in state.stages)


def first_tma(dag, params=TMA_ONLY, seeds=range(4)):
    """(sampler, state) of the first sampled state that drew TMA."""
    for seed in seeds:
        sampler, states = sample(dag, params, seed=seed)
        for s in states:
            if drew_tma(s):
                return sampler, s
    raise AssertionError("no sampled state drew TMA")


def test_sampled_tma_states_compute_the_matmul_past_its_edge():
    dag = matmul_dag(200, 64, 128)  # M past the last block tile's rows
    sampler, state = first_tma(dag)
    program = sampler.programs[state.key()]
    assert ti.uses_tma(program.kernels[0])
    tz.run_and_compare(dag, program)


def test_a_sampled_tma_batch_matmul_computes_the_dag():
    dag = batch_matmul_dag()
    sampler, state = first_tma(dag)
    program = sampler.programs[state.key()]
    assert ti.uses_tma(program.kernels[0])
    tz.run_and_compare(dag, program)


def conv_dag(stride: int = 1, pad: int = 0) -> ComputeDAG:
    """An NHWC 1x1 convolution of 256 input channels to 64 (128 output pixels)."""
    size = 8 * stride
    data = te.placeholder((2, size, size, 256), "float16", "data")
    kernel = te.placeholder((1, 1, 256, 64), "float16", "kernel")
    return ComputeDAG([data, kernel, topi.nn.conv2d_nhwc(data, kernel, stride, pad)])


def test_a_sampled_1x1_conv_reads_its_input_by_tma_as_rows_of_channels():
    """The conv sketch attaches a 1x1 conv's shared tiles at its channel loop (its window loops
    run once), so they are pipelined over K and the gather, row m of the input seen as
    [N*H*W, C], is drawn as TMA boxes of that view."""
    dag = conv_dag()
    sampler, state = first_tma(dag)
    program = sampler.programs[state.key()]
    maps = {m.buffer.name: m for k in program.kernels for m in ti.tensor_maps(k)}
    assert maps["data"].view == (128, 256) and maps["kernel"].view is None
    tz.run_and_compare(dag, program)


def test_a_strided_1x1_conv_draws_im2col_copies_where_asked():
    """No box of the input holds its tile (the stride skips rows), but TMA's im2col mode
    copies it where `SketchParams.tma_im2col` allows: the traversal steps over the output
    pixels' window origins."""
    dag, mode = conv_dag(stride=2), ti.Im2col((0, 0), (-1, -1), (2, 2))
    _, states = sample(dag, dataclasses.replace(TMA_ONLY, tma_im2col=False), n=4)
    assert states and not any(drew_tma(s) for s in states)
    sampler, state = first_tma(dag, TMA_ONLY)
    program = sampler.programs[state.key()]
    maps = {m.buffer.name: m for k in program.kernels for m in ti.tensor_maps(k)}
    assert maps["data"].im2col == mode and maps["data"].box[1] == 64
    tz.run_and_compare(dag, program)


@pytest.fixture(scope="module")
def sampled():
    """(dag, sampler, states) of a 128 x 128 x 256 float16 matmul drawn with TMA only."""
    dag = matmul_dag(128, 128, 256)
    sampler, states = sample(dag)
    return dag, sampler, states


@pytest.fixture(scope="module")
def tma_state(sampled):
    dag, sampler, states = sampled
    return dag, sampler, next(filter(drew_tma, states))


def test_the_rule_draws_tma_only_where_listed_and_on_hopper(sampled):
    dag, _, states = sampled
    assert SketchParams().operand_copies == ("cp.async", "tma")  # on by default
    _, unlisted = sample(dag, dataclasses.replace(TMA_ONLY, operand_copies=("cp.async",)), n=4)
    assert unlisted and not any(drew_tma(s) for s in unlisted)
    sm80 = dataclasses.replace(HardwareParams(), arch="sm_80")
    _, elsewhere = sample(dag, TMA_ONLY, n=4, hardware=sm80)
    assert elsewhere and not any(drew_tma(s) for s in elsewhere)
    drawn = [s for s in states if drew_tma(s)]
    assert drawn and len(drawn) < len(states)  # only double-buffered tiles of 128-byte lines
    for s in drawn:
        assert all(
            s.stages[i].double_buffer for i, st in enumerate(s.stages) if st.operand_copy == "tma"
        )


def test_the_annotation_round_trips_through_records_and_the_python_schedule(tma_state):
    dag, _, state = tma_state
    text = dag.print_python_schedule(state)
    assert 's[A_shared].operand_copy("tma")' in text and 's[B_shared].operand_copy("tma")' in text
    records = [json.loads(json.dumps(step.to_record())) for step in state.steps]
    assert [r[2] for r in records if r[0] == OC] == ["tma", "tma"]
    replayed = replay(dag, records)
    assert replayed.key() == state.key()
    assert ti.uses_tma(lower(replayed).kernels[0])


def test_the_mutation_switches_the_copy_and_writes_a_fresh_samples_records(tma_state):
    dag, sampler, state = tma_state
    params = dataclasses.replace(TMA_ONLY, operand_copies=("cp.async", "tma"))
    hardware = HardwareParams()
    ctx = MutationContext(64, 8, params.auto_unroll_configs, params.tensor_core_unroll_configs)
    ctx.tensor_core = TensorCoreChoices.of(sampler.plans, params, hardware)
    mutation = OperandCopyMutation()
    child = mutation.apply(ctx, [state.key()], random.Random(0))
    assert child is not None and not any(r[0] == OC for r in child)
    assert child[-1][0] != OC and child == tuple(r for r in state.key() if r[0] != OC)
    back = mutation.apply(ctx, [child], random.Random(0))
    assert back == state.key()
    cp_async = dag.replay_steps([Step.from_record(r) for r in child])
    assert not ti.uses_tma(lower(cp_async).kernels[0])


# ---- the fast configurations are in the space ----------------------------------------------------


PIPELINED = dataclasses.replace(TMA_ONLY, pipeline_stages=(3,))
_PIPELINED_SAMPLES: dict = {}  # workload key -> (sampler, first TMA state) drawn with PIPELINED


def with_tiles(dag, lengths, slots: int = 3):
    """(state, group) of the first sampled TMA state of `dag` with its M, N and K split lengths
    replaced by `lengths` and `slots` pipeline slots (what the rules draw for other tiles: the
    records' structure and every other decision stay)."""
    key = dag.workload_key
    if key not in _PIPELINED_SAMPLES:
        _PIPELINED_SAMPLES[key] = first_tma(dag, PIPELINED)
    sampler, state = _PIPELINED_SAMPLES[key]
    (g,) = TensorCoreChoices.of(sampler.plans, PIPELINED, HardwareParams()).groups(state.key())
    steps = list(state.steps)
    for k, new in zip(g.split_ids, lengths, strict=True):
        s = steps[k]
        steps[k] = SplitStep(s.stage_id, s.iter_id, s.extent, new, s.inner_to_outer)
    steps = [PipelineStagesStep(s.stage_id, slots) if s.TAG == "PS" else s for s in steps]
    return dag.replay_steps(steps), g


# (warps along M and N, repeats) FillTensorCore draws, the wgmma block tile they become
# (`as_warpgroups`: a warp per 16-row tile, every column), the pipeline's slots
FAST = [
    pytest.param(((2, 4), (4, 4)), (8, 16), 3, id="128x256, 2 warpgroups of 64x256, 3 slots"),
    pytest.param(((2, 4), (4, 2)), (8, 8), 4, id="128x128, 2 warpgroups of 64x128, 4 slots"),
]


@pytest.mark.parametrize("drawn, warpgroup_tile, slots", FAST)
def test_the_space_holds_the_fast_tma_configurations(drawn, warpgroup_tile, slots):
    """FillTensorCore may draw the warps and repeats, TensorCoreInstruction makes them whole
    warpgroups over the block's columns, PipelineStages fits the slots (padded rows or not) and
    OperandCopy draws TMA; lowered on a 512^3 float16 matmul, the copies are boxes of 64-wide
    lines and the wgmmas as wide as the block."""
    hw = HardwareParams()
    (wm, wn), (rm, rn) = drawn
    warps, cols = warpgroup_tile
    assert rm * rn <= MAX_TILES_PER_WARP and max(wm * rm, wn * rn) <= MAX_BLOCK_TILES
    assert fragment_registers(rm, rn) <= fragment_register_budget(hw, wm * wn * hw.warp_size)
    dag = matmul_dag(512, 512, 512)
    before, g = with_tiles(dag, ((wm, rm, 16), (wn, rn, 16), (4, 16)), slots)
    assert warpgroup_tiles(SimpleNamespace(hardware=hw), before, g) == (warps, cols)
    lengths = ((warps, 1, 16), (1, cols, 16), (4, 16))
    for pads in ((0, 0), (8, 8)):
        fits = pipelined_bytes(group_draw(lengths, pads), g, slots)
        assert fits <= hw.max_shared_memory_per_block_optin
    assert tma_fits(hw, g, lengths, "wgmma", set(g.shared))
    state, _ = with_tiles(dag, lengths, slots)
    kernel = lower(state).kernels[0]
    assert kernel.block == (32, warps, 1)  # warps // 4 warpgroups
    boxes = {
        (s.map.buffer.name, s.map.box)
        for s in ir.iter_stmts(kernel.body)
        if isinstance(s, ti.TmaLoad)
    }
    assert boxes == {("A", (16 * warps, 64)), ("B", (64, 64))}
    assert {s.n for s in ir.iter_stmts(kernel.body) if isinstance(s, wi.WgmmaMma)} == {16 * cols}


def test_the_128x256_configuration_computes_a_one_block_product():
    dag = matmul_dag(128, 256, 192)
    state, _ = with_tiles(dag, ((8, 1, 16), (1, 16, 16), (4, 16)))
    program = lower(state)
    assert ti.uses_tma(program.kernels[0])
    tz.run_and_compare(dag, program)


def fast_tma_states(
    dag, wanted: set[tuple[int, int, int]], n: int = 600, seeds: int = 4
) -> dict[tuple, State]:
    """(block rows, columns, slots, unroll depth) -> the first state of that configuration among
    the states the default SketchParams sample for `dag` (not lowered): the TMA-fed wgmma
    states of 128x256 and 256x128 over 3 or 4 slots and of 128x128 over 4, K chunk 64. Draws
    `n` states a seed, up to `seeds` seeds, until every (rows, columns, slots) of `wanted` was
    found: a change of what the rules draw elsewhere moves the configurations in the stream."""
    hw = HardwareParams()
    sampler = SketchSampler(generate_sketches(dag, hw), hw, verify=False)
    found: dict[tuple, State] = {}
    for seed in range(seeds):
        for s in sampler.sample(n, seed):
            (g,) = sampler.plans[sampler.sketch_of[s.key()]].tensor_core
            (wm, rm, _), (wn, rn, _), (chunk, _) = group_lengths(s, g)
            shared = s.stages[g.shared[0]]
            slots, unroll = shared.pipeline_stages, s.stages[g.acc].auto_unroll_max_step
            block = (wm * rm * 16, wn * rn * 16)
            wide = block in ((128, 256), (256, 128)) and slots in (3, 4)
            if (
                shared.operand_copy == "tma"
                and chunk == 4
                and (wide or (block, slots) == ((128, 128), 4))
            ):
                found.setdefault((*block, slots, unroll), s)
        if wanted <= {key[:3] for key in found}:
            break
    return found


@needs_nvcc
@pytest.mark.slow
def test_the_sampled_fast_tma_configurations_compile_for_sm_90a_at_4096_without_spills(request):
    """Every configuration `fast_tma_states` finds, at each unroll depth drawn (nvcc 13.0: 154
    registers a thread for 128x256, 90 for 256x128 and 128x128)."""
    from autosched import build

    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("compiling 4096^3 kernels takes seconds; run with -m slow")

    dag = matmul_dag(4096, 4096, 4096)
    wanted = {(128, 256, 3), (256, 128, 3)}
    found = fast_tma_states(dag, wanted)
    assert wanted <= {key[:3] for key in found}
    for (rows, cols, _, _), state in found.items():
        source = build(dag, state).source
        assert "cp.async.bulk.tensor.2d" in source and f"m64n{cols}k16" in source
        (res,) = compile_resources(source, arch="sm_90").values()
        assert res.spill_bytes == 0, (rows, cols, res)


@needs_nvcc
@pytest.mark.slow
def test_the_cast_matmul_lays_its_epilogue_over_its_slots_and_compiles_at_4096(request):
    """matmul_fp16 (a cast epilogue through a 128 KB float32 tile at 128x256) at 4096: the
    128x256 block over 3 slots of a K chunk of 64 is drawn, its tile laid over the slots; each
    configuration found (its first unroll depth) fits the opt-in shared memory and compiles for
    sm_90a without spills."""
    from autosched import build
    from autosched.codegen.shared_memory import dynamic_shared_bytes
    from tests.sketch.test_warpgroup_tile import matmul_dag as cast_matmul_dag

    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("compiling 4096^3 kernels takes seconds; run with -m slow")

    dag = cast_matmul_dag(4096, 4096, 4096, cast=True)
    found: dict[tuple, State] = {}
    for key, state in fast_tma_states(dag, {(128, 256, 3)}).items():
        found.setdefault(key[:3], state)
    assert (128, 256, 3) in found
    limit = HardwareParams().max_shared_memory_per_block_optin
    for (rows, cols, slots), state in found.items():
        built = build(dag, state)
        (kernel,) = built.program.kernels
        assert kernel.shared_aliases, (rows, cols, slots)
        assert dynamic_shared_bytes(kernel) <= limit
        assert "cp.async.bulk.tensor.2d" in built.source and f"m64n{cols}k16" in built.source
        (res,) = compile_resources(built.source, arch="sm_90").values()
        assert res.spill_bytes == 0, (rows, cols, slots, res)


@pytest.mark.gpu
def test_gpu_sampled_tma_states_match_numpy():
    """A sampled TMA state past M's edge and the 128x256 configuration on a 512^3 matmul, built
    and launched as the search's kernels are (their tensor maps encoded by `gpu_call`)."""
    from tests.gpu.test_gpu_kernels import run_on_gpu

    dag = matmul_dag(200, 64, 128)
    _, state = first_tma(dag)
    run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
    dag = matmul_dag(512, 512, 512)
    state, _ = with_tiles(dag, ((8, 1, 16), (1, 16, 16), (4, 16)))
    kernel = run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
    assert [m.arg for m in kernel.launches[0].tensor_maps] == ["A", "B"]
