"""ResNet-50's 3x3 and 1x1 convs (`RESNET50_CONVS`, NHWC fp16) on an sm_90 target: every one,
at batch 1 and 32, is sketched on the Tensor Cores, and a state sampled from those sketches
lowers to a program of Tensor Core statements; the awkward extents of batch 1 (7x7 pixels:
M = 49, a strided 1x1 and the split-K of few output tiles) compute the conv on the interpreter
at reduced channel counts."""

from __future__ import annotations

import pytest

from autosched.lower import ir
from autosched.lower.wgmma_ir import WgmmaMma
from autosched.sketch import SketchParams, SketchSampler, generate_sketches
from autosched.task.search_task import SearchTask
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
    `split_k_max_outputs` elements) and each of the P parts keeps `split_k_min_chunk` of the
    reduction: the 3x3 convs of 14x14 and 7x7 outputs and the widest reducing 1x1s. At batch
    32 no conv has so few outputs."""
    drawn = {}
    for conv in RESNET50_CONVS:
        parts = sorted(filter(None, map(split_k_parts, tensor_core_sketches(1, conv)[2])))
        if parts:
            drawn[conv] = parts
    assert drawn == {
        (28, 256, 256, 3, 2, 1): [4],
        (14, 256, 256, 3, 1, 1): [4],
        (14, 1024, 256, 1, 1, 0): [4],
        (14, 512, 512, 3, 2, 1): [4, 16],
        (7, 512, 512, 3, 1, 1): [4, 16],
        (7, 2048, 512, 1, 1, 0): [4],
    }


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
