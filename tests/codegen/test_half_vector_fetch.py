"""Vector fetches of half-precision data (`autosched.codegen.vectors`): the proof that an index
is `base + lane` with `base` a multiple of the width through floordiv/floormod by constants,
and the printed Tensor Core fetches: one 4-, 8- or 16-byte load from global memory and one store
to shared memory per `vectorize` loop, never pairs of scalar loads. Sampled states still compute
their DAG on the interpreter (the printer rewrites nothing) and compile with nvcc for sm_90."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from autosched import build, te
from autosched.codegen.cuda import codegen_program
from autosched.codegen.lanes import aligned_unit_stride, lane_free_guard, split_lane, vector_base
from autosched.codegen.vectors import ZERO_VECTOR
from autosched.lower import ir
from autosched.lower.arith import simplify
from autosched.schedule.compute_dag import ComputeDAG
from autosched.sketch import SketchSampler, generate_sketches
from autosched.task.evaluate import evaluate
from autosched.task.workload_registry import make_workload_key, workload_tensors
from autosched.task.workloads import TENSOR_CORE_SUITE
from autosched.te.expr import Const, Load, Select, Var
from autosched.te.visitor import free_vars, substitute
from tests.compilers import needs_nvcc
from tests.interpreter_check import assert_half_outputs_match, half_inputs
from tests.lower.test_interpreter import TX, TY, ld, loop, st

# ---- the proof -------------------------------------------------------------------------------

OUTER, LANE = Var("o"), Var("lane")
VARS = {OUTER: range(0, 6), TY: range(0, 4), TX: range(0, 32, 3)}


def value(e, env: dict) -> int:
    """`e` evaluated with the variables of `env` (Var -> int)."""
    out = simplify(substitute(e, {v: Const(x, "int32") for v, x in env.items()}))
    assert isinstance(out, Const), out
    return int(out.value)


def fetch_index(width: int, c: int, stride: int = 1024, extra=0):
    """The global index of a cooperative fetch: fused f split by c into a row and a column."""
    f = OUTER * (8 * 32 * width) + TY * (32 * width) + TX * width + extra + LANE
    return te.floordiv(f, c) * stride + te.floormod(f, c)


def assert_sound(index, width: int) -> None:
    """Where vector_base proves the access, index == base + lane and base % width == 0."""
    base = vector_base(index, LANE, width)
    assert base is not None
    for values in itertools.product(*VARS.values()):
        env = dict(zip(VARS, values, strict=True))
        b = value(base, env)
        assert b % width == 0
        for lane in range(width):
            assert value(index, {**env, LANE: lane}) == b + lane


@pytest.mark.parametrize("width, c", [(2, 32), (2, 2), (4, 16), (8, 64), (8, 16), (8, 8)])
def test_divisions_by_multiples_of_the_width_are_contiguous(width, c):
    index = fetch_index(width, c)
    assert not aligned_unit_stride(index, LANE, width)  # the old proof did not see it
    assert_sound(index, width)


def test_the_base_drops_the_lane():
    base = vector_base(fetch_index(8, 64), LANE, 8)
    assert all(v is not LANE for v in free_vars(base))
    split = split_lane(fetch_index(8, 64), LANE, 8)
    assert split.coef == 1 and split.multiple % 8 == 0


def test_plain_sums_keep_the_old_proof_and_base():
    index = TX * 8 + OUTER * 256 + LANE
    assert aligned_unit_stride(index, LANE, 8)
    assert vector_base(index, LANE, 8) is index.a  # `+ lane` dropped, the rest as written


@pytest.mark.parametrize(
    "index, width",
    [
        (fetch_index(4, 32, extra=2), 4),  # base not a multiple of the width: misaligned
        (fetch_index(8, 12), 8),  # c not a multiple of the width: the lanes cross a row
        (fetch_index(8, 4), 8),  # c smaller than the width
        (te.floordiv(TX * 8 + LANE, 64) * 1024 + te.floormod(TX * 4 + LANE, 64), 8),  # tx*4
        (TX * 8 + LANE * 2, 8),  # stride 2
        (te.floordiv(TX * 8 + LANE, 64) * 1024, 8),  # no unit-stride lane left
        (TX * 8 + te.min(LANE, 3), 8),  # the lane under a min
        (TX * 8 + LANE * TY, 8),  # the lane times a variable
        (te.floormod(TX * 8 - LANE, 64), 8),  # a negative lane coefficient
    ],
)
def test_what_is_not_provably_contiguous_is_not_vectorized(index, width):
    assert vector_base(index, LANE, width) is None


def _random_index(rng, depth: int):
    """A random integer expression of the lane, tx, ty, o and literals (+, -, *, //, %)."""
    if depth == 0 or rng.random() < 0.25:
        leaves = [LANE, TX, TY, OUTER, Const(int(rng.choice([0, 1, 2, 4, 8, 16, 24, 40])), "int32")]
        return leaves[rng.integers(len(leaves))]
    a = _random_index(rng, depth - 1)
    op = rng.choice(["+", "+", "-", "*", "floordiv", "floormod"])
    if op in ("floordiv", "floormod"):
        c = int(rng.choice([1, 2, 3, 4, 8, 12, 16, 32, 64]))
        return te.floordiv(a, c) if op == "floordiv" else te.floormod(a, c)
    if op == "*":
        return a * int(rng.choice([1, 2, 3, 4, 8, 64]))
    b = _random_index(rng, depth - 1)
    return a + b if op == "+" else a - b


@pytest.mark.parametrize("width", [2, 4, 8])
def test_the_proofs_are_sound_on_random_indices(width):
    """Whatever vector_base and lane_free_guard prove holds at sampled points."""
    rng = np.random.default_rng(width)
    proved = guards = 0
    for _ in range(150):
        index = _random_index(rng, 4) + LANE * int(rng.integers(0, 2))
        base = vector_base(index, LANE, width)
        compare = index < int(rng.choice([64, 256, 250]))
        cond = lane_free_guard(compare, LANE, width)
        if base is None and cond is None:
            continue
        for _ in range(12):
            env = {v: int(rng.integers(0, 40)) for v in (TX, TY, OUTER)}
            if base is not None:
                b = value(base, env)
                assert b % width == 0, (index, base)
                for lane in range(width):
                    assert value(index, {**env, LANE: lane}) == b + lane, (index, base)
            if cond is not None:
                want = value(cond, env)
                for lane in range(width):
                    assert value(compare, {**env, LANE: lane}) == want, (compare, cond)
        proved += base is not None and not aligned_unit_stride(index, LANE, width)
        guards += cond is not None
    assert proved and guards > 40  # the new proofs were exercised


@pytest.mark.parametrize("limit, proved", [(512, True), (256, True), (500, False)])
def test_guards_the_same_for_every_lane(limit, proved):
    f = TY * 256 + TX * 8 + LANE
    cond = (f < limit) & (te.floordiv(f, 32) + OUTER * 16 < 1024)
    hoisted = lane_free_guard(cond, LANE, 8)
    assert (hoisted is not None) == proved
    if proved:
        assert all(v is not LANE for v in free_vars(hoisted))
        for values in itertools.product(*VARS.values()):
            env = dict(zip(VARS, values, strict=True))
            want = value(hoisted, env)
            assert all(value(cond, {**env, LANE: lane}) == want for lane in range(8))


def test_guards_the_lanes_split_are_not_hoisted():
    assert lane_free_guard(TX * 8 + LANE < TY, LANE, 8) is None  # TY: not a multiple of 8
    assert lane_free_guard(TX * 8 - LANE >= 0, LANE, 8) is None  # a negative coefficient
    assert lane_free_guard(LANE * LANE < 4, LANE, 8) is None
    assert lane_free_guard(te.floormod(TX, 3) < 2, LANE, 8) is not None  # no lane at all


def _fetch_program(width: int, c: int, extra: int = 0, pad: float | None = None) -> ir.Program:
    """A_shared[f] = A[(f // c) * 1024 + f % c] over a vectorize loop of `width` halves; rows
    past 16 read as `pad` when given (a Select, as a padded input)."""
    A = ir.Buffer("A", (64, 1024), "float16")
    out = ir.Buffer("out", (512,), "float16")
    sh = ir.Buffer("A_shared", (512,), "float16", "shared")

    def body(o):
        def fetch(v):
            f = o * (32 * width) + TX * width + v
            val = ld(A, te.floordiv(f + extra, c) * 1024 + te.floormod(f + extra, c))
            if pad is not None:
                val = Select(te.floordiv(f, c) < 16, val, Const(pad, "float16"))
            return st(sh, f, val)

        return loop("v", width, fetch, "vectorize")

    copy = loop("o", 512 // (32 * width), body)
    back = loop("j", 16, lambda j: st(out, j * 32 + TX, ld(sh, j * 32 + TX)))
    kernel = ir.Kernel("fetch", (1, 1, 1), (32, 1, 1), [sh], ir.seq([copy, ir.Barrier(), back]))
    return ir.Program([kernel], [A, out], [out])


@pytest.mark.parametrize("width, vtype", [(2, "half2"), (4, "uint2"), (8, "uint4")])
def test_the_printer_loads_and_stores_one_vector(width, vtype):
    src = codegen_program(_fetch_program(width, 32))
    assert f"{vtype} vec = *reinterpret_cast<const {vtype}*>(&A[" in src
    assert f"*reinterpret_cast<{vtype}*>(&A_shared[" in src and "= vec;" in src
    assert "__halves2half2(" not in src and "for (int v = 0" not in src
    misaligned = codegen_program(_fetch_program(width, 32, extra=1))
    assert "reinterpret_cast<const" not in misaligned  # scalar loads (the store may be a vector)


@pytest.mark.parametrize("width, vtype", [(2, "half2"), (4, "uint2"), (8, "uint4")])
def test_a_padded_read_is_one_vector_load_under_one_test(width, vtype):
    src = codegen_program(_fetch_program(width, 32, pad=0.0))
    assert "bool pred = (((" in src
    assert f"if (pred) vec = *reinterpret_cast<const {vtype}*>(&A[" in src
    assert f"= (pred ? vec : {ZERO_VECTOR[vtype]});" in src
    ones = codegen_program(_fetch_program(width, 32, pad=1.0))  # not zero: lane by lane
    assert f"if (pred) vec = *reinterpret_cast<const {vtype}*>(&A[" in ones
    assert ones.count("(pred ? ") == width


def test_a_load_met_unguarded_and_under_a_select_is_read_unguarded():
    A, B = ir.Buffer("A", (256,), "float16"), ir.Buffer("B", (256,), "float16")

    def body(v):
        a = ld(A, TX * 8 + v)  # one node, read in both places
        return st(B, TX * 8 + v, a + Select(TX < 16, a, Const(0.0, "float16")))

    kernel = ir.Kernel("k", (1, 1, 1), (32, 1, 1), [], loop("v", 8, body, "vectorize"))
    src = codegen_program(ir.Program([kernel], [A, B], [B]))
    assert "uint4 vec = *reinterpret_cast<const uint4*>(&A[" in src and "if (pred)" not in src


# ---- sampled Tensor Core states -----------------------------------------------------------------

VECTOR = {2: ("half2", "__nv_bfloat162"), 4: ("uint2",), 8: ("uint4",)}
SCALAR_PAIR = re.compile(r"__halves2(?:half2|bfloat162)\(\w+\[")


def tc_states(name: str, args, n: int, seed: int = 1):
    workload = TENSOR_CORE_SUITE[name][0]
    dag = ComputeDAG(workload_tensors(make_workload_key(workload, args)))
    sampler = SketchSampler(generate_sketches(dag))
    states = sampler.sample(n, seed)
    assert len(states) == n, sampler.rejected
    return dag, states


def fetches(program: ir.Program):
    """(width, store, value) of every `vectorize` loop of the program that writes shared memory."""
    for k in program.kernels:
        for s in ir.iter_stmts(k.body):
            if isinstance(s, ir.For) and s.kind == "vectorize":
                body = s.body.then_case if isinstance(s.body, ir.IfThenElse) else s.body
                if isinstance(body, ir.Store) and body.buffer.scope == "shared":
                    yield s.extent, body, body.value


def check_vector_fetches(program: ir.Program, source: str) -> set[int]:
    """Every fetch prints as one vector store (into a double-buffered buffer, when its source
    is proven aligned: one cp.async of the vector's bytes); a plain copy also as one vector
    load."""
    widths = set()
    for width, store, val in fetches(program):
        widths.add(width)
        if f"as_cp_async_{2 * width}(&{store.buffer.name}[" in source:
            assert store.buffer.async_copy
            continue
        types = VECTOR[width]
        assert any(f"*reinterpret_cast<{t}*>(&{store.buffer.name}[" in source for t in types)
        if isinstance(val, Load):
            load = f"*reinterpret_cast<const {{}}*>(&{val.buffer.name}["
            assert any(load.format(t) in source for t in types), (width, val.buffer.name)
    assert not SCALAR_PAIR.search(source)
    return widths


CASES = [
    ("matmul_fp16", (1024, 1024, 1024)),
    ("batch_matmul_bf16", (16, 512, 512, 64)),
    ("conv2d_nhwc_fp16", (256, 14, 14, 512, 256, 3, 3, 1, 1)),
]


@pytest.mark.parametrize("name, args", CASES)
def test_full_size_fetches_print_as_vectors(name, args):
    dag, states = tc_states(name, args, 8)
    widths = set()
    for state in states:
        kernel = build(dag, state)
        widths |= check_vector_fetches(kernel.program, kernel.source)
    assert 8 in widths  # the draws include 16-byte fetches


@pytest.mark.parametrize("name", [name for name, _ in CASES])  # the other layouts fetch alike
def test_reduced_states_print_vectors_and_match_numpy(name):
    dag, states = tc_states(name, TENSOR_CORE_SUITE[name][2], 6)
    inputs = half_inputs(dag)
    expected = evaluate(dag.tensors, inputs)
    for state in states:
        kernel = build(dag, state)
        check_vector_fetches(kernel.program, kernel.source)
        assert_half_outputs_match(dag, kernel.program, inputs, expected)


@needs_nvcc
@pytest.mark.slow
def test_vector_fetches_compile_for_sm90_without_spills():
    from concurrent.futures import ThreadPoolExecutor

    from measure import compile_resources

    sources = [_fetch_program(w, 32, pad=pad) for w in (2, 4, 8) for pad in (None, 0.0, 1.0)]
    sources = [codegen_program(p) for p in sources]
    for name, args in CASES:
        dag, states = tc_states(name, args, 2, seed=3)
        sources += [build(dag, s).source for s in states]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda s: compile_resources(s, arch="sm_90"), sources))
    assert not [r for res in results for r in res.values() if r.spill_bytes]
