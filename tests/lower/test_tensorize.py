"""Tensor Core schedules written by hand through the State API (fragment cache scopes and the
"tensorize" annotation), lowered to warp statements and run on the CPU interpreter.

The recipe (TVM's opt_conv_tensorcore tutorial, seed 004): the output's accumulator is a
`wmma.accumulator` cache computed at the output's warp loop (threadIdx.y); each operand goes
global -> shared (a cooperative fetch on threadIdx.y x threadIdx.x, blockDim.x == 32) ->
matrix fragment (16x16 tiles, tensorized); the output is tiled blockIdx.x / threadIdx.y /
repeats / a tensorized 16x16 store. An epilogue (a cast) reads the output from shared memory.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from autosched import te, topi
from autosched.errors import LoweringError, ScheduleError
from autosched.lower import ir
from autosched.lower.lowering import lower
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import Step, print_python_schedule, replay
from autosched.task.evaluate import evaluate
from autosched.te.dtype import from_storage, to_storage
from autosched.te.tensor import PlaceholderOp

WARPS, REPS, K_SPLIT = (2, 1), (1, 2), (2, 16)  # warps and repeats per (M, N); K chunk x 16
FRAGMENTS = ("wmma.matrix_a", "wmma.matrix_b")


# ---- workloads ---------------------------------------------------------------------------------


def matmul_dag(dtype="float16", n=64, epilogue=False):
    a = te.placeholder((n, n), dtype, "A")
    b = te.placeholder((n, n), dtype, "B")
    c = topi.matmul(a, b, out_dtype="float32")
    if epilogue:
        d = te.compute(c.shape, lambda i, j: te.cast(c[i, j], dtype), name="D")
        return ComputeDAG([a, b, d])
    return ComputeDAG([a, b, c])


def batch_matmul_dag(dtype="bfloat16"):
    a = te.placeholder((2, 32, 64), dtype, "A")
    b = te.placeholder((2, 64, 64), dtype, "B")  # (batch, N, K): B is read K-major
    return ComputeDAG([a, b, topi.batch_matmul(a, b, out_dtype="float32")])


def conv_dag():
    data = te.placeholder((32, 4, 4, 32), "float16", "data")
    kernel = te.placeholder((3, 3, 32, 32), "float16", "kernel")
    conv = topi.nn.conv2d_nhwc(data, kernel, 1, 1, out_dtype="float32")
    return ComputeDAG([data, kernel, conv])


# ---- the schedule ------------------------------------------------------------------------------


def _names(s, stage):
    return [it.name for it in s[stage].iters]


def tile_copy_out(s, out, m, n, root):
    """Tile the copy-out stage: per M / N axis [blocks (root only), warps, repeats, 16], the
    other spatial axes fused into the blocks; blockIdx.x (root), threadIdx.y (the warps), a
    tensorized 16x16 store. Returns (state, the warp iterator's name)."""
    lengths = {m: (WARPS[0], REPS[0], 16), n: (WARPS[1], REPS[1], 16)}
    others = [ax for ax in _names(s, out) if ax not in (m, n)]
    parts = {}
    for ax in (m, n):
        s = s.split(out, ax, list(lengths[ax] if root else lengths[ax][1:]))
        parts[ax] = [x for x in _names(s, out) if x.startswith(ax + "_")]
    levels = list(zip(parts[m], parts[n], strict=True))
    s = s.reorder(out, [*others, *(x for level in levels for x in level)])
    if root:
        s = s.fuse(out, [*others, *levels.pop(0)])
        s = s.bind(out, _names(s, out)[0], "blockIdx.x")
    s = s.fuse(out, list(levels[0]))
    warp = "_".join(levels[0]) + "_fused"
    s = s.bind(out, warp, "threadIdx.y")
    return s.tensorize(out, levels[-1][0]), warp


def schedule_mma(s, out, warp, frag_tiles, m, n, k):
    """The accumulator computed at `out`'s warp loop: [other reduce axes, K outer, K chunk,
    other spatial axes, M repeats, N repeats, 16 x 16 x 16 tensorized]; each operand through
    shared memory (fetched cooperatively at K outer) and a fragment (loaded at K chunk,
    tensorized over the two axes `frag_tiles` gives for it)."""
    acc = f"{out}.wmma.accumulator"
    s = s.compute_at(acc, out, warp)
    spatial = [it.name for it in s[acc].iters if it.kind == "spatial" and it.name not in (m, n)]
    reduce = [it.name for it in s[acc].iters if it.kind != "spatial" and it.name != k]
    s = s.split(acc, m, [16])
    s = s.split(acc, n, [16])
    s = s.split(acc, k, list(K_SPLIT))
    tail = [f"{m}_o", f"{n}_o", f"{m}_i", f"{n}_i", f"{k}_i"]
    s = s.reorder(acc, [*reduce, f"{k}_o_o", f"{k}_o_i", *spatial, *tail])
    s = s.tensorize(acc, f"{m}_i")
    for (name, tiled), scope in zip(frag_tiles.items(), FRAGMENTS, strict=True):
        frag = f"{name}.shared.{scope}"
        s = s.compute_at(frag, acc, f"{k}_o_i")
        untiled = [ax for ax in _names(s, frag) if ax not in tiled]
        for ax in tiled:
            s = s.split(frag, ax, [16])
        s = s.reorder(frag, untiled + [f"{ax}_o" for ax in tiled] + [f"{ax}_i" for ax in tiled])
        s = s.tensorize(frag, f"{tiled[0]}_i")
        shared = f"{name}.shared"
        s = s.compute_at(shared, acc, f"{k}_o_o")
        s = s.fuse(shared, _names(s, shared))
        fused = _names(s, shared)[0]
        s = s.split(shared, fused, [WARPS[0] * WARPS[1], 32])
        s = s.bind(shared, f"{fused}_o_i", "threadIdx.y")
        s = s.bind(shared, f"{fused}_i", "threadIdx.x")
    return s


def tensor_core_state(dag, out, frag_tiles, m, n, k, epilogue=None, inline=()):
    """The whole recipe. `frag_tiles`: operand name -> the two axes of its fragment that the
    16x16 tile spans (A first); `epilogue`: a root stage reading `out`, which then lives in
    shared memory; `inline`: stages inlined after their shared caches exist (padding)."""
    s = dag.get_init_state()
    s = s.cache_write(out, "wmma.accumulator")
    acc = f"{out}.wmma.accumulator"
    for name, scope in zip(frag_tiles, FRAGMENTS, strict=True):
        s = s.cache_read(name, "shared", [acc])
        s = s.cache_read(f"{name}.shared", scope, [acc])
    for name in inline:
        s = s.compute_inline(name)
    if epilogue is not None:
        i, j = _names(s, epilogue)
        s = s.split(epilogue, i, [WARPS[0] * REPS[0] * 16])
        s = s.split(epilogue, j, [WARPS[1] * REPS[1] * 16])
        s = s.reorder(epilogue, [f"{i}_o", f"{j}_o", f"{i}_i", f"{j}_i"])
        s = s.fuse(epilogue, [f"{i}_o", f"{j}_o"])
        s = s.fuse(epilogue, [f"{i}_i", f"{j}_i"])
        bx, inner = _names(s, epilogue)
        s = s.bind(epilogue, bx, "blockIdx.x")
        s = s.split(epilogue, inner, [WARPS[0] * WARPS[1], 32])
        s = s.bind(epilogue, f"{inner}_o_i", "threadIdx.y")
        s = s.bind(epilogue, f"{inner}_i", "threadIdx.x")
        s = s.compute_at(out, epilogue, bx)
    s, warp = tile_copy_out(s, out, m, n, root=epilogue is None)
    return schedule_mma(s, out, warp, frag_tiles, f"{m}_c", f"{n}_c", k)


MATMUL_TILES = {"A": ("ax0", "ax1"), "B": ("ax0", "ax1")}


def matmul_state(dtype="float16", epilogue=False):
    dag = matmul_dag(dtype, epilogue=epilogue)
    return dag, tensor_core_state(
        dag, "T_matmul", MATMUL_TILES, "i", "j", "k", epilogue="D" if epilogue else None
    )


def batch_matmul_state():
    dag = batch_matmul_dag()
    tiles = {"A": ("ax1", "ax2"), "B": ("ax1", "ax2")}
    return dag, tensor_core_state(dag, "T_batch_matmul_NT", tiles, "i", "j", "k")


def conv_state():
    dag = conv_dag()
    tiles = {"PaddedInput": ("ax0", "ax3"), "kernel": ("ax2", "ax3")}
    return dag, tensor_core_state(
        dag, "Conv2dOutput", tiles, "nn", "ff", "rc", inline=("PaddedInput",)
    )


# ---- helpers -----------------------------------------------------------------------------------


def warp_stmts(program, kind=ir.WarpStmt):
    return [s for k in program.kernels for s in ir.iter_stmts(k.body) if isinstance(s, kind)]


def tile_of(stmt):
    return stmt.src if isinstance(stmt, ir.FragmentLoad) else stmt.dst


def run_and_compare(dag, program, seed=0):
    """Run `program` on the CPU interpreter (inputs uniform(-1, 1) rounded to their dtypes,
    outputs poisoned with NaN) against the numpy evaluation of the DAG."""
    rng = np.random.default_rng(seed)
    inputs = {
        t.name: to_storage(rng.uniform(-1, 1, t.shape), t.dtype)
        for t in dag.tensors
        if isinstance(t.op, PlaceholderOp)
    }
    expected = evaluate(dag, inputs)
    arrays = dict(inputs)
    for b in program.outputs:
        arrays[b.name] = to_storage(np.full(b.shape, np.nan, np.float32), b.dtype)
    from autosched.lower.interpreter import run_program

    run_program(program, arrays)
    for b in program.outputs:
        got = from_storage(arrays[b.name], b.dtype).astype(np.float64)
        want = from_storage(expected[b.name], b.dtype).astype(np.float64)
        rtol = 1e-4 if b.dtype == "float32" else 1e-2
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-3)


WORKLOADS = {
    "matmul_fp16": matmul_state,
    "matmul_cast_epilogue": lambda: matmul_state(epilogue=True),
    "batch_matmul_bf16": batch_matmul_state,
    "conv2d_nhwc_fp16": conv_state,
}


# ---- schedule: scopes, annotation, records, Python schedule -------------------------------------


def test_fragment_scopes_in_cache_steps():
    dag = matmul_dag()
    s = dag.get_init_state().cache_write("T_matmul", "wmma.accumulator")
    s = s.cache_read("A", "wmma.matrix_a", ["T_matmul.wmma.accumulator"])
    s = s.cache_read("B", "wmma.matrix_b", ["T_matmul.wmma.accumulator"])
    scopes = {st.name: st.scope for st in s.stages}
    assert scopes["T_matmul.wmma.accumulator"] == "wmma.accumulator"
    assert scopes["A.wmma.matrix_a"] == "wmma.matrix_a"
    assert scopes["B.wmma.matrix_b"] == "wmma.matrix_b"
    init = dag.get_init_state()
    with pytest.raises(ScheduleError, match="cache_read: scope must be one of"):
        init.cache_read("A", "wmma.accumulator", ["T_matmul"])
    with pytest.raises(ScheduleError, match="cache_write: scope must be one of"):
        init.cache_write("T_matmul", "wmma.matrix_a")


def test_tensorize_is_an_annotation_that_round_trips():
    dag, s = matmul_state()
    tensorized = {
        st.name: it.name for st in s.stages for it in st.iters if it.annotation == "tensorize"
    }
    assert tensorized == {
        "A.shared.wmma.matrix_a": "ax0_i",
        "B.shared.wmma.matrix_b": "ax0_i",
        "T_matmul.wmma.accumulator": "i_c_i",
        "T_matmul": "i_i",
    }
    records = json.loads(json.dumps([step.to_record() for step in s.steps]))
    assert all(
        Step.from_record(r).to_record() == s.steps[k].to_record() for k, r in enumerate(records)
    )
    assert replay(dag, records) == s
    assert "tensorize i_c_i (0,16)" in str(s)


def test_python_schedule_names_the_intrinsics():
    _, s = matmul_state()
    text = print_python_schedule(s)
    print(text)
    for line in (
        's[A_shared_wmma_matrix_a].tensorize(A_shared_wmma_matrix_a_ax0_i, "wmma.load_matrix_a")',
        's[B_shared_wmma_matrix_b].tensorize(B_shared_wmma_matrix_b_ax0_i, "wmma.load_matrix_b")',
        's[T_matmul_wmma_accumulator].tensorize(T_matmul_wmma_accumulator_i_c_i, "wmma.mma_sync")',
        's[T_matmul].tensorize(T_matmul_i_i, "wmma.store_matrix")',
        'T_matmul_wmma_accumulator, = s.cache_write([T_matmul], "wmma.accumulator")',
        "A_shared_wmma_matrix_a = "
        's.cache_read(A_shared, "wmma.matrix_a", [T_matmul_wmma_accumulator])',
    ):
        assert line in text.splitlines(), line


# ---- lowering ----------------------------------------------------------------------------------


def test_matmul_lowers_to_one_warp_statement_per_tile():
    _, s = matmul_state()
    program = lower(s)
    (kernel,) = program.kernels
    assert kernel.block == (32, 2, 1) and kernel.grid == (4, 1, 1)
    frags = {b.name: (b.scope, b.shape) for b in kernel.allocs if b.scope in ir.FRAGMENT_SCOPES}
    assert frags == {
        "T_matmul_wmma_accumulator": ("wmma.accumulator", (16, 32)),  # a warp's 1 x 2 tiles
        "A_shared_wmma_matrix_a": ("wmma.matrix_a", (16, 16)),
        "B_shared_wmma_matrix_b": ("wmma.matrix_b", (16, 32)),
    }
    (fill,) = warp_stmts(program, ir.FragmentFill)
    load_a, load_b = warp_stmts(program, ir.FragmentLoad)
    (mma,) = warp_stmts(program, ir.FragmentMma)
    (store,) = warp_stmts(program, ir.FragmentStore)
    assert [(t.buffer.name, t.ldm, t.layout) for t in map(tile_of, (load_a, load_b, store))] == [
        ("A_shared", 32, "row_major"),  # the block's 32 x 32 (M x K chunk) of A
        ("B_shared", 32, "row_major"),
        ("T_matmul", 64, "row_major"),
    ]
    acc_tile, a_tile, b_tile = (repr(e) for e in mma.exprs())
    assert acc_tile == b_tile == "T_matmul_wmma_accumulator_j_c_o" and a_tile == "0"
    assert repr(fill.tile) == acc_tile and float(fill.value.value) == 0.0
    assert repr(load_b.tile) == "B_shared_wmma_matrix_b_ax1_o"
    assert repr(store.tile) == "T_matmul_j_o_i"
    # no element-wise access of a fragment is left
    assert not any(
        isinstance(s, ir.Store) and s.buffer.scope in ir.FRAGMENT_SCOPES
        for s in ir.iter_stmts(kernel.body)
    )


def test_epilogue_reads_the_output_tile_from_shared_memory():
    _, s = matmul_state(epilogue=True)
    program = lower(s)
    (store,) = warp_stmts(program, ir.FragmentStore)
    assert (store.dst.buffer.scope, store.dst.ldm, store.dst.layout) == ("shared", 32, "row_major")
    assert repr(store.dst.offset) == "((threadIdx.y*512) + (T_matmul_j_o_i*16))"
    assert [b.name for b in program.outputs] == ["D"]


def test_batch_matmul_reads_b_column_major():
    _, s = batch_matmul_state()
    load_a, load_b = warp_stmts(lower(s), ir.FragmentLoad)
    assert (load_a.src.ldm, load_a.src.layout) == (32, "row_major")
    # B is (batch, N, K): a K x N tile walks K contiguously
    assert (load_b.src.ldm, load_b.src.layout) == (32, "col_major")


def test_conv2d_nhwc_tiles_batch_by_channels():
    _, s = conv_state()
    program = lower(s)
    load_a, load_b = warp_stmts(program, ir.FragmentLoad)
    (store,) = warp_stmts(program, ir.FragmentStore)
    assert load_a.frag.shape == (16, 1, 1, 16)  # (n, h, w, c) of a warp, one pixel
    assert [(t.ldm, t.layout) for t in map(tile_of, (load_a, load_b, store))] == [
        (32, "row_major"),
        (32, "row_major"),
        (4 * 4 * 32, "row_major"),  # NHWC output: the next n is H*W*C away
    ]


@pytest.mark.parametrize("name", WORKLOADS)
def test_tensor_core_programs_match_numpy_on_the_interpreter(name):
    dag, s = WORKLOADS[name]()
    run_and_compare(dag, lower(s))


def test_whole_tiles_of_a_partial_block_are_guarded():
    """M = N = 48 with 32 x 32 block tiles: the last block has one row of warps out of range,
    which a guard on the warp's tile origin skips (the 16x16 tiles stay whole)."""
    dag = matmul_dag(n=48)
    s = tensor_core_state(dag, "T_matmul", MATMUL_TILES, "i", "j", "k")
    program = lower(s)
    assert any(isinstance(x, ir.IfThenElse) for x in ir.iter_stmts(program.kernels[0].body))
    run_and_compare(dag, program)


# ---- what cannot be tensorized -----------------------------------------------------------------


def test_partial_16x16_tiles_are_rejected():
    dag = matmul_dag(n=40)
    s = tensor_core_state(dag, "T_matmul", MATMUL_TILES, "i", "j", "k")
    with pytest.raises(LoweringError, match="partial 16x16 tile"):
        lower(s)


def test_fragment_stage_without_tensorize_is_rejected():
    _, s = matmul_state()
    frag = s.stage_index("A.shared.wmma.matrix_a")
    steps = [
        st
        for st in s.steps
        if not (getattr(st, "annotation", None) == "tensorize" and st.stage_id == frag)
    ]
    s = replay(s.dag, steps)
    with pytest.raises(LoweringError, match="fragments cannot be indexed element-wise"):
        lower(s)


def test_nest_of_the_wrong_shape_is_rejected():
    dag = matmul_dag()
    acc = "T_matmul.wmma.accumulator"
    s = dag.get_init_state().cache_write("T_matmul", "wmma.accumulator")
    s = s.cache_read("A", "wmma.matrix_a", [acc])
    s = s.cache_read("B", "wmma.matrix_b", [acc])
    s = s.compute_at(acc, "T_matmul", "i")
    s = s.split(acc, "j_c", [8])
    s = s.tensorize(acc, "j_c_i")
    for frag in ("A.wmma.matrix_a", "B.wmma.matrix_b"):
        s = s.compute_at(frag, acc, "j_c_o")
    with pytest.raises(LoweringError, match="must be 2 spatial . 1 reduce iterators of extent 16"):
        lower(s)
