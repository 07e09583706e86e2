"""Elements of shared buffers inside long unrolled nests print as a pointer plus a constant offset
(`autosched.codegen.index_forms.split_unrolled`): where the index splits so, the two parts sum to
the index; where it does not (a varying term that is not linear, a term that may be negative, a
short nest, a global buffer or a register array), the element prints as `name[index]`."""

from __future__ import annotations

import random

import pytest

from autosched.codegen.cuda import codegen_program
from autosched.codegen.index_forms import MIN_COPIES, split_unrolled
from autosched.lower import ir
from autosched.lower.arith import to_affine
from autosched.te.expr import BinOp, Expr, Var
from autosched.te.visitor import children, free_vars, loads
from tests.lower.test_interpreter import BX, TX, ld, loop, st
from tests.workloads_for_tests import suite_dag


def _value(e: Expr, env: dict[int, int]) -> int:
    """`e` evaluated with the variables' values in `env` (ids), + * // % only."""
    if isinstance(e, Var):
        return env[id(e)]
    if not children(e):
        return int(e.value)
    a, b = (_value(c, env) for c in children(e))
    ops = {"+": a + b, "*": a * b, "floordiv": a // b if b else 0, "floormod": a % b if b else 0}
    return ops[e.op]


def test_an_index_splits_into_invariant_and_a_linear_offset():
    i, j, o = Var("i"), Var("j"), Var("o")
    index = i * 81 + j * 9 + TX % 7 + 3 + o * 648
    invariant, offset = split_unrolled(index, "shared", {id(i): 8, id(j): 8})
    assert {id(v) for v in free_vars(invariant)} == {id(TX), id(o)}
    assert {id(v) for v in free_vars(offset)} == {id(i), id(j)}  # the constant goes with them
    rng = random.Random(0)
    for _ in range(20):
        env = {id(v): rng.randrange(50) for v in (i, j, o, TX)}
        assert _value(invariant, env) + _value(offset, env) == _value(index, env)


@pytest.mark.parametrize(
    "case",
    [
        "nonlinear",
        "negative",
        "only varying",
        "only invariant",
        "nothing unrolled",
        "short nest",
        "global",
        "local",
    ],
)
def test_an_index_that_does_not_split(case):
    i = Var("i")
    long = {id(i): MIN_COPIES}
    index, scope, unrolled = {
        "nonlinear": ((i * 4 + TX) // 32 * 1001 + BX * 128, "shared", long),
        "negative": (i * 9 + TX - 1, "shared", long),
        "only varying": (i * 9 + 4, "shared", long),
        "only invariant": (TX * 9 + BX, "shared", long),
        "nothing unrolled": (i * 9 + TX, "shared", {}),
        "short nest": (i * 9 + TX, "shared", {id(i): MIN_COPIES - 1}),
        "global": (i * 9 + TX, "global", long),
        "local": (i * 9 + TX, "local", long),
    }[case]
    assert split_unrolled(index, scope, unrolled) is None
    assert split_unrolled(i * 9 + TX, "shared", long) is not None  # the same, where it splits


def test_the_printer_splits_shared_elements_in_long_unrolled_nests_only():
    A = ir.Buffer("A", (4096,), "float32")
    S = ir.Buffer("S", (1024,), "float32", "shared")
    R = ir.Buffer("R", (64,), "float32", "local")

    def products(i):  # 8 x 8 unrolled copies: shared reads split, global and local ones do not
        return loop(
            "j",
            8,
            lambda j: st(R, i * 8 + j, ld(S, TX * 64 + i * 8 + j) * ld(A, BX * 64 + i * 8 + j)),
            kind="unroll",
        )

    short = loop("k", 8, lambda k: st(S, TX * 64 + k, ld(A, BX * 64 + k)), kind="unroll")
    body = ir.seq([short, loop("i", 8, products, kind="unroll")])
    k = ir.Kernel("k", (16, 1, 1), (16, 1, 1), [S, R], body)
    src = codegen_program(ir.Program([k], [A], [A]))
    assert "(S + (((int)threadIdx.x) * 64))[((i * 8) + j)]" in src, src
    assert "A[(((((int)blockIdx.x) * 64) + (i * 8)) + j)]" in src, src
    assert "R[((i * 8) + j)]" in src, src
    assert "S[((((int)threadIdx.x) * 64) + k)] = A[((((int)blockIdx.x) * 64) + k)];" in src, src


def test_every_split_of_a_conv_sums_to_its_index():
    """Over sampled seed-conv states: every access inside an unrolled loop that splits, splits
    into two parts whose affine sum equals the index (the printed element is the same one)."""
    from autosched.sketch import SketchSampler, generate_sketches

    sampler = SketchSampler(generate_sketches(suite_dag("conv2d_bias_relu")))
    splits = 0
    for state in sampler.sample(4, 0):
        for kernel in sampler.programs[state.key()].kernels:
            for index, unrolled in _accesses(kernel.body, {}):
                split = split_unrolled(index, "shared", unrolled)
                if split is not None:
                    splits += 1
                    total = BinOp("+", split[0], split[1], index.dtype)
                    difference = to_affine(BinOp("-", total, index, index.dtype), {})
                    assert difference.is_const() and difference.const == 0
    assert splits > 0


def _accesses(s: ir.Stmt, unrolled: dict[int, int]):
    """(flat index, the enclosing unrolled loops: variable id -> extent) of every Store and
    Load, as if every nest were long enough to split."""
    if isinstance(s, ir.For):
        inner = {**unrolled, id(s.var): MIN_COPIES} if s.kind != "serial" else unrolled
        yield from _accesses(s.body, inner)
        return
    if isinstance(s, ir.Store):
        yield s.index, unrolled
        for load in loads(s.value):
            yield load.indices[0], unrolled
    for child in getattr(s, "stmts", ()) or ():
        yield from _accesses(child, unrolled)
    for attr in ("then_case", "else_case", "body"):
        child = getattr(s, attr, None)
        if isinstance(child, ir.Stmt):
            yield from _accesses(child, unrolled)
