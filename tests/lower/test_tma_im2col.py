"""TMA im2col copies of a convolution's gathered input (`lower/tma_im2col.py`, the im2col mode
of `lower/tma_ir.py`): the proof of the gather's geometry, the window-fused conv sketch
(`SketchParams.tma_im2col`) whose sampled TMA states compute the conv on the CPU
interpreter (padding, strides 1 and 2), the interpreter's traversal, records, the CUDA text and
nvcc for sm_90a."""

from __future__ import annotations

import dataclasses
import json

import pytest

from autosched import te, topi
from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower import wgmma_ir as wi
from autosched.lower.interpreter import InterpreterError
from autosched.lower.lowering import lower
from autosched.lower.tma_im2col import im2col_gather
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.implicit_gemm import implicit_gemm_ops
from autosched.schedule.steps import PipelineStagesStep, SplitStep, replay
from autosched.search.mutations import TensorCoreChoices
from autosched.sketch import SketchParams, SketchSampler, generate_sketches
from autosched.sketch.operand_copy import tma_fits
from autosched.sketch.tensor_core_plan import IM2COL
from measure import compile_resources
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz

WINDOWS = SketchParams(
    tensor_core_instructions=("wgmma",), operand_copies=("tma",), tma_im2col=True
)


def conv(size: int, channels: int, k: int, stride: int, pad: int, dilation=1, batch=2, out=64):
    """An NHWC conv of `batch` images of size x size x channels to `out` channels."""
    data = te.placeholder((batch, size, size, channels), "float16", "data")
    kernel = te.placeholder((k, k, channels, out), "float16", "kernel")
    return ComputeDAG([data, kernel, topi.nn.conv2d_nhwc(data, kernel, stride, pad, dilation)])


@pytest.mark.parametrize(
    "size, k, stride, pad, geometry",
    [
        (7, 3, 1, 1, ((1, 1), (1, 1), (7, 7), (-1, -1))),
        (14, 3, 2, 1, ((1, 1), (2, 2), (7, 7), (-2, -2))),
        (9, 3, 1, 0, ((0, 0), (1, 1), (7, 7), (-2, -2))),
        (8, 1, 2, 0, ((0, 0), (2, 2), (4, 4), (-1, -1))),
        (7, 5, 1, 2, ((2, 2), (1, 1), (7, 7), (-2, -2))),
    ],
)
def test_the_gather_of_an_nhwc_conv_is_proven_an_im2col_traversal(size, k, stride, pad, geometry):
    """(pads, strides, output extents, upper corners): the traversal's last position is the
    last output pixel's window origin."""
    gather = implicit_gemm_ops(conv(size, 16, k, stride, pad).tensors[-1].op).gather
    found = im2col_gather(gather)
    assert found is not None
    pads, strides, outputs, upper = geometry
    assert (found.pads, found.strides, found.outputs) == (pads, strides, outputs)
    assert found.mode() == ti.Im2col(tuple(-p for p in pads), upper, strides)
    assert found.mode().positions((size, size)) == outputs


def test_a_dilated_window_is_no_im2col_traversal():
    gather = implicit_gemm_ops(conv(9, 16, 3, 1, 2, dilation=2).tensors[-1].op).gather
    assert im2col_gather(gather) is None


def im2col_copies(program: ir.Program) -> list[ti.TmaLoad]:
    return [
        s
        for k in program.kernels
        for s in ir.iter_stmts(k.body)
        if isinstance(s, ti.TmaLoad) and s.map.im2col is not None
    ]


def sampled_tma(dag, seeds=range(8), count: int = 1):
    """(sampler, first sampled state that copies by im2col) of `dag` with the window-fused
    sketch; with `count` > 1, (sampler, the first `count` such states)."""
    hw = HardwareParams()
    sampler = SketchSampler(generate_sketches(dag, hw, WINDOWS), hw, WINDOWS)
    found = []
    for seed in seeds:
        for s in sampler.sample(4, seed):
            tma = any(st.operand_copy == "tma" for st in s.stages)
            if tma and im2col_copies(sampler.programs[s.key()]):
                found.append(s)
                if len(found) == count:
                    return sampler, (s if count == 1 else found)
    raise AssertionError(f"fewer than {count} sampled states copy by im2col")


_SAMPLED: dict[int, tuple] = {}


def sampled_conv(stride: int):
    """(dag, sampler, state): a sampled TMA state of a 3x3, padding-1 conv of 64 channels to
    64 over 7x7 output pixels (from 7x7 at stride 1, 14x14 at stride 2)."""
    if stride not in _SAMPLED:
        dag = conv(7 * stride, 64, 3, stride, 1)
        _SAMPLED[stride] = (dag, *sampled_tma(dag))
    return _SAMPLED[stride]


@pytest.mark.parametrize("stride", [1, 2])
def test_sampled_3x3_states_copy_the_window_by_im2col_and_compute_the_conv(stride):
    """The window and K loops are one pipeline; its A tiles are im2col copies, the tap in the
    offsets, zeros in the padding; against numpy on the interpreter."""
    dag, sampler, state = sampled_conv(stride)
    program = sampler.programs[state.key()]
    (copy, *_) = im2col_copies(program)
    assert copy.map.buffer.name == "data" and copy.map.im2col.strides == (stride, stride)
    assert len(copy.offsets) == 2 and copy.map.box[1] == 64
    tz.run_and_compare(dag, program)


def test_the_window_fused_sketch_is_drawn_on_hopper_by_default_and_only_where_asked():
    dag = conv(7, 64, 3, 1, 1)
    hw = HardwareParams()
    fused = generate_sketches(dag, hw, WINDOWS)
    plain = generate_sketches(dag, hw, dataclasses.replace(WINDOWS, tma_im2col=False))
    sm80 = generate_sketches(dag, dataclasses.replace(hw, arch="sm_80"), WINDOWS)
    assert len(fused) == len(plain) + 1 and len(sm80) == len(plain)
    default = generate_sketches(dag, hw, SketchParams())
    assert len(default) == len(fused)  # on by default
    sampler = SketchSampler(plain, hw, WINDOWS)
    assert not any(st.operand_copy == "tma" for s in sampler.sample(2, 0) for st in s.stages)


def test_a_3x3_tma_state_round_trips_through_its_records():
    dag, _, state = sampled_conv(1)
    records = [json.loads(json.dumps(step.to_record())) for step in state.steps]
    replayed = replay(dag, records)
    assert replayed.key() == state.key() and im2col_copies(lower(replayed))


def test_a_copy_starting_off_the_traversal_fails_in_the_interpreter():
    """A first pixel that is no window origin (an odd column under a stride of 2) has no
    place in the traversal: the interpreter refuses it rather than guess."""
    dag, _, state = sampled_conv(1)
    program = lower(state)
    for copy in im2col_copies(program):
        i2c = copy.map.im2col
        copy.map = dataclasses.replace(copy.map, im2col=ti.Im2col(i2c.lower, i2c.upper, (2, 2)))
    with pytest.raises(InterpreterError, match="off its im2col traversal"):
        tz.run_and_compare(dag, program)


def test_the_cuda_copies_by_im2col_with_16_bit_offsets():
    from autosched import build

    dag, _, state = sampled_conv(1)
    source = build(dag, state).source
    assert "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier" in source
    assert '"h"((unsigned short)(' in source


def with_tiles(dag, lengths, slots: int):
    """A window-fused im2col state of `dag` with its M, N and K split lengths replaced by
    `lengths` and `slots` pipeline slots (the first sampled such state's other decisions)."""
    params = dataclasses.replace(WINDOWS, pipeline_stages=(slots,), double_buffer_probability=1.0)
    hw = HardwareParams()
    sampler = SketchSampler(generate_sketches(dag, hw, params), hw, params)
    state = next(
        s
        for seed in range(40)
        for s in sampler.sample(4, seed)
        if any(st.operand_copy == "tma" for st in s.stages)
        and im2col_copies(sampler.programs[s.key()])
    )
    (g,) = TensorCoreChoices.of(sampler.plans, params, hw).groups(state.key())
    assert g.window_steps == 9 and IM2COL in g.gather_copies
    assert tma_fits(hw, g, lengths, "wgmma", set(g.shared), im2col=True)
    steps = list(state.steps)
    for k, new in zip(g.split_ids, lengths, strict=True):
        st = steps[k]
        steps[k] = SplitStep(st.stage_id, st.iter_id, st.extent, new, st.inner_to_outer)
    return dag.replay_steps(
        [PipelineStagesStep(x.stage_id, slots) if x.TAG == "PS" else x for x in steps]
    )


# the fast wgmma configurations: (warps, 16-column tiles a warpgroup, slots) -> a block tile
# of 16 warps x 16 cols as two warpgroups
FAST = [
    pytest.param(8, 16, 3, id="128x256, 2 warpgroups of 64x256, 3 slots"),
    pytest.param(8, 8, 4, id="128x128, 2 warpgroups of 64x128, 4 slots"),
]


def test_the_fast_configurations_are_in_the_window_fused_space():
    """128 x 256 over 3 slots: A as 128-pixel im2col copies of 64 channels, B as boxes of the
    HWIO kernel, wgmma N = 256 (on a 3x3 conv of 2 images of 8x8, 64 to 256 channels)."""
    dag = conv(8, 64, 3, 1, 1, out=256)
    kernel = lower(with_tiles(dag, ((8, 1, 16), (1, 16, 16), (4, 16)), 3)).kernels[0]
    boxes = {
        (s.map.buffer.name, s.map.box, s.map.im2col is not None)
        for s in ir.iter_stmts(kernel.body)
        if isinstance(s, ti.TmaLoad)
    }
    assert boxes == {("data", (128, 64), True), ("kernel", (1, 1, 64, 64), False)}
    assert {s.n for s in ir.iter_stmts(kernel.body) if isinstance(s, wi.WgmmaMma)} == {256}


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("warps, cols, slots", FAST)
def test_the_seed_convs_fast_configurations_compile_for_sm_90a_without_spills(
    warps, cols, slots, request
):
    """The seed conv (batch 256, 14x14, 256 -> 512 channels, 3x3, padding 1). With nvcc 13.0:
    128 x 256, 3 slots: 154 registers a thread; 128 x 128, 4 slots: 90; no spills."""
    from autosched import build

    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("compiling a full-size conv takes seconds; run with -m slow")
    dag = conv(14, 256, 3, 1, 1, batch=256, out=512)
    state = with_tiles(dag, ((warps, 1, 16), (1, cols, 16), (4, 16)), slots)
    source = build(dag, state).source
    assert ".global.im2col." in source and f"m64n{16 * cols}k16" in source
    (res,) = compile_resources(source, arch="sm_90").values()
    assert res.spill_bytes == 0


def test_the_features_walk_an_im2col_copy_as_the_cooperative_gather():
    """Each thread's share of the copy's pixel rows of 64 channels: as many rows as the
    cp.async gather the copy replaces."""
    from autosched.features.extract import FEATURE_NAMES, extract_features

    _, _, state = sampled_conv(1)
    cp_async = state
    for i, st in enumerate(state.stages):
        if st.operand_copy == "tma":
            cp_async = cp_async.operand_copy(i, "cp.async")
    tma, plain = extract_features(lower(state)), extract_features(lower(cp_async))
    assert tma.shape == plain.shape
    divmod_at = list(FEATURE_NAMES).index("int_divmod")
    assert (tma[:, divmod_at] < plain[:, divmod_at]).any()  # no per-thread gather arithmetic


def test_the_operand_copy_mutation_switches_a_3x3_state_where_im2col_is_asked():
    import random

    from autosched.search.mutations import MutationContext
    from autosched.search.tensor_core_mutations import OperandCopyMutation

    _, sampler, state = sampled_conv(1)
    params = dataclasses.replace(WINDOWS, operand_copies=("cp.async", "tma"))
    ctx = MutationContext(64, 8, params.auto_unroll_configs, params.tensor_core_unroll_configs)
    ctx.tensor_core = TensorCoreChoices.of(sampler.plans, params, HardwareParams())
    child = OperandCopyMutation().apply(ctx, [state.key()], random.Random(0))
    assert child is not None and OperandCopyMutation().apply(ctx, [child], random.Random(0))
    unasked = dataclasses.replace(params, tma_im2col=False)
    ctx.tensor_core = TensorCoreChoices.of(sampler.plans, unasked, HardwareParams())
    assert OperandCopyMutation().apply(ctx, [child], random.Random(0)) is None
