"""Tests of the lock-step CPU interpreter of lowered programs (`autosched.lower.interpreter`)
and of the IR verifier, on programs built by hand. The builders here are shared with
test_codegen_cuda.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosched import te
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.interpreter import InterpreterError, run_program
from autosched.lower.verify import verify_program
from autosched.te.expr import Load, Var, as_expr

TX, TY = ir.THREAD_VARS["threadIdx.x"], ir.THREAD_VARS["threadIdx.y"]
BX, BY = ir.THREAD_VARS["blockIdx.x"], ir.THREAD_VARS["blockIdx.y"]


# ---- IR building helpers -------------------------------------------------------------------


def ld(buf: ir.Buffer, idx) -> Load:
    return Load(buf, (as_expr(idx),))


def st(buf: ir.Buffer, idx, val) -> ir.Store:
    return ir.Store(buf, as_expr(idx), as_expr(val, buf.dtype))


def loop(name: str, extent: int, body_fn, kind: str = "serial") -> ir.For:
    v = Var(name)
    body = body_fn(v)
    return ir.For(v, extent, kind, ir.seq(body) if isinstance(body, list) else body)


def elementwise_program(n: int = 1000, threads: int = 128, dtype: str = "float32") -> ir.Program:
    """(a) B[i] = A[i] * 2 + 1 with a guard for the non-dividing split of n by `threads`."""
    A, B = ir.Buffer("A", (n,), dtype), ir.Buffer("B", (n,), dtype)
    i = BX * threads + TX
    body = ir.IfThenElse(i < n, st(B, i, ld(A, i) * te.const(2.0, dtype) + te.const(1.0, dtype)))
    k = ir.Kernel("elementwise_kernel", (math.ceil(n / threads), 1, 1), (threads, 1, 1), [], body)
    return ir.Program([k], [A, B], [B])


def matmul_program(barrier1: bool = True, barrier2: bool = True, n: int = 32) -> ir.Program:
    """(b) C = A @ B (n x n x n): 16x16 tiles per block, 4x4 threads each computing 4x4 outputs,
    8-wide k tiles of A and B staged in shared memory by float4 cooperative loads."""
    A, B, C = (ir.Buffer(x, (n, n), "float32") for x in "ABC")
    As = ir.Buffer("A_shared", (16 * 8,), "float32", "shared")
    Bs = ir.Buffer("B_shared", (8 * 16,), "float32", "shared")
    acc = ir.Buffer("C_local", (16,), "float32", "local")
    tid = TY * 4 + TX

    def load_tiles(ko: Var) -> list[ir.Stmt]:
        def a_vec(ax):
            row, col = ax * 8 + tid // 2, (tid % 2) * 4
            return loop(
                "va",
                4,
                lambda v: st(As, row * 8 + col + v, ld(A, (BY * 16 + row) * n + ko * 8 + col + v)),
                "vectorize",
            )

        def b_vec(ax):
            row, col = ax * 4 + tid // 4, (tid % 4) * 4
            return loop(
                "vb",
                4,
                lambda v: st(Bs, row * 16 + col + v, ld(B, (ko * 8 + row) * n + BX * 16 + col + v)),
                "vectorize",
            )

        return [loop("ax0", 2, a_vec), loop("ax1", 2, b_vec)]

    def compute(ko: Var) -> list[ir.Stmt]:
        def inner(ki):
            return loop(
                "i",
                4,
                lambda i: loop(
                    "j",
                    4,
                    lambda j: st(
                        acc,
                        i * 4 + j,
                        ld(acc, i * 4 + j)
                        + ld(As, (TY * 4 + i) * 8 + ki) * ld(Bs, ki * 16 + TX * 4 + j),
                    ),
                    "unroll",
                ),
                "unroll",
            )

        return [loop("ki", 8, inner, "unroll")]

    def k_step(ko: Var) -> list[ir.Stmt]:
        body = load_tiles(ko) + ([ir.Barrier()] if barrier1 else []) + compute(ko)
        return body + ([ir.Barrier()] if barrier2 else [])

    init = loop(
        "i", 4, lambda i: loop("j", 4, lambda j: st(acc, i * 4 + j, 0.0), "unroll"), "unroll"
    )
    write = loop(
        "i",
        4,
        lambda i: loop(
            "j",
            4,
            lambda j: st(C, (BY * 16 + TY * 4 + i) * n + BX * 16 + TX * 4 + j, ld(acc, i * 4 + j)),
            "vectorize",
        ),
        "unroll",
    )
    body = ir.seq([init, loop("ko", n // 8, k_step), write])
    k = ir.Kernel("matmul_kernel", (n // 16, n // 16, 1), (4, 4, 1), [As, Bs, acc], body)
    return ir.Program([k], [A, B, C], [C])


def softmax_program(
    rows: int, cols: int, ext: int, groups: int, tag: str = "threadIdx.x"
) -> ir.Program:
    """(d) Y = softmax(X) row-wise: `ext` threads along `tag` share a row (AllReduce max, then sum),
    `groups` rows per block along the other thread axis; columns strided by `ext` and guarded."""
    X, Y = ir.Buffer("X", (rows, cols), "float32"), ir.Buffer("Y", (rows, cols), "float32")
    m = ir.Buffer("row_max", (1,), "float32", "local")
    s = ir.Buffer("row_sum", (1,), "float32", "local")
    part = ir.Buffer("part", (1,), "float32", "local")
    other = "threadIdx.y" if tag == "threadIdx.x" else "threadIdx.x"
    r_var, c_var = ir.THREAD_VARS[other], ir.THREAD_VARS[tag]
    row = BX * groups + r_var
    nc = math.ceil(cols / ext)

    def col(c):
        return c * ext + c_var

    def x(c):
        return ld(X, row * cols + col(c))

    def padded(c, value, fill):  # a padded load: out of bounds where the guard is false
        return te.if_then_else(col(c) < cols, value, fill)

    stmts = [
        st(part, 0, te.min_value("float32")),
        loop("c", nc, lambda c: st(part, 0, padded(c, te.max(ld(part, 0), x(c)), ld(part, 0)))),
        ir.AllReduce("max", ld(part, 0), None, m, as_expr(0), tag, ext),
        st(part, 0, 0.0),
        loop("c", nc, lambda c: st(part, 0, ld(part, 0) + padded(c, te.exp(x(c) - ld(m, 0)), 0.0))),
        ir.AllReduce("sum", ld(part, 0), None, s, as_expr(0), tag, ext),
        loop(
            "c",
            nc,
            lambda c: ir.IfThenElse(
                col(c) < cols, st(Y, row * cols + col(c), te.exp(x(c) - ld(m, 0)) / ld(s, 0))
            ),
        ),
    ]
    block = (ext, groups, 1) if tag == "threadIdx.x" else (groups, ext, 1)
    k = ir.Kernel("softmax_kernel", (rows // groups, 1, 1), block, [m, s, part], ir.seq(stmts))
    return ir.Program([k], [X, Y], [Y])


def rowsum_cond_program(rows: int, cols: int, ext: int, groups: int) -> ir.Program:
    """(d') S[r] = sum(X[r, :]) with one element per thread: AllReduce with a `cond` guarding a
    load that is out of bounds for the last row's extra threads."""
    X, S = ir.Buffer("X", (rows, cols), "float32"), ir.Buffer("S", (rows,), "float32")
    red = ir.Buffer("red", (1,), "float32", "local")
    row = BX * groups + TY
    stmts = [
        ir.AllReduce("sum", ld(X, row * cols + TX), TX < cols, red, as_expr(0), "threadIdx.x", ext),
        ir.IfThenElse(TX == 0, st(S, row, ld(red, 0))),
    ]
    k = ir.Kernel("rowsum_kernel", (rows // groups, 1, 1), (ext, groups, 1), [red], ir.seq(stmts))
    return ir.Program([k], [X, S], [S])


def math_program(dtype: str = "float32") -> ir.Program:
    """(g) Every math call elementwise on 64 values, one output row per function."""
    funcs = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "floor", "ceil", "pow"]
    X = ir.Buffer("X", (64,), dtype)
    Y = ir.Buffer("Y", (len(funcs), 64), dtype)
    stmts = []
    for f, name in enumerate(funcs):
        x = ld(X, TX)
        val = te.pow(x, te.const(1.5, dtype)) if name == "pow" else te.call(name, x)
        stmts.append(st(Y, f * 64 + TX, val))
    k = ir.Kernel("math_kernel", (1, 1, 1), (64, 1, 1), [], ir.seq(stmts))
    return ir.Program([k], [X, Y], [Y])


def intdiv_program() -> ir.Program:
    """(g) floordiv / floormod of signed ints (both signs), min/max, and a cast to float."""
    A, B = ir.Buffer("A", (64,), "int32"), ir.Buffer("B", (64,), "int32")
    Q, R = ir.Buffer("Q", (64,), "int32"), ir.Buffer("R", (64,), "int32")
    F = ir.Buffer("F", (64,), "float32")
    a, b = ld(A, TX), ld(B, TX)
    stmts = [
        st(Q, TX, te.floordiv(a, b)),
        st(R, TX, te.floormod(a, b) + te.max(a, b) - te.min(a, b) + te.floormod(TX - 32, 7)),
        st(F, TX, te.cast(te.floordiv(TX - 32, 5), "float32")),
    ]
    k = ir.Kernel("intdiv_kernel", (1, 1, 1), (64, 1, 1), [], ir.seq(stmts))
    return ir.Program([k], [A, B, Q, R, F], [Q, R, F])


def run(program: ir.Program, **arrays) -> dict[str, np.ndarray]:
    verify_program(program)
    run_program(program, arrays)
    return arrays


# ---- interpreter ---------------------------------------------------------------------------


def test_elementwise_with_guard():
    a = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    out = run(elementwise_program(), A=a, B=np.zeros(1000, np.float32))
    np.testing.assert_allclose(out["B"], a * 2 + 1, rtol=1e-6)


def test_matmul_matches_numpy():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    out = run(matmul_program(), A=a, B=b, C=np.zeros((32, 32), np.float32))
    np.testing.assert_allclose(out["C"], a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("which", ["barrier1", "barrier2"])
def test_matmul_missing_barrier_is_a_race(which):
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    program = matmul_program(**{which: False})
    verify_program(program)
    with pytest.raises(InterpreterError, match="race on shared buffer [AB]_shared"):
        run_program(program, {"A": a, "B": b, "C": np.zeros((32, 32), np.float32)})


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


SOFTMAX_CASES = [  # (rows, cols, ext, groups, tag)
    (4, 100, 64, 2, "threadIdx.x"),
    (4, 100, 48, 2, "threadIdx.x"),
    (6, 37, 16, 3, "threadIdx.x"),
    (3, 20, 8, 3, "threadIdx.x"),
    (4, 50, 32, 2, "threadIdx.y"),
]


@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=lambda c: f"{c[4][-1]}{c[2]}x{c[3]}")
def test_allreduce_softmax(case):
    rows, cols, ext, groups, tag = case
    x = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32) * 4
    out = run(softmax_program(rows, cols, ext, groups, tag), X=x, Y=np.zeros_like(x))
    np.testing.assert_allclose(out["Y"], _softmax(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("ext", [64, 48])
def test_allreduce_cond_guards_padded_load(ext):
    x = np.random.default_rng(4).standard_normal((4, 40)).astype(np.float32)
    out = run(rowsum_cond_program(4, 40, ext, 2), X=x, S=np.zeros(4, np.float32))
    np.testing.assert_allclose(out["S"], x.sum(axis=1), rtol=1e-5, atol=1e-5)


def _shift_program(guarded: bool) -> ir.Program:
    """(e) B[i] = A[i - 1] (0 at i = 0): a padded load under a Select, or unguarded."""
    A, B = ir.Buffer("A", (64,), "float32"), ir.Buffer("B", (64,), "float32")
    val = te.if_then_else(TX >= 1, ld(A, TX - 1), 0.0) if guarded else ld(A, TX - 1)
    k = ir.Kernel("shift_kernel", (1, 1, 1), (64, 1, 1), [], st(B, TX, val))
    return ir.Program([k], [A, B], [B])


def test_padded_load_under_select():
    a = np.arange(64, dtype=np.float32)
    out = run(_shift_program(True), A=a, B=np.zeros(64, np.float32))
    np.testing.assert_array_equal(out["B"], np.concatenate([[0], a[:-1]]))


def test_out_of_bounds_load_raises():
    arrays = {"A": np.zeros(64, np.float32), "B": np.zeros(64, np.float32)}
    with pytest.raises(
        InterpreterError,
        match=r"out-of-bounds read of global buffer A\[-1\].*threadIdx\(0, 0, 0\).*shift_kernel",
    ):
        run_program(_shift_program(False), arrays)


def test_out_of_bounds_store_raises():
    A = ir.Buffer("A", (10,), "float32")
    k = ir.Kernel("k", (1, 1, 1), (16, 1, 1), [], st(A, TX, 1.0))
    with pytest.raises(InterpreterError, match=r"out-of-bounds write of global buffer A\[10\]"):
        run_program(ir.Program([k], [A], [A]), {"A": np.zeros(10, np.float32)})


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_float16_float64_elementwise(dtype):
    a = np.random.default_rng(5).standard_normal(300).astype(dtype)
    out = run(elementwise_program(300, 64, dtype), A=a, B=np.zeros(300, dtype))
    assert out["B"].dtype == np.dtype(dtype)
    np.testing.assert_allclose(out["B"], a * 2 + 1, rtol=1e-3 if dtype == "float16" else 1e-12)


def test_math_calls_interpret():
    x = np.linspace(0.05, 3.0, 64).astype(np.float32)
    out = run(math_program(), X=x, Y=np.zeros((11, 64), np.float32))["Y"]
    erf = np.array([math.erf(v) for v in x.astype(np.float64)])
    want = [np.exp(x), np.log(x), np.sqrt(x), 1 / np.sqrt(x), np.tanh(x), 1 / (1 + np.exp(-x)),
            erf, np.abs(x), np.floor(x), np.ceil(x), x ** 1.5]  # fmt: skip
    np.testing.assert_allclose(out, np.array(want), rtol=2e-6, atol=1e-6)


def intdiv_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(6)
    a = rng.integers(-50, 50, 64).astype(np.int32)
    b = rng.choice([-7, -3, -1, 1, 2, 5, 9], 64).astype(np.int32)
    return {
        "A": a,
        "B": b,
        "Q": np.zeros(64, np.int32),
        "R": np.zeros(64, np.int32),
        "F": np.zeros(64, np.float32),
    }


def intdiv_expected(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    t = np.arange(64)
    r = a % b + np.maximum(a, b) - np.minimum(a, b) + (t - 32) % 7
    return {"Q": a // b, "R": r.astype(np.int32), "F": ((t - 32) // 5).astype(np.float32)}


def test_floordiv_floormod_negative():
    arrays = intdiv_inputs()
    out = run(intdiv_program(), **arrays)
    for name, want in intdiv_expected(out["A"], out["B"]).items():
        np.testing.assert_array_equal(out[name], want, err_msg=name)


def test_temps_allocated_and_multi_kernel():
    A, T, B = (
        ir.Buffer("A", (64,), "float32"),
        ir.Buffer("T", (64,), "float32"),
        ir.Buffer("B", (64,), "float32"),
    )
    k1 = ir.Kernel("k1", (2, 1, 1), (32, 1, 1), [], st(T, BX * 32 + TX, ld(A, BX * 32 + TX) + 1.0))
    k2 = ir.Kernel("k2", (1, 1, 1), (64, 1, 1), [], st(B, TX, ld(T, 63 - TX) * 2.0))
    a = np.arange(64, dtype=np.float32)
    out = run(ir.Program([k1, k2], [A, B, T], [B], [T]), A=a, B=np.zeros(64, np.float32))
    np.testing.assert_array_equal(out["B"], (a[::-1] + 1) * 2)
    assert "T" in out


def test_wrong_arrays_rejected():
    program = elementwise_program(100, 32)
    with pytest.raises(InterpreterError, match="no array given for the param 'B'"):
        run_program(program, {"A": np.zeros(100, np.float32)})
    with pytest.raises(InterpreterError, match="expected float32 of size 100"):
        run_program(program, {"A": np.zeros(100, np.float64), "B": np.zeros(100, np.float32)})


def test_divergent_barrier_at_runtime():
    S = ir.Buffer("S", (32,), "float32", "shared")
    A = ir.Buffer("A", (32,), "float32")
    body = ir.seq([st(S, TX, 1.0), ir.IfThenElse(TX < 16, ir.Barrier()), st(A, TX, ld(S, 31 - TX))])
    program = ir.Program([ir.Kernel("k", (1, 1, 1), (32, 1, 1), [S], body)], [A], [A])
    with pytest.raises(InterpreterError, match="divergent barrier"):
        run_program(program, {"A": np.zeros(32, np.float32)})


def test_same_value_writes_are_not_races():
    # Every thread writes the same value to S[0], then reads it: benign on a GPU.
    S = ir.Buffer("S", (1,), "float32", "shared")
    A = ir.Buffer("A", (32,), "float32")
    body = ir.seq([st(S, 0, 3.0), ir.Barrier(), st(S, 0, 3.0), st(A, TX, ld(S, 0))])
    program = ir.Program([ir.Kernel("k", (1, 1, 1), (32, 1, 1), [S], body)], [A], [A])
    out = run(program, A=np.zeros(32, np.float32))
    assert (out["A"] == 3).all()


def test_shared_write_write_race():
    S = ir.Buffer("S", (1,), "float32", "shared")
    A = ir.Buffer("A", (32,), "float32")
    body = ir.seq([st(S, 0, te.cast(TX, "float32")), ir.Barrier(), st(A, TX, ld(S, 0))])
    program = ir.Program([ir.Kernel("k", (1, 1, 1), (32, 1, 1), [S], body)], [A], [A])
    with pytest.raises(InterpreterError, match="race on shared buffer S.*also writes"):
        run_program(program, {"A": np.zeros(32, np.float32)})


# ---- verifier ------------------------------------------------------------------------------


def test_verifier_accepts_examples():
    for p in (
        elementwise_program(),
        matmul_program(),
        softmax_program(4, 100, 48, 2),
        math_program(),
        intdiv_program(),
    ):
        verify_program(p)


def test_verifier_rejects_unbound_var():
    A = ir.Buffer("A", (8,), "float32")
    k = ir.Kernel("k", (1, 1, 1), (8, 1, 1), [], st(A, Var("i"), 1.0))
    with pytest.raises(LoweringError, match="variable 'i' is not bound"):
        verify_program(ir.Program([k], [A], [A]))


def test_verifier_rejects_divergent_barrier():
    A = ir.Buffer("A", (8,), "float32")
    body = ir.IfThenElse(TX < 4, ir.seq([ir.Barrier(), st(A, TX, 1.0)]))
    k = ir.Kernel("k", (1, 1, 1), (8, 1, 1), [], body)
    with pytest.raises(LoweringError, match="divergent barrier"):
        verify_program(ir.Program([k], [A], [A]))
    uniform = ir.IfThenElse(BX < 4, ir.seq([ir.Barrier(), st(A, TX, 1.0)]))
    verify_program(ir.Program([ir.Kernel("k", (1, 1, 1), (8, 1, 1), [], uniform)], [A], [A]))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: setattr(p.kernels[0], "block", (64, 32, 1)), "2048 threads per block"),
        (
            lambda p: setattr(p.kernels[0].body, "value", as_expr(1)),
            "is int32 but the buffer is float32",
        ),
        (
            lambda p: setattr(p.kernels[0], "allocs", [ir.Buffer("A", (4,), "float32", "local")]),
            "used twice",
        ),
        (lambda p: setattr(p, "outputs", [ir.Buffer("Z", (4,), "float32")]), "is not a param"),
        (
            lambda p: setattr(
                p.kernels[0], "body", ir.For(Var("i"), 0, "serial", p.kernels[0].body)
            ),
            "not a positive int",
        ),
    ],
)
def test_verifier_rejects(mutate, message):
    A = ir.Buffer("A", (8,), "float32")
    p = ir.Program([ir.Kernel("k", (1, 1, 1), (8, 1, 1), [], st(A, TX, 1.0))], [A], [A])
    verify_program(p)
    mutate(p)
    with pytest.raises(LoweringError, match=message):
        verify_program(p)


def test_verifier_takes_launch_limits_from_hardware_params():
    from measure import HardwareParams

    A = ir.Buffer("A", (8,), "float32")
    p = ir.Program([ir.Kernel("k", (1, 1, 1), (128, 1, 1), [], st(A, TX % 8, 1.0))], [A], [A])
    verify_program(p)
    with pytest.raises(LoweringError, match="128 threads per block > 64"):
        verify_program(p, HardwareParams(max_threads_per_block=64))
    with pytest.raises(LoweringError, match=r"block \(128, 1, 1\) is beyond"):
        verify_program(p, HardwareParams(max_block_dims=(64, 64, 64)))
    p.kernels[0].block = (2048, 1, 1)
    verify_program(p, launch_limits=False)  # structure only: what `lower` checks


def test_verifier_rejects_foreign_and_shared_across_kernels():
    A = ir.Buffer("A", (8,), "float32")
    S = ir.Buffer("S", (8,), "float32", "shared")
    k1 = ir.Kernel(
        "k1",
        (1, 1, 1),
        (8, 1, 1),
        [S],
        ir.seq([st(S, TX, 1.0), ir.Barrier(), st(A, TX, ld(S, TX))]),
    )
    k2 = ir.Kernel("k2", (1, 1, 1), (8, 1, 1), [], st(A, TX, ld(S, TX)))
    with pytest.raises(
        LoweringError, match="kernel k2.*buffer 'S' is neither a param nor allocated"
    ):
        verify_program(ir.Program([k1, k2], [A], [A]))
    k2.allocs = [S]
    with pytest.raises(LoweringError, match="also allocated by kernel k1"):
        verify_program(ir.Program([k1, k2], [A], [A]))
