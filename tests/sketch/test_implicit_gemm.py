"""Implicit GEMM (schedule/implicit_gemm.py, the `ImplicitGemmStep`, and its Tensor Core sketch
in sketch/tensor_core.py): which convolutions it tensorizes, and sampled states of tiny ones
that compute the DAG on the CPU interpreter (strides, padding, 1x1, 7x7, bf16, epilogues)."""

from __future__ import annotations

import math

import pytest

from autosched import te, topi
from autosched.lower import ir
from autosched.lower.planning import make_plan
from autosched.lower.wgmma_ir import WgmmaMma
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.implicit_gemm import implicit_gemm_ops, row_axes
from autosched.sketch import SketchParams, SketchSampler, generate_sketches
from autosched.sketch.tensor_core import match_implicit_gemm
from autosched.sketch.tensor_core_plan import tensor_core_groups
from autosched.task.evaluate import evaluate
from autosched.task.workload_registry import make_workload_key, workload_tensors
from autosched.task.workloads import RESNET50_CONVS, resnet50_conv_args
from tests.interpreter_check import assert_half_outputs_match, half_inputs


def conv_nhwc(
    n, hw, ci, co, k, stride, pad, dtype="float16", epilogue="cast", dilation=1
) -> ComputeDAG:
    data = te.placeholder((n, hw, hw, ci), name="data", dtype=dtype)
    kernel = te.placeholder((k, k, ci, co), name="kernel", dtype=dtype)
    out = topi.nn.conv2d_nhwc(data, kernel, stride, pad, dilation, out_dtype="float32")
    tensors = [data, kernel]
    if epilogue in ("bias_relu", "residual"):
        bias = te.placeholder((co,), name="bias", dtype="float32")
        tensors.append(bias)
        out = out + bias
    if epilogue == "residual":
        skip = te.placeholder(out.shape, name="residual", dtype="float32")
        tensors.append(skip)
        out = out + skip
    if epilogue in ("bias_relu", "residual"):
        out = topi.nn.relu(out)
    if epilogue != "none":
        out = topi.cast(out, dtype)
    return ComputeDAG([*tensors, out])


def implicit_sketch(dag: ComputeDAG):
    """The implicit GEMM sketch of `dag` (the one with a gather stage; not the window-fused one
    that TMA im2col copies add on sm_90)."""
    plain = generate_sketches(dag, params=SketchParams(tma_im2col=False))
    found = [s for s in plain if any(".im2col" in x.name for x in s.stages)]
    assert len(found) == 1
    return found[0]


def conv_stage(state) -> int:
    return next(i for i, s in enumerate(state.stages) if s.op.reduce_axis)


def test_the_ops_fuse_the_pixels_into_m():
    dag = conv_nhwc(2, 6, 16, 32, 3, 2, 1)
    init = dag.get_init_state()
    op = init.stages[conv_stage(init)].op
    assert [a.name for a in row_axes(op)] == ["nn", "yy", "xx"]
    ops = implicit_gemm_ops(op)
    assert ops.gemm.shape == (2 * 3 * 3, 32) and ops.gather.shape == (18, 3, 3, 16)
    assert ops.reshape.shape == op.shape and ops.reshape.name == op.name
    state = init.implicit_gemm(conv_stage(init))
    names = [s.name for s in state.stages]
    assert names[names.index("Conv2dOutput") - 2 :][:2] == [
        "Conv2dOutput.im2col",
        "Conv2dOutput.gemm",
    ]


@pytest.mark.parametrize("batch", [1, 8])
def test_every_resnet50_conv_gets_a_tensor_core_sketch(batch):
    missing = []
    for conv in RESNET50_CONVS:
        key = make_workload_key("conv2d_nhwc_fp16", resnet50_conv_args(batch, conv))
        init = ComputeDAG(workload_tensors(key)).get_init_state()
        if match_implicit_gemm(init, conv_stage(init)) is None:
            missing.append(conv)
    assert missing == []


def test_the_batch_8_conv_that_was_not_tensorized():
    sketch = implicit_sketch(conv_nhwc(8, 56, 64, 64, 3, 1, 1))
    acc = next(s for s in sketch.stages if s.scope == ir.ACCUMULATOR_SCOPE)
    assert acc.name == "Conv2dOutput.gemm.wmma.accumulator"
    inlined = {s.name for s in sketch.stages if s.compute_at == "inlined"}
    assert {"PaddedInput", "Conv2dOutput.im2col", "Conv2dOutput"} <= inlined


def test_three_input_channels_stay_on_cuda_cores():
    dag = conv_nhwc(1, 16, 3, 16, 7, 2, 3)
    init = dag.get_init_state()
    assert match_implicit_gemm(init, conv_stage(init)) is None


def check_implicit_gemm(dag: ComputeDAG, n: int = 2) -> None:
    """n sampled states of the implicit GEMM sketch: one kernel, with Tensor Core products,
    that computes the DAG on the interpreter."""
    sampler = SketchSampler([implicit_sketch(dag)])
    states = sampler.sample(n, 0)
    assert len(states) == n, sampler.rejected
    inputs = half_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    for state in states:
        program = sampler.programs[state.key()]
        assert len(program.kernels) == 1  # the reshape and epilogue in the product's kernel
        products = (ir.FragmentMma, WgmmaMma)  # warp products, or a warpgroup's
        assert any(isinstance(s, products) for k in program.kernels for s in ir.iter_stmts(k.body))
        assert_half_outputs_match(dag, program, inputs, expected)


@pytest.mark.parametrize(
    "args",
    [
        (1, 4, 16, 16, 3, 1, 1),  # batch 1: M = 16 pixels
        (1, 4, 16, 16, 3, 2, 1),  # stride 2: 4 pixels, one padded tile
        (2, 5, 16, 32, 1, 1, 0),  # 1x1, M = 50 (padded)
        (1, 9, 16, 16, 7, 2, 3),  # 7x7 stride 2 pad 3
        (1, 4, 32, 8, 3, 1, 1),  # 8 output channels (padded N)
    ],
)
def test_sampled_convs_compute_the_dag_on_the_interpreter(args):
    check_implicit_gemm(conv_nhwc(*args))


def test_a_dilated_conv():
    check_implicit_gemm(conv_nhwc(1, 6, 16, 16, 3, 1, 2, dilation=2))


def test_bf16_with_a_bias_and_relu_epilogue():
    check_implicit_gemm(conv_nhwc(1, 4, 16, 16, 3, 1, 1, "bfloat16", "bias_relu"))


def test_a_residual_epilogue_runs_in_the_products_kernel():
    dag = conv_nhwc(2, 4, 16, 16, 3, 1, 1, epilogue="residual")
    check_implicit_gemm(dag)
    (state,) = SketchSampler([implicit_sketch(dag)]).sample(1, 0)
    roots = [s for s in state.stages if s.compute_at == "root" and not s.is_placeholder]
    assert [s.name for s in roots] == ["T_cast"]  # one kernel: the epilogue


def test_a_block_stores_only_its_own_tile():
    """The epilogue reads the product at (n*OH + y)*OW + x of its fused loop: bound inference
    gives the product's copy-out the block's M tile, also where the tile is a multiple of OW
    (112 of 56, which simplification drops from x), so the block computes its tile once."""
    dag = conv_nhwc(32, 56, 64, 64, 3, 1, 1)
    sketch = implicit_sketch(dag)
    (group,) = tensor_core_groups(sketch)
    tiles = []
    # the uniform families' draws (warp tiles of 16 rows, some a multiple of 56; a wgmma block
    # is whole warpgroups of 64 rows, which this size of conv would otherwise always draw)
    params = SketchParams(wgmma_conv_macs_per_sm=0)
    for state in SketchSampler([sketch], None, params).sample(24, 7):
        plan = make_plan(state)
        tiles.append(math.prod(state.steps[group.m_split].lengths))
        assert plan.info[group.store].region[0] == tiles[-1]
    assert any(t % 56 == 0 for t in tiles), tiles  # a tile that is a multiple of OW was drawn


def test_a_float32_output_is_the_reshape_itself():
    check_implicit_gemm(conv_nhwc(1, 4, 16, 16, 3, 1, 1, epilogue="none"))


def test_nchw_gathers_its_pixels_and_reorders_its_output():
    data = te.placeholder((1, 16, 4, 4), name="data", dtype="float16")
    kernel = te.placeholder((16, 16, 3, 3), name="kernel", dtype="float16")
    out = topi.nn.conv2d_nchw(data, kernel, 1, 1, out_dtype="float32")
    check_implicit_gemm(ComputeDAG([data, kernel, topi.cast(out, "float16")]))
