"""Virtual-thread injection (autosched.lower.vthread): no vthread loop survives
lowering, shared fetches and barriers run once per reduction tile whatever the vthread extent,
buffers private to the virtual threads are expanded, the interpreter agrees with numpy, nvcc
compiles the seed schedules and vthread matmuls without spills; few sampled vthread states
spill."""

from __future__ import annotations

import math
import shutil
import time

import numpy as np
import pytest

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.device_passes import device_program
from autosched.lower.interpreter import run_program
from autosched.lower.lowering import lower
from autosched.lower.verify import verify_program
from autosched.lower.vthread import inject_virtual_threads, vthread_extent
from autosched.schedule.steps import StorageAlignStep, replay
from autosched.te.expr import BinOp, Const, Load, Var
from tests.interpreter_check import interpret_and_compare
from tests.workloads_for_tests import (
    SEED_001_TILES,
    SEED_001_VECTORS,
    SEED_002_TILES,
    SEED_002_VECTORS,
    conv2d_bias_relu_dag,
    matmul_dag,
    matmul_shared_state,
    seed_conv_state,
)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


# ---- the cases: (dag, state, vthread extent, reduction tiles run by the outer loop, vectors) -----

SMALL_CONV_VT2 = {
    "nn": (1, 1, 1, 1),
    "ff": (2, 4, 2, 1),
    "yy": (1, 1, 1, 1),
    "xx": (1, 1, 7, 1),
    "rc": (2, 2),
    "ry": (1, 1),
    "rx": (3, 1),
}
MATMUL_VT2 = {"i": (1, 4, 2, 2), "j": (2, 4, 1, 2), "k": (2, 2)}
MATMUL_VT4 = {"i": (2, 4, 2, 1), "j": (2, 4, 1, 2), "k": (2, 2)}


def _conv_case(tiles, vectors, **shape):
    dag = conv2d_bias_relu_dag(**shape)
    ci, kh, kw = shape.get("ci", 512), shape.get("kh", 3), shape.get("kw", 3)
    outer = (
        (ci // math.prod(tiles["rc"]))
        * (kh // math.prod(tiles["ry"]))
        * (kw // math.prod(tiles["rx"]))
    )
    vthread = math.prod(tiles[a][0] for a in ("nn", "ff", "yy", "xx"))
    return dag, seed_conv_state(dag, tiles, vectors), vthread, outer, vectors


def _matmul_case(tiles, n=32, vectors=(2, 1)):
    dag = matmul_dag(n, n, n)
    state = matmul_shared_state(dag, tiles, vectors)
    # without its storage_align: the store counts below are those of unpadded shared tiles
    state = replay(dag, [s for s in state.steps if not isinstance(s, StorageAlignStep)])
    vectors = {"A.shared": vectors[0], "B.shared": vectors[1]}
    return dag, state, tiles["i"][0] * tiles["j"][0], n // math.prod(tiles["k"]), vectors


SMALL_CASES = {
    "seed001_vt7": lambda: _conv_case(
        {**SEED_001_TILES, "ff": (1, 8, 1, 1)}, SEED_001_VECTORS, co=32, ci=4
    ),
    "conv_vt2": lambda: _conv_case(SMALL_CONV_VT2, SEED_002_VECTORS, co=32, ci=4),
    "matmul_vt2": lambda: _matmul_case(MATMUL_VT2),
    "matmul_vt4": lambda: _matmul_case(MATMUL_VT4),
}
FULL_CASES = {
    "seed001": lambda: _conv_case(SEED_001_TILES, SEED_001_VECTORS),
    "seed002": lambda: _conv_case(SEED_002_TILES, SEED_002_VECTORS),
    "seed002_vt2": lambda: _conv_case({**SEED_002_TILES, "ff": (2, 32, 2, 1)}, SEED_002_VECTORS),
    "matmul_vt2": lambda: _matmul_case(MATMUL_VT2, 256),
    "matmul_vt4": lambda: _matmul_case(MATMUL_VT4, 256),
}


# ---- helpers -------------------------------------------------------------------------------------


def dynamic_counts(s: ir.Stmt, times: int = 1, out: dict | None = None) -> dict:
    """How many times one thread runs each kind of statement ('barrier', 'shared store',
    'store'), counting every iteration of the loops around it (guards ignored)."""
    out = {"barrier": 0, "shared store": 0, "store": 0} if out is None else out
    if isinstance(s, ir.Barrier):
        out["barrier"] += times
    elif isinstance(s, ir.Store):
        out["shared store" if s.buffer.scope == "shared" else "store"] += times
    elif isinstance(s, ir.For):
        dynamic_counts(s.body, times * s.extent, out)
    else:
        for c in (
            s.stmts
            if isinstance(s, ir.Seq)
            else [s.then_case, s.else_case]
            if isinstance(s, ir.IfThenElse)
            else []
        ):
            if c is not None:
                dynamic_counts(c, times, out)
    return out


def assert_injected(program, vthread: int, outer: int, vectors: dict) -> None:
    """No vthread loop left; each shared buffer is filled once per outer reduction tile and
    three barriers guard the two fetches, whatever the vthread extent."""
    verify_program(program)
    (kernel,) = program.kernels
    assert not [
        s for s in ir.iter_stmts(kernel.body) if isinstance(s, ir.For) and s.kind == ir.VTHREAD_KIND
    ]
    assert kernel.vthread == vthread
    shared = [b for b in kernel.allocs if b.scope == "shared"]
    stores = [
        s
        for s in ir.iter_stmts(kernel.body)
        if isinstance(s, ir.Store) and s.buffer.scope == "shared"
    ]
    assert sorted(s.buffer.name for s in stores) == sorted(b.name for b in shared)  # one each
    threads = kernel.threads_per_block
    per_tile = sum(
        -(-b.size // (threads * vectors[b.name.replace("_shared", ".shared")]))
        * vectors[b.name.replace("_shared", ".shared")]
        for b in shared
    )
    counts = dynamic_counts(kernel.body)
    assert counts["barrier"] == 3 * outer
    assert counts["shared store"] == per_tile * outer


# ---- lowered schedules ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(SMALL_CASES))
def test_small_schedules_are_injected_and_match_numpy(case):
    dag, state, vthread, outer, vectors = SMALL_CASES[case]()
    assert vthread > 1
    program = lower(state)
    assert_injected(program, vthread, outer, vectors)
    interpret_and_compare(dag, program)


@pytest.mark.parametrize("case", sorted(FULL_CASES))
def test_full_size_schedules_are_injected(case):
    _, state, vthread, outer, vectors = FULL_CASES[case]()
    assert_injected(lower(state), vthread, outer, vectors)


def test_local_accumulator_is_expanded_and_shared_tiles_cover_all_vthreads():
    _, state, vthread, _, _ = SMALL_CASES["matmul_vt4"]()
    (kernel,) = lower(state).kernels
    sizes = {b.name: b.size for b in kernel.allocs}
    i, j, k = MATMUL_VT4["i"], MATMUL_VT4["j"], MATMUL_VT4["k"]
    per_vthread = i[2] * i[3] * j[2] * j[3]
    assert sizes["C_local"] == vthread * per_vthread
    assert sizes["A_shared"] == math.prod(i) * math.prod(k)  # the block's rows, all vthreads
    assert sizes["B_shared"] == math.prod(k) * math.prod(j)


def test_seed002_without_vthread_is_unchanged_by_the_pass():
    _, state, vthread, _, _ = FULL_CASES["seed002"]()
    assert vthread == 1
    (kernel,) = lower(state).kernels
    assert kernel.vthread == 1
    assert {b.name: b.size for b in kernel.allocs} == {
        "conv2d_nchw": 14,
        "pad_temp_shared": 72,
        "kernel_shared": 3072,
    }


def test_lower_time_of_the_seed_schedules():
    """Lowering stays fast with the pass (figures printed; the bound only catches blow-ups)."""
    for case in ("seed001", "seed002"):
        _, state, _, _, _ = FULL_CASES[case]()
        lower(state)
        t0 = time.process_time()
        for _ in range(5):
            lower(state)
        per = (time.process_time() - t0) / 5
        print(f"\nlower {case}: {per * 1e3:.1f} ms (CPU)")
        assert per < 0.2


# ---- the pass on hand-built kernels --------------------------------------------------------------

I32 = "int32"


def _c(v: int) -> Const:
    return Const(v, I32)


def _kernel(body: ir.Stmt, allocs: list[ir.Buffer]) -> ir.Kernel:
    return ir.Kernel("k", (1, 1, 1), (1, 1, 1), allocs, body)


def test_independent_statements_stay_once_dependent_ones_are_replicated():
    """for v in vthread(2): S[0] = A[0]; barrier; T[0] = S[0] + A[v+1]; O[v] = T[0]."""
    v = Var("v")
    a = ir.Buffer("A", (3,), "float32")
    o = ir.Buffer("O", (2,), "float32")
    s = ir.Buffer("S", (1,), "float32", "shared")
    t = ir.Buffer("T", (1,), "float32", "local")
    body = ir.Seq(
        [
            ir.Store(s, _c(0), Load(a, (_c(0),))),
            ir.Barrier(),
            ir.Store(
                t,
                _c(0),
                BinOp("+", Load(s, (_c(0),)), Load(a, (BinOp("+", v, _c(1), I32),)), "float32"),
            ),
            ir.Store(o, v, Load(t, (_c(0),))),
        ]
    )
    kernel = inject_virtual_threads(_kernel(ir.For(v, 2, ir.VTHREAD_KIND, body), [s, t]))
    stmts = list(ir.iter_stmts(kernel.body))
    assert sum(isinstance(x, ir.Barrier) for x in stmts) == 1
    written = [x.buffer.name for x in stmts if isinstance(x, ir.Store)]
    assert written == ["S", "T", "T", "O", "O"]
    assert kernel.vthread == 2
    t2 = next(b for b in kernel.allocs if b.name == "T")
    assert t2.shape == (2, 1) and next(b for b in kernel.allocs if b.name == "S") is s
    prog = ir.Program([kernel], [a, o], [o])
    arrays = {"A": np.array([1.0, 2.0, 3.0], np.float32), "O": np.zeros(2, np.float32)}
    run_program(prog, arrays)
    np.testing.assert_array_equal(arrays["O"], [3.0, 4.0])


def test_touched_buffers_reach_a_fixed_point_and_init_is_replicated():
    """T is initialised without v, then updated from v: its init must run for each vthread's
    part (T is private, so it is expanded); U reads T, so U is expanded too."""
    v, r = Var("v"), Var("r")
    a = ir.Buffer("A", (2, 3), "float32")
    o = ir.Buffer("O", (2,), "float32")
    t = ir.Buffer("T", (1,), "float32", "local")
    u = ir.Buffer("U", (1,), "float32", "local")
    upd = BinOp(
        "+", Load(t, (_c(0),)), Load(a, (BinOp("+", BinOp("*", v, _c(3), I32), r, I32),)), "float32"
    )
    body = ir.Seq(
        [
            ir.Store(t, _c(0), Const(0.0, "float32")),
            ir.For(r, 3, "serial", ir.Store(t, _c(0), upd)),
            ir.Store(u, _c(0), Load(t, (_c(0),))),
            ir.Store(o, v, Load(u, (_c(0),))),
        ]
    )
    kernel = inject_virtual_threads(_kernel(ir.For(v, 2, ir.VTHREAD_KIND, body), [t, u]))
    assert [b.shape for b in kernel.allocs] == [(2, 1), (2, 1)]
    top = kernel.body.stmts
    assert [type(x).__name__ for x in top] == [
        "Store",
        "Store",
        "For",
        "Store",
        "Store",
        "Store",
        "Store",
    ]
    a_val = np.arange(6, dtype=np.float32).reshape(2, 3)
    arrays = {"A": a_val, "O": np.zeros(2, np.float32)}
    run_program(ir.Program([kernel], [a, o], [o]), arrays)
    np.testing.assert_array_equal(arrays["O"], a_val.sum(axis=1))


def test_a_buffer_used_outside_the_loop_is_not_expanded():
    """vthread on a reduction: X's init and use lie outside the loop, so X is shared by the
    virtual threads and each one's update is kept (X[0] += A[0]; X[0] += A[1])."""
    v = Var("v")
    a = ir.Buffer("A", (2,), "float32")
    o = ir.Buffer("O", (1,), "float32")
    x = ir.Buffer("X", (1,), "float32", "local")
    upd = ir.Store(x, _c(0), BinOp("+", Load(x, (_c(0),)), Load(a, (v,)), "float32"))
    body = ir.Seq(
        [
            ir.Store(x, _c(0), Const(0.0, "float32")),
            ir.For(v, 2, ir.VTHREAD_KIND, upd),
            ir.Store(o, _c(0), Load(x, (_c(0),))),
        ]
    )
    kernel = inject_virtual_threads(_kernel(body, [x]))
    assert kernel.allocs == [x]
    arrays = {"A": np.array([2.0, 5.0], np.float32), "O": np.zeros(1, np.float32)}
    run_program(ir.Program([kernel], [a, o], [o]), arrays)
    assert arrays["O"][0] == 7.0


def test_a_loop_met_twice_shares_its_buffer_and_one_met_once_expands_it():
    """T is private to one vthread loop, and expanded; the same loop object placed twice (its
    accesses then lie outside each of its places too) leaves T shared, as counting the
    kernel's accesses against the loop's says."""
    v = Var("v")
    a = ir.Buffer("A", (2,), "float32")
    o = ir.Buffer("O", (2,), "float32")
    t = ir.Buffer("T", (1,), "float32", "local")
    body = ir.Seq([ir.Store(t, _c(0), Load(a, (v,))), ir.Store(o, v, Load(t, (_c(0),)))])
    loop = ir.For(v, 2, ir.VTHREAD_KIND, body)
    once = inject_virtual_threads(_kernel(loop, [t]))
    assert [b.shape for b in once.allocs] == [(2, 1)]
    twice = inject_virtual_threads(_kernel(ir.Seq([loop, loop]), [t]))
    assert twice.allocs == [t]


def test_a_barrier_under_a_vthread_guard_is_an_error():
    v = Var("v")
    o = ir.Buffer("O", (2,), "float32")
    guarded = ir.IfThenElse(
        BinOp("<", v, _c(1), "bool"), ir.Seq([ir.Barrier(), ir.Store(o, v, Const(1.0, "float32"))])
    )
    with pytest.raises(LoweringError, match="barrier"):
        inject_virtual_threads(_kernel(ir.For(v, 2, ir.VTHREAD_KIND, guarded), []))


def test_nested_vthread_extents_multiply():
    v, w = Var("v"), Var("w")
    o = ir.Buffer("O", (6,), "float32")
    inner = ir.For(
        w,
        3,
        ir.VTHREAD_KIND,
        ir.Store(o, BinOp("+", BinOp("*", v, _c(3), I32), w, I32), Const(1.0, "float32")),
    )
    body = ir.For(v, 2, ir.VTHREAD_KIND, inner)
    assert vthread_extent(body) == 6
    kernel = inject_virtual_threads(_kernel(body, []))
    assert kernel.vthread == 6
    assert sum(isinstance(s, ir.Store) for s in ir.iter_stmts(kernel.body)) == 6
    assert not any(isinstance(s, ir.For) for s in ir.iter_stmts(kernel.body))


# ---- nvcc ----------------------------------------------------------------------------------------


@needs_nvcc
@pytest.mark.parametrize("case", sorted(FULL_CASES))
def test_schedules_compile_without_spills(case):
    from autosched.codegen.cuda import codegen_program
    from measure import compile_resources

    _, state, _, _, _ = FULL_CASES[case]()
    resources = compile_resources(codegen_program(device_program(lower(state))), arch="sm_90")
    for name, r in resources.items():
        assert r.spill_bytes == 0 and r.stack_bytes == 0, (case, name, r)


# ---- sampled states ------------------------------------------------------------------------------


def sampled_vthread_states(per_workload: int, seed: int) -> list:
    """(workload, program) of the first `per_workload` sampled full-size states with a vthread
    extent above 1, for each workload of the suite that has such states."""
    from autosched.schedule.compute_dag import ComputeDAG
    from autosched.sketch import SketchSampler, generate_sketches
    from autosched.task.workload_registry import lookup
    from autosched.task.workloads import SUITE

    out = []
    for name, (workload, full, _) in SUITE.items():
        sampler = SketchSampler(generate_sketches(ComputeDAG(lookup(workload)(*full))))
        got = [
            s
            for s in sampler.sample(8 * per_workload, seed)
            if max(k.vthread for k in sampler.programs[s.key()].kernels) > 1
        ]
        out += [(name, sampler.programs[s.key()]) for s in got[:per_workload]]
    return out


def _spilling(jobs: list) -> list[str]:
    """The workloads of the (workload, program) jobs whose compiled kernels spill."""
    from concurrent.futures import ThreadPoolExecutor

    from autosched.codegen.cuda import codegen_program
    from measure import compile_resources

    def compile_one(job):
        return compile_resources(codegen_program(device_program(job[1])), timeout=300)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(compile_one, jobs))
    return [
        name
        for (name, _), res in zip(jobs, results, strict=True)
        if any(r.spill_bytes for r in res.values())
    ]


@needs_nvcc
@pytest.mark.slow
def test_sampled_vthread_states_compile_and_rarely_spill():
    """The first sampled state with vthread > 1 of each workload that has one (seed 6: six of
    them) compiles; at most one of them spills (none does). The statistical bound on a larger
    sample is the slow test below."""
    jobs = sampled_vthread_states(1, seed=6)
    assert len(jobs) >= 5
    spilled = _spilling(jobs)
    print(f"\n{len(spilled)} of {len(jobs)} sampled vthread states spill: {spilled}")
    assert len(spilled) <= 1, spilled


@pytest.mark.slow
@needs_nvcc
def test_sampled_vthread_states_spill_rate(request):
    """Sampled states with vthread > 1 (6 per workload, seed 6) compile; at most 7 of the 42
    spill (about 40 s of compiling: run with -m slow).

    Injection keeps every virtual thread's accumulators live across the reduction loop (TVM's
    semantics) and puts its copies inside nests that auto-unroll marked before, so register
    estimates that count one virtual thread let about one vthread state in five spill. The
    sampler's estimates count all of them (FillTileSize's accumulators, AutoUnroll's
    accumulators and operand tiles of the unrolled nests), which brings the rate to about one
    in ten. The bound sits between the two on this sample (small samples are noisy)."""
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("compiling 42 full-size states takes about 40 s; run with -m slow")
    jobs = sampled_vthread_states(6, seed=6)
    assert len(jobs) >= 30
    spilled = _spilling(jobs)
    print(f"\n{len(spilled)} of {len(jobs)} sampled vthread states spill: {spilled}")
    assert len(spilled) <= 7, spilled
