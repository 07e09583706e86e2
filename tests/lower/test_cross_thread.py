"""Cross-thread reductions: a reduction iterator bound to threadIdx lowers to
per-thread partial sums combined by an `AllReduce`; hand-written schedules (softmax, dense + bias,
a row sum with a non-dividing split) run on the CPU interpreter equal numpy and compile with
nvcc without spills; the sketch rule gives the softmax and dense sketches that structure, and
states sampled from them compute their DAG."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.interpreter import run_program
from autosched.lower.ir_text import program_text
from autosched.lower.lowering import lower
from autosched.lower.verify import verify_program
from autosched.schedule.compute_dag import ComputeDAG
from tests.interpreter_check import interpret_and_compare
from tests.workloads_for_tests import suite_dag

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


# ---- helpers ----------------------------------------------------------------------------------


def run_and_compare(dag: ComputeDAG, state, seed: int = 0) -> ir.Program:
    """Lower (verified), interpret on random inputs, compare every output with numpy."""
    program = lower(state)
    verify_program(program)
    return interpret_and_compare(dag, program, seed)


def compile_without_spills(program: ir.Program) -> str:
    """nvcc (sm_90): every kernel compiles, none spills; the CUDA source."""
    from measure import compile_resources

    source = codegen_program(device_program(program))
    resources = compile_resources(source, arch="sm_90")
    assert {k.name for k in program.kernels} <= set(resources), source
    for name, res in resources.items():
        assert res.spill_bytes == 0 and res.stack_bytes == 0, (name, res, source)
    return source


def allreduces(program: ir.Program) -> list[ir.AllReduce]:
    return [
        s for k in program.kernels for s in ir.iter_stmts(k.body) if isinstance(s, ir.AllReduce)
    ]


# ---- hand-written schedules -------------------------------------------------------------------


def rowsum_dag(n: int, m: int, reducer=te.sum) -> ComputeDAG:
    x = te.placeholder((n, m), name="x")
    k = te.reduce_axis((0, m), name="k")
    return ComputeDAG([x, te.compute((n,), lambda i: reducer(x[i, k], axis=k), name="y")])


def rowsum_state(dag: ComputeDAG, threads: int):
    s = dag.get_init_state().split("y", "k", [threads])
    return s.bind("y", "i", "blockIdx.x").bind("y", "k_i", "threadIdx.x")


def softmax_state(dag: ComputeDAG, threads: int, at: str = "i0", inline_exp: bool = True):
    """Ansor's cross-thread softmax: the output's row split by `threads` (inner part on
    threadIdx.x), both reductions following that split and computed at the output's loop `at`
    (i0: per row, in shared memory; i1_i: per thread, in registers). Unless `inline_exp`, the
    exponentials are a stage of their own, computed per row in shared memory."""
    s = dag.get_init_state()
    split = len(s.steps)
    s = s.split("T_softmax_norm", "i1", [threads]).bind("T_softmax_norm", "i1_i", "threadIdx.x")
    if inline_exp:
        s = s.compute_inline("T_softmax_exp")
    else:
        s = s.follow_split("T_softmax_exp", "i1", split, 1)
        s = s.bind("T_softmax_exp", "i1_i", "threadIdx.x")
        s = s.compute_at("T_softmax_exp", "T_softmax_norm", "i0")
    for red in ("T_softmax_expsum", "T_softmax_maxelem"):
        s = s.follow_split(red, "k", split, 1).bind(red, "k_i", "threadIdx.x")
        s = s.compute_at(red, "T_softmax_norm", at)
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


@pytest.mark.parametrize(
    "n,m,threads", [(5, 100, 32), (3, 20, 32), (4, 130, 64), (2, 64, 64), (3, 50, 96)]
)
def test_rowsum_cross_thread_with_non_dividing_splits(n, m, threads):
    """Threads past the row's end contribute the identity; one thread stores each row."""
    dag = rowsum_dag(n, m)
    program = run_and_compare(dag, rowsum_state(dag, threads))
    (red,) = allreduces(program)
    assert red.reducer == "sum" and red.thread_tag == "threadIdx.x"
    assert program.kernels[0].block == (min(threads, m), 1, 1)


def test_rows_on_threadidx_x_reduced_over_threadidx_y():
    """Several rows per block: each threadIdx.x reduces its row over threadIdx.y (the
    AllReduce goes through shared memory); the first thread of each column stores."""
    dag = rowsum_dag(10, 50)
    s = dag.get_init_state().split("y", "i", [4]).split("y", "k", [16])
    s = s.bind("y", "i_o", "blockIdx.x").bind("y", "i_i", "threadIdx.x")
    program = run_and_compare(dag, s.bind("y", "k_i", "threadIdx.y"))
    (red,) = allreduces(program)
    assert red.thread_tag == "threadIdx.y" and program.kernels[0].block == (4, 16, 1)
    if shutil.which("nvcc"):
        compile_without_spills(program)


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


@pytest.mark.parametrize("m,threads", [(64, 32), (100, 64)])
def test_softmax_cross_thread_results_in_registers(m, threads):
    """Reductions computed inside the output's threadIdx.x loop: every thread keeps the
    combined value in its own registers (all threads store it), once per outer iteration."""
    dag = softmax_dag(3, m)
    program = run_and_compare(dag, softmax_state(dag, threads, at="i1_i"))
    kernel = program.kernels[0]
    assert {b.scope for b in kernel.allocs} == {"local"}
    text = program_text(program)
    assert "threadIdx.x == 0" not in text  # no single writer


@pytest.mark.parametrize("m,threads", [(64, 32), (100, 32)])
def test_softmax_cross_thread_with_an_exp_stage_in_shared_memory(m, threads):
    """The exponentials computed per row (a shared stage of its own) read the row maximum the
    AllReduce produced; the sum reads them."""
    dag = softmax_dag(3, m)
    program = run_and_compare(dag, softmax_state(dag, threads, inline_exp=False))
    shared = {b.name for b in program.kernels[0].allocs if b.scope == "shared"}
    assert shared == {"T_softmax_maxelem", "T_softmax_exp", "T_softmax_expsum"}


@pytest.mark.parametrize(
    "batch,n_in,n_out,threads",
    [(1, 48, 16, 32), (1, 784, 128, 32), (2, 50, 20, 32), (1, 100, 40, 64)],
)
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


def _product_reducer():
    return te.comm_reducer(lambda a, b: a * b, lambda dtype: 1.0, name="prod")


@pytest.mark.parametrize(
    "outer,reducer,why",
    [
        ("blockIdx.x", te.sum, "binds a reduction iterator to a blockIdx"),
        ("threadIdx.y", te.sum, "several thread axes"),
        (None, _product_reducer(), "not sum, max or min"),
    ],
)
def test_unsupported_cross_thread_reductions_are_refused(outer, reducer, why):
    """Lowering names what it cannot do instead of emitting a racy kernel."""
    dag = rowsum_dag(4, 64, reducer)
    s = dag.get_init_state().split("y", "k", [32]).bind("y", "k_i", "threadIdx.x")
    if outer is not None:
        s = s.bind("y", "k_o", outer)
    with pytest.raises(LoweringError, match=why):
        lower(s)


@needs_nvcc
def test_cross_thread_programs_compile_without_spills():
    cases = [
        (softmax_dag(1024, 1024), softmax_state, 256),
        (softmax_dag(64, 100), softmax_state, 32),
        (dense_bias_dag(1, 784, 128), dense_bias_state, 64),
        (rowsum_dag(7, 100), rowsum_state, 96),
        (softmax_dag(64, 100), lambda dag, t: softmax_state(dag, t, at="i1_i"), 64),
        (softmax_dag(64, 100), lambda dag, t: softmax_state(dag, t, inline_exp=False), 32),
    ]
    from concurrent.futures import ThreadPoolExecutor

    programs = [lower(make(dag, threads)) for dag, make, threads in cases]
    with ThreadPoolExecutor(2) as pool:
        assert all("allreduce" in source for source in pool.map(compile_without_spills, programs))


# ---- sketch rule and sampled states -----------------------------------------------------------


def cross_thread_stages(state) -> dict[str, tuple]:
    """Stage name -> (compute_at, attach iterator, iterators bound to threadIdx.x) of every
    stage that binds a reduction iterator to threadIdx.x."""
    out = {}
    for st in state.stages:
        bound = [it.name for it in st.iters if it.annotation == "threadIdx.x"]
        if any(it.kind == "reduce" for it in st.iters if it.name in bound):
            out[st.name] = (st.compute_at, st.attach[1] if st.attach else None, bound)
    return out


@pytest.mark.parametrize("reduced", [False, True])
def test_cross_thread_condition_matches_ansor_on_the_suite(reduced):
    """Applies to softmax's two reductions (longer than a warp) and to dense with batch 1
    (spatial 128 < reduction 784, within a block); to no other suite stage."""
    from autosched.sketch import rules as R
    from autosched.sketch import sketch_context
    from autosched.task.workloads import SUITE

    ctx, rule = sketch_context(), R.CrossThreadReduction()
    applies = {}
    for name in SUITE:
        state = suite_dag(name, reduced).get_init_state()
        hits = [
            st.name
            for i, st in enumerate(state.stages)
            if rule.condition(ctx, state, i) is not R.Cond.SKIP
        ]
        if hits:
            applies[name] = hits
    assert applies == {
        "softmax": ["T_softmax_maxelem", "T_softmax_expsum"],
        "dense_bias": ["T_dense"],
    }


def test_common_outer_iters_and_consumer_root():
    from autosched.sketch.utils import common_outer_iters, single_consumer_root

    softmax = suite_dag("softmax").get_init_state().compute_inline("T_softmax_exp")
    idx = {st.name: i for i, st in enumerate(softmax.stages)}
    norm, maxelem, expsum = idx["T_softmax_norm"], idx["T_softmax_maxelem"], idx["T_softmax_expsum"]
    assert common_outer_iters(softmax, maxelem, norm) == 1
    assert common_outer_iters(softmax, expsum, norm) == 1
    assert common_outer_iters(softmax, norm, maxelem) == 0  # not a reader
    assert single_consumer_root(softmax, expsum) == norm
    assert single_consumer_root(softmax, maxelem) is None  # expsum and norm are both roots
    attached = softmax.compute_at(expsum, norm, "i0")
    assert single_consumer_root(attached, maxelem) == norm  # now they share norm
    dense = suite_dag("dense_bias").get_init_state()
    assert common_outer_iters(dense, dense.stage_index("T_dense"), dense.stage_index("T_add")) == 2


def test_softmax_sketches_have_the_cross_thread_structure():
    """Seven sketches (each reduction cross-thread or not, reading vectors of its row or not:
    where both are computed in the output, it stores vectors too); the first computes both
    reductions per row inside the output, following its thread split: one kernel."""
    from autosched.schedule.steps import FollowSplitStep, print_python_schedule
    from autosched.sketch import generate_sketches

    every = generate_sketches(suite_dag("softmax"))
    keeps_row = [
        next((st.scope for st in s.stages if st.origin == "cache_read"), "") for s in every
    ]
    sketches = [s for s, kept in zip(every, keeps_row, strict=True) if not kept]
    print("\n" + print_python_schedule(sketches[0]))
    assert len(sketches) == 7
    # the two with both reductions in the output also keep the row in shared memory right after
    # their sketch, and the one that reads vectors keeps it in registers too (read plainly or
    # by streaming loads: row_in_shared.py)
    assert keeps_row == ["", "shared", "", "", "shared", "local", "local", "", "", "", ""]
    fused = sketches[0]
    assert cross_thread_stages(fused) == {
        "T_softmax_maxelem": ("attached", "i0", ["k_i"]),
        "T_softmax_expsum": ("attached", "i0", ["k_i"]),
    }
    norm = fused["T_softmax_norm"]
    assert [(it.name, it.annotation) for it in norm.iters] == [
        ("i0", "none"),
        ("i1_o", "none"),
        ("i1_i", "threadIdx.x"),
    ]
    follows = [s for s in fused.steps if isinstance(s, FollowSplitStep)]
    assert len(follows) == 2 and len({s.src_step_id for s in follows}) == 1  # one thread count
    kinds = [sorted(cross_thread_stages(s).items()) for s in sketches[1:]]
    in_vectors = ("attached", "i0", ["k_o_i"])  # 4 steps a thread, read as a vector
    assert kinds == [
        [("T_softmax_expsum", ("attached", "i0", ["k_i"]))],
        [("T_softmax_expsum", in_vectors), ("T_softmax_maxelem", in_vectors)],
        [("T_softmax_expsum", in_vectors)],
        [("T_softmax_maxelem", ("root", None, ["k_i"]))],  # its readers have no common root
        [("T_softmax_maxelem", ("root", None, ["k_o_i"]))],
        [],
    ]
    vector_norm = sketches[2]["T_softmax_norm"]  # the output stored 4 floats at a time
    assert [(it.name, it.annotation) for it in vector_norm.iters][-2:] == [
        ("i1_o_i", "threadIdx.x"),
        ("i1_i", "vectorize"),
    ]


def test_dense_sketches_have_the_cross_thread_structure():
    from autosched.schedule.steps import print_python_schedule
    from autosched.sketch import generate_sketches

    cross, per_block, per_block_vectors, _, tiled = generate_sketches(suite_dag("dense_bias"))
    assert cross_thread_stages(per_block_vectors) == {
        "T_dense": ("attached", "ax1", ["k_o_i"])  # 4 floats a thread: k_i, vectorised
    }
    print("\n" + print_python_schedule(cross))
    assert cross_thread_stages(cross) == {"T_dense": ("attached", "ax1_o", ["k_i"])}
    assert [(it.name, it.annotation) for it in cross["T_add"].iters] == [
        ("ax0", "none"),
        ("ax1_o", "none"),
        ("ax1_i", "threadIdx.x"),
    ]
    # one output per block: the bias add unsplit, the reduction computed at its last axis
    assert cross_thread_stages(per_block) == {"T_dense": ("attached", "ax1", ["k_i"])}
    assert [(it.name, it.annotation) for it in per_block["T_add"].iters] == [
        ("ax0", "none"),
        ("ax1", "none"),
    ]
    assert cross_thread_stages(tiled) == {}
    assert tiled["T_dense"].attach[1] == "ax1_o_i"


def test_thread_count_options():
    from autosched.sketch.init_rules import thread_count_options

    counts = (32, 64, 128, 256, 512, 1024)
    assert thread_count_options(64, counts, 32, 1024) == (32, 64)
    assert thread_count_options(48, counts, 32, 1024) == (32, 64)
    assert thread_count_options(784, counts, 32, 1024) == counts
    assert thread_count_options(10**6, counts, 32, 256) == (32, 64, 128, 256)
    assert thread_count_options(8, (48, 64), 32, 1024) == (64,)  # 48 is no multiple of a warp


@pytest.mark.parametrize("name", ["softmax", "dense_bias"])
def test_sampled_cross_thread_states_bind_blocks_and_threads(name):
    from autosched.sketch import SketchSampler, generate_sketches

    sketch = generate_sketches(suite_dag(name))[0]
    sampler = SketchSampler([sketch])
    states = sampler.sample(10, 0)
    assert states, sampler.rejected
    root, loops, length = {
        "softmax": ("T_softmax_norm", ["blockIdx.x", "none", "threadIdx.x"], 1024),
        "dense_bias": ("T_add", ["blockIdx.x", "threadIdx.x"], 784),
    }[name]
    for s in states:
        assert [it.annotation for it in s[root].iters] == loops
        program = sampler.programs[s.key()]
        (kernel,) = program.kernels
        # a multiple of the warp size, or the reduction's length when that is smaller
        assert kernel.block[0] in {min(t, length) for t in (32, 64, 128, 256, 512, 1024)}
        reds = allreduces(program)
        assert len(reds) == (2 if name == "softmax" else 1)
        assert all(r.extent == kernel.block[0] for r in reds)


def test_one_output_per_block_sketch_spreads_a_matrix_vector_product_over_blocks():
    """dense_bias at batch 1 (128 outputs, a 784-long reduction each): the second cross-thread
    sketch launches one block per output, every thread of the block on its reduction."""
    from autosched.sketch import SketchSampler, generate_sketches

    sketch = generate_sketches(suite_dag("dense_bias"))[1]
    sampler = SketchSampler([sketch])
    states = sampler.sample(6, 0)
    assert states, sampler.rejected
    for s in states:
        (kernel,) = sampler.programs[s.key()].kernels
        assert kernel.grid == (128, 1, 1)
        assert kernel.block[0] in {min(t, 784) for t in (32, 64, 128, 256, 512, 1024)}
        assert [r.extent for r in allreduces(sampler.programs[s.key()])] == [kernel.block[0]]


@pytest.mark.parametrize("name", ["softmax", "dense_bias"])
def test_120_sampled_states_compute_the_dag_on_the_interpreter(name, interpreted_samples):
    """Reduced sizes: 120 states sampled from all sketches (cross-thread ones among them)
    run on the CPU interpreter and equal the numpy evaluation of the DAG."""
    n_cross = 0
    for _, program in interpreted_samples.get(name, 120, 3):
        verify_program(program)
        n_cross += bool(allreduces(program))
    # every distinct cross-thread state of the reduced dense sketch (2 thread counts x 5
    # unroll depths) and most of softmax's
    assert n_cross >= (10 if name == "dense_bias" else 60)


@needs_nvcc
@pytest.mark.slow
def test_sampled_full_size_cross_thread_states_compile_without_spills():
    from concurrent.futures import ThreadPoolExecutor

    from autosched.sketch import SketchSampler, generate_sketches

    programs = []
    for name in ("softmax", "dense_bias"):
        sampler = SketchSampler([generate_sketches(suite_dag(name))[0]])
        programs += [sampler.programs[s.key()] for s in sampler.sample(2, 7)]
    with ThreadPoolExecutor(2) as pool:
        sources = list(pool.map(compile_without_spills, programs))
    assert all("allreduce" in source for source in sources)


def test_several_reduction_axes_are_fused_then_shared_by_threads():
    """A mean over two axes: the rule fuses them before splitting; sampled states (thread
    counts over and under the reduction length) compute the DAG."""
    from autosched.sketch import SketchSampler, generate_sketches

    x = te.placeholder((5, 6, 10), name="x")
    a, b = te.reduce_axis((0, 6), name="a"), te.reduce_axis((0, 10), name="b")
    total = te.compute((5,), lambda i: te.sum(x[i, a, b], axis=[a, b]), name="total")
    mean = te.compute((5,), lambda i: total[i] * (1.0 / 60), name="mean")
    dag = ComputeDAG([x, mean])
    sketch = generate_sketches(dag)[0]
    assert cross_thread_stages(sketch) == {"total": ("attached", "i_o", ["a_b_fused_i"])}
    sampler = SketchSampler([sketch])
    every = 2 * len(sampler.params.auto_unroll_configs)  # thread counts 32, 64 x unroll depths
    states = sampler.sample(every, 0)
    assert len(states) == every
    for s in states:
        run_and_compare(dag, s)
