"""TMA-fed wgmma pipelines (`lower/tma_fetch.py`): shared operand stages marked
`operand_copy("tma")` are filled by one thread's box copies completing on mbarriers; the states
run on the CPU interpreter against numpy (edge tiles past M included), keep cp.async where a
box cannot be proven, and compile for sm_90a without spills.
"""

from __future__ import annotations

from unittest import mock

import pytest

from autosched import te, topi
from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower.ir_text import program_text
from autosched.lower.lowering import lower
from autosched.lower.verify import verify_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.te.expr import Const
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz
from tests.lower.test_passes import programs_around

ACC = "wmma.accumulator"


def matmul_dag(m: int, n: int, k: int, dtype: str = "float16") -> ComputeDAG:
    a = te.placeholder((m, k), dtype, "A")
    b = te.placeholder((k, n), dtype, "B")
    return ComputeDAG([a, b, topi.matmul(a, b, out_dtype="float32")])


def batch_matmul_dag() -> ComputeDAG:
    a = te.placeholder((2, 64, 192), "bfloat16", "A")
    b = te.placeholder((2, 64, 192), "bfloat16", "B")  # (batch, N, K): B read K-major
    return ComputeDAG([a, b, topi.batch_matmul(a, b, out_dtype="float32")])


def recipe_state(dag: ComputeDAG, slots: int, copy: str = "tma", chunk: int = 4, n_tiles: int = 4):
    """test_tensorize's recipe drawn as wgmma: one warpgroup (4 warps along M, `n_tiles`
    16-column tiles each: a block tile of 64 x 16 `n_tiles`), a K chunk of `chunk` 16-wide
    steps, the shared tiles in a pipeline of `slots` slots copied by `copy`."""
    out = dag.tensors[-1].op.name
    tiles = {"A": ("ax0", "ax1"), "B": ("ax0", "ax1")}
    if len(dag.tensors[0].shape) == 3:
        tiles = {"A": ("ax1", "ax2"), "B": ("ax1", "ax2")}
    with mock.patch.multiple(tz, WARPS=(4, 1), REPS=(1, n_tiles), K_SPLIT=(chunk, 16)):
        state = tz.tensor_core_state(dag, out, tiles, "i", "j", "k")
    state = state.tensor_core_instruction(f"{out}.{ACC}", "wgmma")
    for name in ("A.shared", "B.shared"):
        state = state.double_buffer(name).pipeline_stages(name, slots)
        state = state.operand_copy(name, copy)
    return state


def conv_1x1_state(stride: int):
    """An NHWC 1x1 convolution of 256 input channels as an implicit GEMM (128 output pixels x
    64 channels), by the recipe above on its product: one block of one warpgroup, 3 slots of
    TMA-marked tiles; the output reshaped by a second kernel."""
    size = 8 * stride
    data = te.placeholder((2, size, size, 256), "float16", "data")
    kernel = te.placeholder((1, 1, 256, 64), "float16", "kernel")
    dag = ComputeDAG([data, kernel, topi.nn.conv2d_nhwc(data, kernel, stride, 0)])
    gemm, out = "Conv2dOutput.gemm", "Conv2dOutput"
    s = dag.get_init_state().implicit_gemm(out).cache_write(gemm, ACC)
    tiles = {"Conv2dOutput.im2col": ("ax0", "ax3"), "kernel": ("ax2", "ax3")}
    for name, scope in zip(tiles, tz.FRAGMENTS, strict=True):
        s = s.cache_read(name, "shared", [f"{gemm}.{ACC}"])
        s = s.cache_read(f"{name}.shared", scope, [f"{gemm}.{ACC}"])
    s = s.compute_inline("Conv2dOutput.im2col")
    with mock.patch.multiple(tz, WARPS=(4, 1), REPS=(1, 4), K_SPLIT=(4, 16)):
        s, warp = tz.tile_copy_out(s, gemm, "nn_yy_xx_fused", "ff", root=True)
        s = tz.schedule_mma(s, gemm, warp, tiles, "nn_yy_xx_fused_c", "ff_c", "rc")
    s = s.fuse(out, [it.name for it in s[out].iters])
    fused = s[out].iters[0].name
    s = s.split(out, fused, [128])
    s = s.bind(out, f"{fused}_o", "blockIdx.x").bind(out, f"{fused}_i", "threadIdx.x")
    s = s.tensor_core_instruction(f"{gemm}.{ACC}", "wgmma")
    for name in ("Conv2dOutput.im2col.shared", "kernel.shared"):
        s = s.double_buffer(name).pipeline_stages(name, 3).operand_copy(name, "tma")
    return dag, s


def test_a_1x1_stride_1_conv_reads_its_input_as_rows_of_channels():
    """The gather of a 1x1, stride-1 implicit GEMM is row m of the NHWC input seen as
    [N*H*W, C]: one 2-d box of that view per tile; a stride of 2 skips rows, so its tiles
    are im2col copies whose traversal steps by 2."""
    dag, state = conv_1x1_state(stride=1)
    program = lower(state, verify=True)
    maps = {m.buffer.name: m for k in program.kernels for m in ti.tensor_maps(k)}
    assert (maps["data"].view, maps["data"].box) == ((128, 256), (64, 64))
    assert maps["kernel"].view is None and maps["kernel"].box == (1, 1, 64, 64)
    tz.run_and_compare(dag, program)
    dag, state = conv_1x1_state(stride=2)
    program = lower(state, verify=True)
    maps = {m.buffer.name: m for k in program.kernels for m in ti.tensor_maps(k)}
    assert maps["data"].im2col == ti.Im2col((0, 0), (-1, -1), (2, 2))
    tz.run_and_compare(dag, program)


def copies(program: ir.Program) -> list[ti.TmaLoad]:
    return [s for s in ir.iter_stmts(program.kernels[0].body) if isinstance(s, ti.TmaLoad)]


def main_loop(program: ir.Program) -> ir.For:
    return next(
        s
        for s in ir.iter_stmts(program.kernels[0].body)
        if isinstance(s, ir.For)
        and isinstance(s.body, ir.Seq)
        and isinstance(s.body.stmts[0], ti.MbarrierWait)
    )


@pytest.mark.parametrize(
    "make, slots",
    [
        (lambda: matmul_dag(160, 128, 192), 3),  # M past the last block tile's rows
        (batch_matmul_dag, 2),
    ],
)
def test_tma_fed_states_compute_the_dag(make, slots):
    dag = make()
    program = lower(recipe_state(dag, slots), verify=True)
    kernel = program.kernels[0]
    assert copies(program) and not any(
        isinstance(s, (ir.AsyncCommit, ir.AsyncWait)) for s in ir.iter_stmts(kernel.body)
    )
    assert all(c.map.swizzle == "128B" and c.map.box[-1] == 64 for c in copies(program))
    body = [type(s).__name__ for s in main_loop(program).body.stmts]
    # wait for the tile, issue its wgmmas, retire the step before's, release its slot, refill
    assert body[0] == "MbarrierWait" and body[-3:] == ["WgmmaWait", "Barrier", "IfThenElse"]
    assert main_loop(program).body.stmts[-3].pending == 1
    tz.run_and_compare(dag, program)


def test_the_tma_pipeline_golden_computes_the_matmul(golden):
    """The emitted TMA pipeline before the warpgroup_mma pass and its mainloop after it."""
    state = recipe_state(matmul_dag(64, 64, 192), 3)
    before, after = programs_around(state, "warpgroup_mma")
    text = f"# before warpgroup_mma\n{program_text(before)}\n# after\n{program_text(after)}\n"
    golden("pass_warpgroup_mma_tma.txt", text)
    verify_program(after, launch_limits=False)
    tz.run_and_compare(state.dag, lower(state))


def test_an_n_major_b_tile_of_128_columns_is_two_boxes_one_atom_apart():
    state = recipe_state(matmul_dag(64, 128, 128), 2, n_tiles=8)
    b_copies = [c for c in copies(lower(state)) if c.map.buffer.name == "B"]
    offsets = sorted({int(c.offset.value) for c in b_copies if isinstance(c.offset, Const)})
    assert {c.map.box for c in b_copies} == {(64, 64)} and offsets == [0, 64 * 64]


def test_a_stage_the_pass_cannot_prove_keeps_its_cp_async_fetch():
    """A K chunk of 32 elements: the A tile's rows are 64-byte lines, no 128B box; the marked
    stages keep the cooperative cp.async pipeline and the product is still right."""
    dag = matmul_dag(128, 128, 128)
    program = lower(recipe_state(dag, 3, chunk=2), verify=True)
    kernel = program.kernels[0]
    assert not ti.uses_tma(kernel)
    assert any(isinstance(s, ir.AsyncCommit) for s in ir.iter_stmts(kernel.body))
    tz.run_and_compare(dag, program)


def test_the_cp_async_copy_is_the_default_and_prints_nothing():
    dag = matmul_dag(128, 128, 128)
    state = recipe_state(dag, 3, copy="cp.async")
    assert not ti.uses_tma(lower(state).kernels[0])
    assert 'operand_copy("tma")' in dag.print_python_schedule(recipe_state(dag, 3))


def test_a_refill_before_the_slot_is_released_fails_in_the_interpreter():
    from autosched.lower.interpreter import InterpreterError

    dag = matmul_dag(128, 128, 256)
    program = lower(recipe_state(dag, 2))
    loop = main_loop(program)
    stmts = loop.body.stmts
    early = [stmts[0], stmts[-1], *stmts[1:-1]]  # the refill before the wgmmas that read it
    loop.body = ir.Seq(early)
    with pytest.raises(InterpreterError):
        tz.run_and_compare(dag, program)


@needs_nvcc
def test_a_tma_fed_state_compiles_for_sm_90a_without_spills():
    from autosched import build

    dag = matmul_dag(160, 128, 192)
    kernel = build(dag, recipe_state(dag, 3))
    assert "cp.async.bulk.tensor.2d" in kernel.source and "cp.async.cg" not in kernel.source
    (launch,) = kernel.launches
    assert [m.arg for m in launch.tensor_maps] == ["A", "B"]
    (res,) = compile_resources(kernel.source, arch="sm_90").values()
    assert res.spill_bytes == 0


@pytest.mark.gpu
@pytest.mark.parametrize(
    "make, slots", [(lambda: matmul_dag(160, 128, 192), 3), (batch_matmul_dag, 4)]
)
def test_gpu_tma_fed_states_match_numpy(make, slots):
    from tests.gpu.test_gpu_kernels import run_on_gpu

    dag = make()
    state = recipe_state(dag, slots)
    assert ti.uses_tma(lower(state).kernels[0])
    run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)


def test_the_features_see_a_box_copy_as_the_cooperative_copy_without_its_address_math():
    """A TMA copy is walked as the copy it replaces: as many rows, the same bytes stored into
    shared memory, fewer integer operations (no swizzled addresses per thread)."""
    from autosched.features.extract import FEATURE_NAMES, extract_features

    dag = matmul_dag(128, 128, 256)
    tma = extract_features(lower(recipe_state(dag, 3)))
    cp_async = extract_features(lower(recipe_state(dag, 3, copy="cp.async")))
    assert tma.shape == cp_async.shape
    divmod_at = list(FEATURE_NAMES).index("int_divmod")
    fewer = tma[:, divmod_at] < cp_async[:, divmod_at]
    assert fewer.sum() >= 2  # the rows of the A and B copies
    # and who issues the copies tells the two apart: the copy engine, or each thread's cp.async
    engine, issued = (list(FEATURE_NAMES).index(n) for n in ("copy_engine", "async_copy"))
    assert (tma[:, engine] > 0).tolist() == (cp_async[:, issued] > 0).tolist()
    assert (tma[:, engine] > 0).sum() >= 2
    assert not tma[:, issued].any() and not cp_async[:, engine].any()


@pytest.mark.gpu
def test_gpu_a_tma_fed_1x1_conv_matches_numpy():
    from tests.gpu.test_gpu_kernels import run_on_gpu

    dag, state = conv_1x1_state(stride=1)
    kernel = run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
    assert kernel.launches[0].tensor_maps[0].dims == (256, 128)  # data as [N*H*W, C]
