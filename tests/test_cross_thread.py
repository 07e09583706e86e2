"""Cross-thread reductions (issues 4(e) and 6): a reduction iterator bound to threadIdx lowers to
per-thread partial sums combined by an `AllReduce`; hand-written schedules (softmax, dense + bias,
a row sum with a non-dividing split) run on the CPU interpreter equal numpy and compile with
nvcc without spills; the sketch rule gives the softmax and dense sketches that structure, and
states sampled from them compute their DAG."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from autosched import ir, te, topi
from autosched.codegen_cuda import codegen_program
from autosched.compute_dag import ComputeDAG
from autosched.errors import LoweringError
from autosched.evaluate import evaluate
from autosched.interpreter import run_program
from autosched.ir_verify import verify_program
from autosched.lowering import lower

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


# ---- helpers ----------------------------------------------------------------------------------


def run_and_compare(dag: ComputeDAG, state, seed: int = 0) -> ir.Program:
    """Lower (verified), interpret on random inputs, compare every output with numpy."""
    program = lower(state)
    verify_program(program)
    rng = np.random.default_rng(seed)
    outputs = {b.name for b in program.outputs}
    arrays = {b.name: (np.full(b.shape, np.nan, b.dtype) if b.name in outputs
                       else rng.uniform(-1, 1, b.shape).astype(b.dtype))
              for b in program.params if b not in program.temps}
    expected = evaluate(dag, {t.name: arrays[t.name] for t in dag.tensors if t.name not in outputs})
    run_program(program, arrays)
    for name in outputs:
        np.testing.assert_allclose(arrays[name], expected[name], rtol=1e-4, atol=1e-5)
    return program


def compile_without_spills(program: ir.Program) -> str:
    """nvcc (sm_90): every kernel compiles, none spills; the CUDA source."""
    from measure import compile_resources

    source = codegen_program(program)
    resources = compile_resources(source, arch="sm_90")
    assert {k.name for k in program.kernels} <= set(resources), source
    for name, res in resources.items():
        assert res.spill_bytes == 0 and res.stack_bytes == 0, (name, res, source)
    return source


def allreduces(program: ir.Program) -> list[ir.AllReduce]:
    return [s for k in program.kernels for s in ir.iter_stmts(k.body) if isinstance(s, ir.AllReduce)]


# ---- hand-written schedules -------------------------------------------------------------------


def rowsum_dag(n: int, m: int, reducer=te.sum) -> ComputeDAG:
    x = te.placeholder((n, m), name="x")
    k = te.reduce_axis((0, m), name="k")
    return ComputeDAG([x, te.compute((n,), lambda i: reducer(x[i, k], axis=k), name="y")])


def rowsum_state(dag: ComputeDAG, threads: int):
    s = dag.get_init_state().split("y", "k", [threads])
    return s.bind("y", "i", "blockIdx.x").bind("y", "k_i", "threadIdx.x")


def softmax_state(dag: ComputeDAG, threads: int):
    """Ansor's cross-thread softmax: the output's row split by `threads` (inner part on
    threadIdx.x), both reductions following that split and computed per row (blockIdx.x)."""
    s = dag.get_init_state().compute_inline("T_softmax_exp")
    split = len(s.steps)
    s = s.split("T_softmax_norm", "i1", [threads]).bind("T_softmax_norm", "i1_i", "threadIdx.x")
    for red in ("T_softmax_expsum", "T_softmax_maxelem"):
        s = s.follow_split(red, "k", split, 1).bind(red, "k_i", "threadIdx.x")
        s = s.compute_at(red, "T_softmax_norm", "i0")
    return s.bind("T_softmax_norm", "i0", "blockIdx.x")


def dense_bias_state(dag: ComputeDAG, threads: int):
    """Ansor's cross-thread dense: the bias add split by `threads`, the dense's reduction
    following that split, computed per block of outputs."""
    s = dag.get_init_state()
    split = len(s.steps)
    s = s.split("T_add", "ax1", [threads]).bind("T_add", "ax1_i", "threadIdx.x")
    s = s.follow_split("T_dense", "k", split, 1).bind("T_dense", "k_i", "threadIdx.x")
    s = s.compute_at("T_dense", "T_add", "ax1_o")
    s = s.fuse("T_add", ["ax0", "ax1_o"])
    return s.bind("T_add", "ax0_ax1_o_fused", "blockIdx.x")


def softmax_dag(n: int, m: int) -> ComputeDAG:
    x = te.placeholder((n, m), name="x")
    return ComputeDAG([x, topi.nn.softmax(x)])


def dense_bias_dag(batch: int, n_in: int, n_out: int) -> ComputeDAG:
    data = te.placeholder((batch, n_in), name="data")
    weight = te.placeholder((n_out, n_in), name="weight")
    bias = te.placeholder((n_out,), name="bias")
    return ComputeDAG([data, weight, bias, topi.nn.dense(data, weight, bias)])


@pytest.mark.parametrize("n,m,threads", [(5, 100, 32), (3, 20, 32), (4, 130, 64), (2, 64, 64),
                                         (3, 50, 96)])
def test_rowsum_cross_thread_with_non_dividing_splits(n, m, threads):
    """Threads past the row's end contribute the identity; one thread stores each row."""
    dag = rowsum_dag(n, m)
    program = run_and_compare(dag, rowsum_state(dag, threads))
    (red,) = allreduces(program)
    assert red.reducer == "sum" and red.thread_tag == "threadIdx.x"
    assert program.kernels[0].block == (min(threads, m), 1, 1)


@pytest.mark.parametrize("reducer", [te.max, te.min])
def test_rowmax_and_rowmin_use_their_identity(reducer):
    """Inputs are all negative (max) / positive (min): a 0 for idle threads would show."""
    dag = rowsum_dag(3, 40, reducer)
    program = lower(rowsum_state(dag, 32))
    sign = -1.0 if reducer is te.max else 1.0
    x = (sign * np.random.default_rng(1).uniform(1, 2, (3, 40))).astype("float32")
    arrays = {"x": x, "y": np.full(3, np.nan, np.float32)}
    run_program(program, arrays)
    ref = x.max(axis=1) if reducer is te.max else x.min(axis=1)
    np.testing.assert_array_equal(arrays["y"], ref)


@pytest.mark.parametrize("n,m,threads", [(4, 64, 32), (3, 100, 32), (2, 50, 64), (2, 1000, 256)])
def test_softmax_cross_thread(n, m, threads):
    dag = softmax_dag(n, m)
    program = run_and_compare(dag, softmax_state(dag, threads))
    assert len(program.kernels) == 1  # both reductions and the output in one kernel
    t = min(threads, m)  # a split longer than the row leaves an extent of m
    assert {(r.reducer, r.extent) for r in allreduces(program)} == {("max", t), ("sum", t)}
    kernel = program.kernels[0]
    assert {b.scope for b in kernel.allocs} == {"shared", "local"}


@pytest.mark.parametrize("batch,n_in,n_out,threads", [(1, 48, 16, 32), (1, 784, 128, 32),
                                                      (2, 50, 20, 32), (1, 100, 40, 64)])
def test_dense_bias_cross_thread(batch, n_in, n_out, threads):
    dag = dense_bias_dag(batch, n_in, n_out)
    program = run_and_compare(dag, dense_bias_state(dag, threads))
    (red,) = allreduces(program)
    assert red.reducer == "sum" and program.kernels[0].block == (threads, 1, 1)


def test_the_reduced_element_must_not_depend_on_the_reduction_thread():
    """Dense computed inside the add's threadIdx.x loop would reduce different outputs
    together: lowering refuses it with a clear message."""
    dag = dense_bias_dag(1, 64, 32)
    s = dag.get_init_state()
    split = len(s.steps)
    s = s.split("T_add", "ax1", [32]).bind("T_add", "ax1_i", "threadIdx.x")
    s = s.follow_split("T_dense", "k", split, 1).bind("T_dense", "k_i", "threadIdx.x")
    s = s.compute_at("T_dense", "T_add", "ax1_i").bind("T_add", "ax1_o", "blockIdx.x")
    with pytest.raises(LoweringError, match="depends on threadIdx.x"):
        lower(s)


def test_reduction_bound_to_a_block_is_refused():
    dag = rowsum_dag(4, 64)
    s = dag.get_init_state().split("y", "k", [32]).bind("y", "k_o", "blockIdx.x")
    with pytest.raises(LoweringError, match="blockIdx"):
        lower(s.bind("y", "k_i", "threadIdx.x"))


@needs_nvcc
def test_cross_thread_programs_compile_without_spills():
    cases = [
        (softmax_dag(1024, 1024), softmax_state, 256),
        (softmax_dag(64, 100), softmax_state, 32),
        (dense_bias_dag(1, 784, 128), dense_bias_state, 64),
        (rowsum_dag(7, 100), rowsum_state, 96),
    ]
    for dag, make, threads in cases:
        source = compile_without_spills(lower(make(dag, threads)))
        assert "allreduce" in source
