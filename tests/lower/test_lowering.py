"""Lowering: hand-written schedules run by the CPU interpreter equal the numpy reference, and
their CUDA compiles with nvcc with no spills (the schedules (b), (c), (d), (f) of
workloads_for_tests.py and test_gpu_kernels.py)."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.lower.device_passes import device_program
from autosched.lower.interpreter import run_program
from autosched.lower.lowering import lower
from autosched.schedule.compute_dag import ComputeDAG
from tests.interpreter_check import lower_and_compare
from tests.workloads_for_tests import (
    SEED_001_TILES,
    SEED_001_VECTORS,
    SEED_002_TILES,
    SEED_002_VECTORS,
    conv2d_bias_relu_dag,
    matmul_dag,
    seed_conv_state,
)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def assert_no_spills(program):
    from measure import compile_resources

    res = compile_resources(codegen_program(device_program(program)), arch="sm_90")
    for name, r in res.items():
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, (name, r)
    return res


SMALL_TILES = {
    "nn": (1, 1, 1, 1),
    "ff": (1, 8, 2, 1),
    "yy": (1, 1, 1, 1),
    "xx": (1, 1, 7, 1),
    "rc": (2, 2),
    "ry": (1, 1),
    "rx": (3, 1),
}


@pytest.mark.parametrize(
    "tiles,vectors",
    [(SMALL_TILES, SEED_002_VECTORS), ({**SEED_001_TILES, "ff": (1, 8, 1, 1)}, SEED_001_VECTORS)],
)
def test_seed_conv_schedule_matches_numpy(tiles, vectors):
    dag = conv2d_bias_relu_dag(co=32, ci=4)
    lower_and_compare(dag, seed_conv_state(dag, tiles, vectors))


@needs_nvcc
def test_seed_conv_full_size_compiles_without_spills_and_lowers_fast():
    dag = conv2d_bias_relu_dag()
    state = seed_conv_state(dag, SEED_002_TILES, SEED_002_VECTORS)
    lower(state)
    t0 = time.perf_counter()
    for _ in range(5):
        program = lower(state)
        codegen_program(device_program(program))
    per = (time.perf_counter() - t0) / 5
    print(f"lower + codegen of the seed conv2d state: {per * 1e3:.1f} ms")
    assert per < 0.2  # the goal is well under 50 ms; this bound only catches regressions
    kernel = program.kernels[0]
    assert kernel.block == (64, 1, 1) and kernel.grid == (28, 1, 1)
    assert {b.name: b.size for b in kernel.allocs} == {
        "conv2d_nchw": 14,
        "pad_temp_shared": 72,
        "kernel_shared": 3072,
    }
    assert_no_spills(program)


def tiled_matmul_state(dag, tiles_i=(1, 4, 2, 1), tiles_j=(2, 4, 1, 2), tiles_k=(2, 2), vec=4):
    s = dag.get_init_state()
    s = s.cache_write("C", "local")
    ids = {}
    for ax, t in (("i_c", tiles_i), ("j_c", tiles_j), ("k", tiles_k)):
        ids[ax] = len(s.steps)
        s = s.split("C.local", ax, list(t))
    s = s.reorder(
        "C.local",
        [
            "i_c_o_o_o_o",
            "j_c_o_o_o_o",
            "i_c_o_o_o_i",
            "j_c_o_o_o_i",
            "i_c_o_o_i",
            "j_c_o_o_i",
            "k_o_o",
            "k_o_i",
            "i_c_o_i",
            "j_c_o_i",
            "k_i",
            "i_c_i",
            "j_c_i",
        ],
    )
    for ax, src in (("i", "i_c"), ("j", "j_c")):
        s = s.follow_split("C", ax, ids[src], 3)
    s = s.reorder("C", ["i_o_o_o", "j_o_o_o", "i_o_o_i", "j_o_o_i", "i_o_i", "j_o_i", "i_i", "j_i"])
    s = s.compute_at("C.local", "C", "j_o_i")
    for name in ("A", "B"):
        s = s.cache_read(name, "shared", ["C.local"])
        s = s.compute_at(f"{name}.shared", "C.local", "k_o_o")
    for lvl, (suffix, tag) in enumerate(
        (("_o_o_o", "blockIdx.x"), ("_o_o_i", "vthread"), ("_o_i", "threadIdx.x"))
    ):
        s = s.fuse("C", [f"i{suffix}", f"j{suffix}"])
        s = s.bind("C", s["C"].iters[lvl].name, tag)
    for name in ("A.shared", "B.shared"):
        s = s.fuse(name, ["ax0", "ax1"])
        s = s.split(name, "ax0_ax1_fused", [vec])
        s = s.vectorize(name, "ax0_ax1_fused_i")
        s = s.follow_fused_split(name, "ax0_ax1_fused_o", [ids["i_c"], ids["j_c"]], 1, True)
        s = s.bind(name, "ax0_ax1_fused_o_i", "threadIdx.x")
    return s.pragma("C.local", 0, "auto_unroll_max_step", 64)


def test_shared_memory_tiled_matmul_with_float4_fetching():
    dag = matmul_dag(32, 32, 32)
    program = lower_and_compare(dag, tiled_matmul_state(dag))
    kernel = program.kernels[0]
    assert {b.scope for b in kernel.allocs} == {"local", "shared"}
    if shutil.which("nvcc"):
        assert "float4" in codegen_program(device_program(program))
        assert_no_spills(program)


def test_non_dividing_split_gets_a_guard():
    dag = matmul_dag(30, 20, 7)  # no tile below divides 30 or 7
    s = dag.get_init_state()
    s = s.split("C", "i", [4]).split("C", "j", [8]).split("C", "k", [3])
    s = s.reorder("C", ["i_o", "j_o", "i_i", "j_i", "k_o", "k_i"])
    s = s.fuse("C", ["i_o", "j_o"]).bind("C", "i_o_j_o_fused", "blockIdx.x")
    s = s.fuse("C", ["i_i", "j_i"]).bind("C", "i_i_j_i_fused", "threadIdx.x")
    program = lower_and_compare(dag, s)
    from autosched.lower.ir import IfThenElse, iter_stmts

    assert any(isinstance(x, IfThenElse) for x in iter_stmts(program.kernels[0].body))


def test_fused_elementwise_ops_inline_into_one_kernel():
    x = te.placeholder((4, 6, 5), name="x")
    y = te.placeholder((6, 1), name="y")
    z = topi.relu(topi.multiply(topi.add(x, y), 2.0))
    dag = ComputeDAG([x, y, z])
    s = dag.get_init_state()
    for st in list(s.stages):
        if not st.is_placeholder and st.op is not z.op:
            s = s.compute_inline(st.name)
    out = z.op.name
    s = s.fuse(out, [a.name for a in z.op.axis])
    fused = s[out].iters[0].name
    s = (
        s.split(out, fused, [32])
        .bind(out, fused + "_o", "blockIdx.x")
        .bind(out, fused + "_i", "threadIdx.x")
    )
    program = lower_and_compare(dag, s)
    assert len(program.kernels) == 1
    if shutil.which("nvcc"):
        assert_no_spills(program)


def test_unscheduled_multi_stage_dag_lowers_to_one_kernel_per_root_stage():
    x = te.placeholder((8, 16), name="x")
    dag = ComputeDAG([x, topi.nn.softmax(x)])
    program = lower_and_compare(dag, dag.get_init_state())
    assert len(program.kernels) == 4  # max, exp, sum, divide: each its own launch


def test_nested_non_dividing_reduce_split_counts_each_element_once():
    """k (10) split by 4, then k_i (4) split by 3: k_i's recomposed value reaches 5 and must be
    guarded, or elements of the next k_o tile are added twice."""
    from tests.workloads_for_tests import matmul_dag

    dag = matmul_dag(8, 6, 10)
    state = dag.get_init_state().split("C", "k", [4]).split("C", "k_i", [3])
    rng = np.random.default_rng(0)
    a, b = (
        rng.standard_normal((8, 10), dtype=np.float32),
        rng.standard_normal((10, 6), dtype=np.float32),
    )
    arrays = {"A": a, "B": b, "C": np.zeros((8, 6), np.float32)}
    run_program(lower(state), arrays)
    np.testing.assert_allclose(arrays["C"], a @ b, rtol=1e-5, atol=1e-5)


def test_compiled_statements_counts_the_loops_nvcc_unrolls():
    """The builder's compile-cost estimate: loops marked unroll are copied, serial loops are
    copied when their copies stay within COMPILER_UNROLL_STATEMENTS (nvcc unrolls those itself)."""
    from autosched.lower import ir
    from autosched.lower.unrolling import COMPILER_UNROLL_STATEMENTS as LIMIT
    from autosched.lower.unrolling import compiled_statements
    from autosched.te.expr import Const, Var

    buf = ir.Buffer("b", (4,), "float32", "local")
    store = ir.Store(buf, Const(0, "int32"), Const(1.0, "float32"))

    def loop(extent, kind, body):
        return ir.For(Var("i", "int32"), extent, kind, body)

    assert compiled_statements(loop(4, "unroll", store)) == 4
    assert compiled_statements(loop(LIMIT, "serial", store)) == LIMIT
    assert compiled_statements(loop(LIMIT + 1, "serial", store)) == 1
    assert compiled_statements(loop(1000, "unroll", store)) == 1000
    inner = loop(16, "unroll", ir.Seq([store, store]))  # 32 statements
    assert compiled_statements(loop(4, "serial", inner)) == 128  # 4 x 32: within the limit
    assert compiled_statements(loop(5, "serial", inner)) == 32  # 5 x 32: kept a loop
    assert compiled_statements(ir.IfThenElse(Const(True, "bool"), inner, store)) == 33
