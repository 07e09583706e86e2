"""Seed 000's AutoTVM conv2d template (`tune_conv2d_cuda`, `conv2d_no_batching`)
expressed with the State API (`workloads_for_tests.autotvm_conv_state`) on ResNet's last 3x3
layer (1x512x7x7 -> 512, pad 1, stride 1).

Checked here, without a GPU: the steps replay and print as the template's Python schedule; the
CPU interpreter matches numpy on reduced shapes for several points of the template's space; the
full-size kernel lowers fast and nvcc compiles it with no spills. The GPU run is in
test_gpu_kernels.py.

An xfail test records where autosched differs from TVM on this template: a cache_read of a
cache stage for the same reader (the template's `AL = cache_read(AA, ...)`) leaves the new stage
unread, so autotvm_conv_state writes that chain the other way round.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from autosched.codegen.cuda import codegen_program
from autosched.lower.device_passes import device_program
from autosched.lower.interpreter import run_program
from autosched.lower.lowering import lower
from autosched.schedule.dataflow import reads_of
from autosched.task.evaluate import evaluate
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.workloads_for_tests import (
    AUTOTVM_CONV_CFG,
    AUTOTVM_SEED_BEST,
    AUTOTVM_SMALL_CFGS,
    autotvm_conv_state,
    conv2d_dag,
)

SMALL = {"co": 16, "ci": 8}  # the reduced conv for the interpreter: 1x8x7x7 -> 16, 3x3, pad 1


def launch_shape(cfg, co=512, h=7, w=7):
    """(grid, block) the template gives: blockIdx/threadIdx z, y, x = f, y, x."""
    parts = {k: (n // math.prod(cfg[k][1:]), cfg[k][2]) for k, n in
             (("tile_f", co), ("tile_y", h), ("tile_x", w))}  # fmt: skip
    grid = (parts["tile_x"][0], parts["tile_y"][0], parts["tile_f"][0])
    block = (parts["tile_x"][1], parts["tile_y"][1], parts["tile_f"][1])
    return grid, block


def interpret_and_compare(dag, state, seed=0):
    """Lower, run on the CPU interpreter on random inputs, compare with the naive evaluator."""
    program = lower(state)
    rng = np.random.default_rng(seed)
    data = rng.uniform(-1, 1, dag.tensors[0].shape).astype("float32")
    kernel = rng.uniform(-1, 1, dag.tensors[1].shape).astype("float32")
    out = np.full(dag.tensors[-1].shape, np.nan, "float32")
    run_program(program, {"data": data, "kernel": kernel, "conv2d_nchw": out})
    want = evaluate(dag, {"data": data, "kernel": kernel})["conv2d_nchw"]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    return program


# ---- the step list and its Python printout ----------------------------------------------------

# The template's lines (seed 000) in our names, in order; each follows the template line quoted
# above it. `data` there is the padded tensor (`pad_temp`), `conv` is `conv2d_nchw`, OL its
# local cache; AA/AL and WW/WL are written as chains (see autotvm_conv_state).
EXPECTED_LINES = """\
conv2d_nchw_local, = s.cache_write([conv2d_nchw], "local")
pad_temp_local = s.cache_read(pad_temp, "local", [conv2d_nchw_local])
pad_temp_shared = s.cache_read(pad_temp, "shared", [pad_temp_local])
kernel_local = s.cache_read(kernel, "local", [conv2d_nchw_local])
kernel_shared = s.cache_read(kernel, "shared", [kernel_local])
s[pad_temp].compute_inline()
conv2d_nchw_ff_o_i, conv2d_nchw_ff_i = s[conv2d_nchw].split(conv2d_nchw_ff, factor=2)
conv2d_nchw_ff_o_o_i, conv2d_nchw_ff_o_i = s[conv2d_nchw].split(conv2d_nchw_ff_o_i, factor=8)
conv2d_nchw_ff_o_o_o, conv2d_nchw_ff_o_o_i = s[conv2d_nchw].split(conv2d_nchw_ff_o_o_i, factor=2)
conv2d_nchw_xx_o_o_i, conv2d_nchw_xx_o_i = s[conv2d_nchw].split(conv2d_nchw_xx_o_i, factor=7)
s[conv2d_nchw].bind(conv2d_nchw_ff_o_o_o, te.thread_axis("blockIdx.z"))
s[conv2d_nchw].bind(conv2d_nchw_yy_o_o_o, te.thread_axis("blockIdx.y"))
s[conv2d_nchw].bind(conv2d_nchw_xx_o_o_o, te.thread_axis("blockIdx.x"))
s[conv2d_nchw].bind(conv2d_nchw_ff_o_o_i, te.thread_axis("vthread"))
s[conv2d_nchw].bind(conv2d_nchw_yy_o_o_i, te.thread_axis("vthread"))
s[conv2d_nchw].bind(conv2d_nchw_xx_o_o_i, te.thread_axis("vthread"))
s[conv2d_nchw].bind(conv2d_nchw_ff_o_i, te.thread_axis("threadIdx.z"))
s[conv2d_nchw].bind(conv2d_nchw_yy_o_i, te.thread_axis("threadIdx.y"))
s[conv2d_nchw].bind(conv2d_nchw_xx_o_i, te.thread_axis("threadIdx.x"))
s[conv2d_nchw].reorder(conv2d_nchw_nn, conv2d_nchw_ff_o_o_o, conv2d_nchw_yy_o_o_o, conv2d_nchw_xx_o_o_o, conv2d_nchw_ff_o_o_i, conv2d_nchw_yy_o_o_i, conv2d_nchw_xx_o_o_i, conv2d_nchw_ff_o_i, conv2d_nchw_yy_o_i, conv2d_nchw_xx_o_i, conv2d_nchw_ff_i, conv2d_nchw_yy_i, conv2d_nchw_xx_i)
s[conv2d_nchw_local].compute_at(s[conv2d_nchw], conv2d_nchw_xx_o_i)
conv2d_nchw_local_rc_o_i, conv2d_nchw_local_rc_i = s[conv2d_nchw_local].split(conv2d_nchw_local_rc, factor=2)
conv2d_nchw_local_rc_o_o, conv2d_nchw_local_rc_o_i = s[conv2d_nchw_local].split(conv2d_nchw_local_rc_o_i, factor=4)
s[conv2d_nchw_local].reorder(conv2d_nchw_local_rc_o_o, conv2d_nchw_local_ry_o_o, conv2d_nchw_local_rx_o_o, conv2d_nchw_local_rc_o_i, conv2d_nchw_local_ry_o_i, conv2d_nchw_local_rx_o_i, conv2d_nchw_local_rc_i, conv2d_nchw_local_ry_i, conv2d_nchw_local_rx_i, conv2d_nchw_local_nn_c, conv2d_nchw_local_ff_c, conv2d_nchw_local_yy_c, conv2d_nchw_local_xx_c)
s[pad_temp_shared].compute_at(s[conv2d_nchw_local], conv2d_nchw_local_rx_o_o)
s[kernel_shared].compute_at(s[conv2d_nchw_local], conv2d_nchw_local_rx_o_o)
s[pad_temp_local].compute_at(s[conv2d_nchw_local], conv2d_nchw_local_rx_o_i)
s[kernel_local].compute_at(s[conv2d_nchw_local], conv2d_nchw_local_rx_o_i)
pad_temp_shared_ax0_ax1_fused_ax2_fused_ax3_fused = s[pad_temp_shared].fuse(pad_temp_shared_ax0, pad_temp_shared_ax1, pad_temp_shared_ax2, pad_temp_shared_ax3)
pad_temp_shared_ax0_ax1_fused_ax2_fused_ax3_fused_o, pad_temp_shared_ax0_ax1_fused_ax2_fused_ax3_fused_i_o = s[pad_temp_shared].split(pad_temp_shared_ax0_ax1_fused_ax2_fused_ax3_fused, nparts=8)
s[pad_temp_shared].bind(pad_temp_shared_ax0_ax1_fused_ax2_fused_ax3_fused_o, te.thread_axis("threadIdx.z"))
s[pad_temp_shared].bind(pad_temp_shared_ax0_ax1_fused_ax2_fused_ax3_fused_i_o, te.thread_axis("threadIdx.y"))
s[pad_temp_shared].bind(pad_temp_shared_ax0_ax1_fused_ax2_fused_ax3_fused_i_i_o, te.thread_axis("threadIdx.x"))
kernel_shared_ax0_ax1_fused_ax2_fused_ax3_fused = s[kernel_shared].fuse(kernel_shared_ax0, kernel_shared_ax1, kernel_shared_ax2, kernel_shared_ax3)
kernel_shared_ax0_ax1_fused_ax2_fused_ax3_fused_i_i_o, kernel_shared_ax0_ax1_fused_ax2_fused_ax3_fused_i_i_i = s[kernel_shared].split(kernel_shared_ax0_ax1_fused_ax2_fused_ax3_fused_i_i_o, nparts=7)
s[kernel_shared].bind(kernel_shared_ax0_ax1_fused_ax2_fused_ax3_fused_i_i_o, te.thread_axis("threadIdx.x"))
s[conv2d_nchw].pragma(conv2d_nchw_nn, "auto_unroll_max_step", 512)
s[conv2d_nchw].pragma(conv2d_nchw_nn, "unroll_explicit", True)
"""  # noqa: E501 (the printout's lines as printed)


@pytest.fixture(scope="module")
def dag():
    return conv2d_dag()


def test_step_list_has_the_template_shape(dag):
    """The template's primitives in its order: caches, inline, 3 four-way splits, 9 binds,
    reorder, compute_at, 3 three-way splits, reorder, 4 compute_at, 2 x (fuse, split, 3 binds),
    the unroll pragma."""
    tags = [s.TAG for s in autotvm_conv_state(dag).steps]
    assert tags == (
        ["CHW"] + ["CHR"] * 4 + ["CI"] + ["SP"] * 3 + ["AN"] * 9 + ["RE", "CA"]
        + ["SP"] * 3 + ["RE"] + ["CA"] * 4 + ["FU", "SP", "AN", "AN", "AN"] * 2 + ["PR"]
    )  # fmt: skip
    # unroll_explicit=0 adds its own pragma step
    off = autotvm_conv_state(dag, {**AUTOTVM_CONV_CFG, "unroll_explicit": 0})
    assert [s.TAG for s in off.steps][-2:] == ["PR", "PR"]
    assert not off["conv2d_nchw"].unroll_explicit and off["conv2d_nchw"].auto_unroll_max_step == 512


def test_python_schedule_shows_the_template_lines(dag):
    ours = dag.print_python_schedule(autotvm_conv_state(dag)).splitlines()
    rest = iter(ours)
    for line in EXPECTED_LINES.splitlines():  # a subsequence: `in` consumes the iterator
        assert line in rest, f"line missing or out of order:\n{line}\nprintout:\n" + "\n".join(ours)
    assert sum("te.thread_axis" in line for line in ours) == 9 + 2 * 3
    assert sum(".split(" in line for line in ours) == 3 * 3 + 3 * 2 + 2 * 3
    assert sum("nparts=" in line for line in ours) == 2 * 3
    assert ours[-2:] == EXPECTED_LINES.splitlines()[-2:]


def test_replay_gives_the_same_state(dag):
    state = autotvm_conv_state(dag, AUTOTVM_SEED_BEST)
    replayed = dag.get_init_state()
    for step in state.steps:
        replayed = replayed.apply(step)
    assert replayed == state
    assert dag.print_python_schedule(replayed) == dag.print_python_schedule(state)


def test_loop_structure(dag):
    """The thread binds and cache attachments land where the template puts them."""
    s = autotvm_conv_state(dag)
    out = s["conv2d_nchw"]
    assert [(it.name, it.extent, it.annotation) for it in out.iters] == [
        ("nn", 1, "none"),
        ("ff_o_o_o", 16, "blockIdx.z"), ("yy_o_o_o", 7, "blockIdx.y"),
        ("xx_o_o_o", 1, "blockIdx.x"),
        ("ff_o_o_i", 2, "vthread"), ("yy_o_o_i", 1, "vthread"), ("xx_o_o_i", 1, "vthread"),
        ("ff_o_i", 8, "threadIdx.z"), ("yy_o_i", 1, "threadIdx.y"), ("xx_o_i", 7, "threadIdx.x"),
        ("ff_i", 2, "none"), ("yy_i", 1, "none"), ("xx_i", 1, "none"),
    ]  # fmt: skip
    assert out.auto_unroll_max_step == 512 and out.unroll_explicit
    out_id, ol_id = s.stage_index("conv2d_nchw"), s.stage_index("conv2d_nchw.local")
    assert s["conv2d_nchw.local"].attach == (out_id, "xx_o_i")
    for cache, loop in (("shared", "rx_o_o"), ("local", "rx_o_i")):
        for src in ("pad_temp", "kernel"):
            stage = s[f"{src}.{cache}"]
            assert stage.attach == (ol_id, loop) and stage.scope == cache
    assert s["pad_temp"].compute_at == "inlined"
    for load in ("pad_temp.shared", "kernel.shared"):
        assert [(it.extent, it.annotation) for it in s[load].iters[:3]] == [
            (8, "threadIdx.z"),
            (1, "threadIdx.y"),
            (7, "threadIdx.x"),
        ]


# ---- lowering, interpreter ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(AUTOTVM_SMALL_CFGS))
def test_reduced_shape_matches_numpy(name):
    cfg = AUTOTVM_SMALL_CFGS[name]
    dag = conv2d_dag(**SMALL)
    program = interpret_and_compare(dag, autotvm_conv_state(dag, cfg))
    assert len(program.kernels) == 1
    kernel = program.kernels[0]
    assert (kernel.grid, kernel.block) == launch_shape(cfg, co=SMALL["co"])
    assert {b.scope for b in kernel.allocs} == {"local", "shared"}


def test_reduced_shape_other_inputs_and_padding_edges():
    """A second seed, and a 5x5 image so that the padded borders are a larger share."""
    cfg = {**AUTOTVM_SMALL_CFGS["chosen"], "tile_x": (-1, 1, 5, 1), "tile_y": (-1, 1, 1, 1)}
    dag = conv2d_dag(h=5, w=5, **SMALL)
    interpret_and_compare(dag, autotvm_conv_state(dag, cfg), seed=3)


def test_full_size_lowers_to_the_template_kernel(dag):
    program = lower(autotvm_conv_state(dag))
    (kernel,) = program.kernels
    assert (kernel.grid, kernel.block) == ((1, 7, 16), (7, 1, 8)) == launch_shape(AUTOTVM_CONV_CFG)
    sizes = {b.name: (b.scope, b.size) for b in kernel.allocs}
    assert sizes["pad_temp_shared"] == ("shared", 8 * 3 * 9)  # 8 channels x 3 rows x 9 cols
    assert sizes["pad_temp_local"] == ("local", 2 * 3 * 3)  # rc_i x ry x (1 pixel + rx - 1)
    assert sizes["kernel_local"][0] == "local" and sizes["kernel_shared"][0] == "shared"
    src = codegen_program(program)
    assert "blockIdx.z" in src and "threadIdx.z" in src and "__syncthreads();" in src
    assert "for (int conv2d_nchw_local_rc_o_o = 0; conv2d_nchw_local_rc_o_o < 64;" in src


def test_full_size_lower_and_codegen_time(dag):
    state = autotvm_conv_state(dag)
    codegen_program(device_program(lower(state)))
    t0 = time.process_time()
    for _ in range(5):
        codegen_program(device_program(lower(state)))
    per = (time.process_time() - t0) / 5
    print(f"lower + codegen of the AutoTVM-style conv2d state: {per * 1e3:.1f} ms (CPU time)")
    assert per < 0.2  # the goal is well under 50 ms; this bound only catches regressions


@needs_nvcc
@pytest.mark.parametrize("cfg", [AUTOTVM_CONV_CFG, AUTOTVM_SEED_BEST], ids=["chosen", "seed_best"])
def test_full_size_compiles_without_spills(dag, cfg):
    source = codegen_program(device_program(lower(autotvm_conv_state(dag, cfg))))
    resources = compile_resources(source, arch="sm_90")
    assert len(resources) == 1
    for name, res in resources.items():
        print(name, res)
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, (name, res)
        assert res.stack_bytes == 0 and res.registers <= 255, (name, res)


# ---- TVM semantics the template relies on -----------------------------------------------------


def test_template_order_cache_of_a_cache(dag):
    """The template's order, `AA = s.cache_read(data, "shared", [OL])` then
    `AL = s.cache_read(AA, "local", [OL])`: the reader follows the chain to the last cache."""
    s = dag.get_init_state().cache_write("conv2d_nchw", "local")
    s = s.cache_read("pad_temp", "shared", ["conv2d_nchw.local"])
    s = s.cache_read("pad_temp.shared", "local", ["conv2d_nchw.local"])
    ol, al, aa = (
        s.stage_index(n) for n in ("conv2d_nchw.local", "pad_temp.shared.local", "pad_temp.shared")
    )
    assert reads_of(s, ol) >= {al} and aa not in reads_of(s, ol)
    assert reads_of(s, al) == {aa}
    s.compute_at("pad_temp.shared.local", "conv2d_nchw.local", "rx")


def test_cache_of_a_cache_lowers_correctly():
    from tests.workloads_for_tests import matmul_dag

    mm = matmul_dag(16, 12, 8)
    s = mm.get_init_state().cache_read("A", "shared", ["C"]).cache_read("A.shared", "local", ["C"])
    s = s.compute_at("A.shared", "C", "i").compute_at("A.shared.local", "C", "j")
    rng = np.random.default_rng(1)
    a, b = (
        rng.standard_normal((16, 8), dtype=np.float32),
        rng.standard_normal((8, 12), dtype=np.float32),
    )
    arrays = {"A": a, "B": b, "C": np.zeros((16, 12), np.float32)}
    run_program(lower(s), arrays)
    np.testing.assert_allclose(arrays["C"], a @ b, rtol=1e-5, atol=1e-5)


def test_vthreads_share_one_shared_tile(dag):
    """TVM's vthread semantics: the shared tiles serve every virtual thread of the block (fetched
    once per reduction step), the thread's accumulator and local caches hold all its virtual
    threads' values, and the reduction loop nest appears once (vthreads injected inside)."""
    (kernel,) = lower(autotvm_conv_state(dag)).kernels
    sizes = {b.name: b.size for b in kernel.allocs}
    # a block: 2 vthreads x 8 threads x 2 filters = 32 filters; 8 channels; 3x3 taps
    assert sizes["kernel_shared"] == 32 * 8 * 9
    assert sizes["conv2d_nchw_local"] == 2 * 2  # vthreads x ff_i
    assert sizes["kernel_local"] == 2 * 2 * 2 * 9  # vthreads x ff_i x rc_i x taps
    assert sizes["pad_temp_local"] == 2 * 3 * 3  # the same for both vthreads (they differ in f)
    src = codegen_program(lower(autotvm_conv_state(dag)))
    assert src.count("for (int conv2d_nchw_local_rc_o_o = 0;") == 1
    assert src.count("__syncthreads();") == 3
