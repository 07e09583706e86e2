"""ResNet-50's 3x3 and 1x1 convs (`RESNET50_CONVS`, NHWC fp16) on an sm_90 target: every one,
at batch 1 and 32, is sketched on the Tensor Cores, and a state sampled from those sketches
lowers to a program of Tensor Core statements; the awkward extents of batch 1 (7x7 pixels:
M = 49, a strided 1x1 and the split-K of few output tiles) compute the conv on the interpreter
at reduced channel counts."""

from __future__ import annotations

import dataclasses

import pytest

from autosched.lower import ir
from autosched.lower.wgmma_ir import WgmmaMma
from autosched.schedule.compute_dag import ComputeDAG
from autosched.sketch import SketchParams, SketchSampler, generate_sketches
from autosched.sketch.epilogue_vector import vector_epilogue_stages
from autosched.sketch.fragment_double_buffer import group_lengths
from autosched.sketch.init_base import InitContext
from autosched.sketch.operand_copy import tma_fits
from autosched.sketch.tensor_core_instruction import hopper_sized
from autosched.sketch.tensor_core_plan import tensor_core_groups
from autosched.task.search_task import SearchTask
from autosched.task.workload_registry import make_workload_key, workload_tensors
from autosched.task.workloads import RESNET50_CONVS, resnet50_conv_args
from measure.hardware import HardwareParams
from tests.sketch.test_implicit_gemm import check_implicit_gemm, conv_nhwc
from tests.sketch.test_split_k import check_half, half_split_states

SM_90 = HardwareParams(arch="sm_90")


def tensor_core_sketches(batch: int, conv: tuple[int, ...]):
    """The task of one of ResNet-50's convs for sm_90, its sketch params and its Tensor Core
    sketches (those with an accumulator in fragments)."""
    task = SearchTask("conv2d_nhwc_fp16", resnet50_conv_args(batch, conv), hardware_params=SM_90)
    params = SketchParams.for_task(task)
    sketches = generate_sketches(task.compute_dag, task.hardware_params, params)
    tensor_core = [s for s in sketches if any(st.scope == ir.ACCUMULATOR_SCOPE for st in s.stages)]
    return task, params, tensor_core


def tensor_core_statements(program) -> set[str]:
    """The kinds of Tensor Core statement (warp-collective fragment ones, wgmma) a program runs."""
    return {
        type(s).__name__
        for k in program.kernels
        for s in ir.iter_stmts(k.body)
        if isinstance(s, (ir.WarpStmt, WgmmaMma))
    }


@pytest.mark.parametrize("batch", [1, 32])
def test_every_resnet50_conv_samples_a_tensorized_program_on_sm_90(batch):
    untensorized = []
    for conv in RESNET50_CONVS:
        task, params, sketches = tensor_core_sketches(batch, conv)
        if not sketches:
            untensorized.append((conv, "no Tensor Core sketch"))
            continue
        sampler = SketchSampler(sketches, task.hardware_params, params)
        states = sampler.sample(1, 0)
        if not states:
            untensorized.append((conv, f"no valid state: {sampler.rejected}"))
            continue
        kinds = tensor_core_statements(sampler.programs[states[0].key()])
        if not {"FragmentMma", "WgmmaMma"} & kinds:
            untensorized.append((conv, f"no Tensor Core product: {sorted(kinds)}"))
    assert untensorized == []


def split_k_parts(sketch) -> int | None:
    """P of a split-K sketch (the extent of its partial sums' first axis), None for the others."""
    rf = [st for st in sketch.stages if st.op.name.endswith(".rf")]
    return rf[0].op.axis[0].extent if rf else None


def test_which_batch_1_convs_get_tensor_core_split_k():
    """Split-K on the Tensor Cores is sketched where the output is small (under
    `split_k_tensor_core_output_factor` x `split_k_max_outputs` elements: 13 to 25 blocks of
    64 x 128) and each of the P parts keeps `split_k_min_chunk` of the reduction in whole
    16-wide K tiles: the 3x3 convs of 28x28 pixels and fewer and the widest reducing or
    strided 1x1s; a sampled split state lowers to two kernels whose partial sums are a Tensor
    Core product. At batch 32 no conv has so few outputs."""
    drawn = {}
    for conv in RESNET50_CONVS:
        task, params, sketches = tensor_core_sketches(1, conv)
        split = [s for s in sketches if split_k_parts(s)]
        if not split:
            continue
        drawn[conv] = sorted(set(map(split_k_parts, split)))  # window-fused or not
        sampler = SketchSampler(split, task.hardware_params, params)
        (state,) = sampler.sample(1, 0)
        program = sampler.programs[state.key()]
        assert len(program.kernels) == 2
        assert {"FragmentMma", "WgmmaMma"} & tensor_core_statements(program), conv
    assert drawn == {
        (56, 128, 128, 3, 2, 1): [4],
        (28, 128, 128, 3, 1, 1): [4],
        (28, 256, 256, 3, 2, 1): [4],
        (14, 256, 256, 3, 1, 1): [4],
        (14, 1024, 256, 1, 1, 0): [4],
        (14, 512, 512, 3, 2, 1): [4, 16],
        (14, 1024, 2048, 1, 2, 0): [4],
        (7, 512, 512, 3, 1, 1): [4, 16],
        (7, 2048, 512, 1, 1, 0): [4],
    }


def test_tensor_core_products_split_k_at_more_outputs_than_other_reductions():
    """784 outputs, over `split_k_max_outputs` (256) but under 4 times it: the fp16 conv is
    split on the Tensor Cores (and computes the conv), the fp32 one is not."""
    params = SketchParams(split_k_max_outputs=256, split_k_min_chunk=64)
    args = (1, 7, 7, 16, 128, 3, 3, 1, 1)
    fp32 = ComputeDAG(workload_tensors(make_workload_key("conv2d", args)))
    assert not any(split_k_parts(s) for s in generate_sketches(fp32, params=params))
    dag, sampler, states = half_split_states("conv2d_nhwc_fp16", args, 1, params)
    check_half(dag, sampler, states)


@pytest.mark.parametrize(
    "args",
    [
        (1, 7, 16, 32, 1, 1, 0),  # 1x1 on 7x7 pixels: M = 49 (one padded 64-row tile)
        (1, 14, 16, 16, 1, 2, 0),  # strided 1x1 (downsample) to 7x7
        (1, 7, 16, 16, 3, 1, 1),  # 3x3 on 7x7 pixels, padded window
    ],
)
def test_batch_1_convs_of_7x7_pixels_compute_the_conv(args):
    check_implicit_gemm(conv_nhwc(*args), n=1)


def test_a_batch_1_conv_of_7x7_pixels_splits_k_on_tensor_cores():
    """M = 49 padded rows and K (128 channels x 3x3) cut into parts of whole 16-wide tiles."""
    dag, sampler, states = half_split_states("conv2d_nhwc_fp16", (1, 7, 7, 16, 128, 3, 3, 1, 1), 1)
    check_half(dag, sampler, states)


def implicit_groups(sketches):
    """(sketch, group) of every implicit GEMM Tensor Core group (one that gathers pixels)."""
    return [(s, g) for s in sketches for g in tensor_core_groups(s) if any(g.gathers)]


def test_which_convs_are_sized_for_wgmma_only():
    """`hopper_sized`: every batch-32 conv's implicit GEMM (3 to 100 M multiply-adds per SM
    of an H100) draws wgmma wherever it fits; no batch-1 conv's (under 1 M) does."""
    sized = {}
    for batch in (1, 32):
        for conv in RESNET50_CONVS:
            task, params, sketches = tensor_core_sketches(batch, conv)
            ctx = InitContext(params, task.hardware_params)
            groups = implicit_groups(sketches)
            assert groups
            sized[batch, conv] = {hopper_sized(ctx, s, g) for s, g in groups}
    assert all(sized[32, c] == {True} for c in RESNET50_CONVS)
    assert all(sized[1, c] == {False} for c in RESNET50_CONVS)


def test_a_batch_32_conv_samples_wgmma_with_tma_and_vector_epilogues():
    """Its implicit GEMM states are all wgmma with 16-byte epilogues, their operands copied by
    TMA wherever TMA fits their tiles (the direct sketch's, whose M is the batch of 32 rows, is
    too short for a warpgroup and keeps its draws); `wgmma_conv_macs_per_sm=0` gives the
    uniform draws back."""
    task, params, sketches = tensor_core_sketches(32, RESNET50_CONVS[18])  # 7x7, 512 -> 2048
    implicit = [s for s, _ in implicit_groups(sketches)]
    sampler = SketchSampler(implicit, task.hardware_params, params)
    states = sampler.sample(6, 0)
    assert len(states) == 6
    fed = 0
    for state in states:
        (g,) = sampler.plans[sampler.sketch_of[state.key()]].tensor_core
        assert state.stages[g.acc].tensor_core_instruction == "wgmma"
        assert vector_epilogue_stages(state)
        buffered = {i for i, s in enumerate(state.stages) if s.double_buffer}
        fits = tma_fits(
            task.hardware_params, g, group_lengths(state, g), "wgmma", buffered, params.tma_im2col
        )
        copies = {state.stages[c].operand_copy for c in g.shared}
        assert copies == ({"tma"} if fits else {"cp.async"})
        fed += fits
    assert fed  # some drawn tiles are of whole 128-byte lines
    uniform = dataclasses.replace(params, wgmma_conv_macs_per_sm=0)
    states = SketchSampler(implicit, task.hardware_params, uniform).sample(6, 0)
    families = {st.tensor_core_instruction for s in states for st in s.stages}
    assert families > {"wgmma"}
