"""The warp-collective Tensor Core statements of the IR (`ir.WarpStmt`) on hand-built programs:
the CPU interpreter against numpy (float16 / bfloat16, row- and column-major tiles, global and
shared memory), its run-time checks, the verifier's rules, the CUDA printer (golden lines, nvcc
for sm_90 without spills), the features, and the GPU.

The programs: C (M x N, float32) = A (M x K) @ B (K x N) with 16x16x16 wmma tiles, one block of
(32, W, 1) threads, warp w = threadIdx.y computing output tiles.
"""

from __future__ import annotations

import numpy as np
import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError
from autosched.features import extract_features
from autosched.lower import ir
from autosched.lower.interpreter import InterpreterError, run_program
from autosched.lower.unrolling import unroll_register_indices
from autosched.lower.verify import verify_program
from autosched.te.dtype import from_storage, to_storage
from autosched.te.expr import Const, Load, Var, as_expr
from measure import compile_resources
from tests.compilers import needs_nvcc

TX, TY = ir.THREAD_VARS["threadIdx.x"], ir.THREAD_VARS["threadIdx.y"]
ZERO = Const(0, "int32")
FZERO = Const(0.0, "float32")


def tile(buf: ir.Buffer, offset, ldm: int, layout: str = "row_major") -> ir.MatrixTile:
    return ir.MatrixTile(buf, as_expr(offset), ldm, layout)


def fragments(dtype: str, tiles: int = 1) -> tuple[ir.Buffer, ir.Buffer, ir.Buffer]:
    n = tiles * ir.TILE_ELEMS
    return (
        ir.Buffer("A_frag", (n,), dtype, "wmma.matrix_a"),
        ir.Buffer("B_frag", (n,), dtype, "wmma.matrix_b"),
        ir.Buffer("C_frag", (n,), "float32", "wmma.accumulator"),
    )


def wmma_program(
    dtype: str = "float16",
    layout_a: str = "row_major",
    layout_b: str = "row_major",
    n: int = 32,
    shared: bool = False,
) -> ir.Program:
    """C = A @ B (n x n x n) by one block of (32, (n/16)^2, 1) threads, warp w computing output
    tile (w // t, w % t) with a loop over the k tiles. A is stored M x K (row_major) or K x M
    (col_major: the tile's element (m, k) at m + k * n), B K x N or N x K likewise. `shared`:
    A and B staged in shared memory first, the result stored to shared and copied out."""
    t = n // 16
    A, B = ir.Buffer("A", (n, n), dtype), ir.Buffer("B", (n, n), dtype)
    C = ir.Buffer("C", (n, n), "float32")
    a, b, c = fragments(dtype)
    warps = t * t
    wm, wn = TY // t, TY % t
    allocs, pre, post = [a, b, c], [], []
    src_a, src_b, out = A, B, C
    if shared:
        src_a = ir.Buffer("A_shared", (n * n,), dtype, "shared")
        src_b = ir.Buffer("B_shared", (n * n,), dtype, "shared")
        out = ir.Buffer("C_shared", (n * n,), "float32", "shared")
        allocs += [src_a, src_b, out]
        tid = TY * 32 + TX

        def copy(dst, src, value=lambda x: x):
            i = Var("i")
            idx = i * (32 * warps) + tid
            return ir.For(
                i, n * n // (32 * warps), "unroll", ir.Store(dst, idx, value(Load(src, (idx,))))
            )

        pre = [copy(src_a, A), copy(src_b, B), ir.Barrier()]
        post = [ir.Barrier(), copy(C, out)]
    k = Var("k")
    offs_a = {"row_major": wm * 16 * n + k * 16, "col_major": k * 16 * n + wm * 16}
    offs_b = {"row_major": k * 16 * n + wn * 16, "col_major": wn * 16 * n + k * 16}
    body = ir.seq(
        [
            *pre,
            ir.FragmentFill(c, ZERO, FZERO),
            ir.For(
                k,
                t,
                "serial",
                ir.seq(
                    [
                        ir.FragmentLoad(a, ZERO, tile(src_a, offs_a[layout_a], n, layout_a)),
                        ir.FragmentLoad(b, ZERO, tile(src_b, offs_b[layout_b], n, layout_b)),
                        ir.FragmentMma(c, ZERO, a, ZERO, b, ZERO),
                    ]
                ),
            ),
            ir.FragmentStore(tile(out, wm * 16 * n + wn * 16, n), c, ZERO),
            *post,
        ]
    )
    kernel = ir.Kernel("wmma_kernel", (1, 1, 1), (32, warps, 1), allocs, body)
    return ir.Program([kernel], [A, B, C], [C])


def operands(dtype: str, layout_a: str, layout_b: str, n: int = 32, seed: int = 0):
    """Random A, B stored as the layouts say (storage dtype) and the float32 reference C."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    a_st, b_st = to_storage(a, dtype), to_storage(b, dtype)  # rounded to dtype
    a_val = from_storage(a_st, dtype).astype(np.float64)
    b_val = from_storage(b_st, dtype).astype(np.float64)
    ref = (a_val @ b_val).astype(np.float32)
    if layout_a == "col_major":
        a_st = np.ascontiguousarray(a_st.T)
    if layout_b == "col_major":
        b_st = np.ascontiguousarray(b_st.T)
    return a_st, b_st, ref


def run_cpu(program: ir.Program, a, b) -> np.ndarray:
    c = np.full(program.params[2].shape, np.nan, np.float32)
    run_program(program, {"A": a, "B": b, "C": c})
    return c


# ---- interpreter ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "layouts, shared",
    [(("row_major", "row_major"), False), (("col_major", "col_major"), False)]
    + [(("row_major", "col_major"), True)],
)
def test_interpreter_matches_numpy(dtype, layouts, shared):
    program = wmma_program(dtype, *layouts, shared=shared)
    verify_program(program)
    a, b, ref = operands(dtype, *layouts)
    np.testing.assert_allclose(run_cpu(program, a, b), ref, rtol=1e-6, atol=1e-6)


def test_interpreter_detects_missing_barrier_before_wmma_load():
    program = wmma_program("float16", shared=True)
    body = program.kernels[0].body
    body.stmts = [s for s in body.stmts if not isinstance(s, ir.Barrier)][:2] + body.stmts[3:]
    a, b, _ = operands("float16", "row_major", "row_major")
    with pytest.raises(InterpreterError, match="race on shared buffer A_shared"):
        run_cpu(program, a, b)


def _mutated(change) -> ir.Program:
    """`wmma_program()` changed in place by `change(program, kernel, stmts, (a, b, c))`, which
    may return new body statements."""
    program = wmma_program()
    k = program.kernels[0]
    stmts = list(k.body.stmts)
    new = change(program, k, stmts, tuple(k.allocs[:3]))
    k.body = ir.seq(new if new is not None else stmts)
    return program


def _load_a(offset, ldm: int, layout: str = "row_major"):
    """A change that appends a load of matrix_a from A at `offset` with `ldm`."""
    return lambda p, k, ss, f: [
        *ss,
        ir.FragmentLoad(f[0], ZERO, tile(p.params[0], offset, ldm, layout)),
    ]


INTERPRETER_CASES = {
    "divergent": (
        lambda p, k, ss, f: [ir.IfThenElse(TX < 16, ss[0]), *ss[1:]],
        r"FragmentFill\(C_frag\).*reached by only 16 of 32 lanes.*divergent warp op",
    ),
    "lane tile": (
        lambda p, k, ss, f: [ir.FragmentFill(f[2], TX // 16, FZERO), *ss],
        "lanes of the warp of .* disagree on the tile number of C_frag",
    ),
    "tile range": (
        lambda p, k, ss, f: [ir.FragmentFill(f[2], Const(1, "int32"), FZERO), *ss],
        "tile 1 of C_frag is out of range",
    ),
    "offset": (_load_a(8, 32), "offset 8 into A is not 32-byte aligned"),
    "ldm": (_load_a(16, 36), "ldm 36 of A is not a multiple of 16 bytes"),
    "bounds": (_load_a(1008, 32), "out-of-bounds read of global buffer A"),
    "store dtype": (
        lambda p, k, ss, f: [*ss, ir.FragmentStore(tile(p.params[0], 0, 32), f[2], ZERO)],
        "stores a float32 accumulator into float16 A",
    ),
}


@pytest.mark.parametrize("case", sorted(INTERPRETER_CASES))
def test_interpreter_rejects(case):
    change, match = INTERPRETER_CASES[case]
    a, b, _ = operands("float16", "row_major", "row_major")
    with pytest.raises(InterpreterError, match=match):
        run_cpu(_mutated(change), a, b)


def test_interpreter_warp_uniform_guard_is_fine():
    program = _mutated(lambda p, k, ss, f: [ir.IfThenElse(TY < 8, ir.seq(ss))])
    a, b, ref = operands("float16", "row_major", "row_major")
    np.testing.assert_allclose(run_cpu(program, a, b), ref, rtol=1e-6, atol=1e-6)


def multi_tile_program(dtype: str = "float16", n: int = 32, kind: str = "serial") -> ir.Program:
    """C = A @ B by (32, n/16, 1) threads: warp w computes the row of output tiles w, with
    fragment arrays of n/16 tiles indexed by the loop `j` (of kind `kind`)."""
    t = n // 16
    A, B = ir.Buffer("A", (n, n), dtype), ir.Buffer("B", (n, n), dtype)
    C = ir.Buffer("C", (n, n), "float32")
    a, _, _ = fragments(dtype)
    _, b, c = fragments(dtype, tiles=t)

    def each_tile(fn) -> ir.For:
        j = Var("j")
        return ir.For(j, t, kind, fn(j))

    k = Var("k")
    step = [
        ir.FragmentLoad(a, ZERO, tile(A, TY * 16 * n + k * 16, n)),
        each_tile(lambda j: ir.FragmentLoad(b, j, tile(B, k * 16 * n + j * 16, n))),
        each_tile(lambda j: ir.FragmentMma(c, j, a, ZERO, b, j)),
    ]
    body = ir.seq(
        [
            each_tile(lambda j: ir.FragmentFill(c, j, FZERO)),
            ir.For(k, t, "serial", ir.seq(step)),
            each_tile(lambda j: ir.FragmentStore(tile(C, TY * 16 * n + j * 16, n), c, j)),
        ]
    )
    kernel = ir.Kernel("wmma_rows", (1, 1, 1), (32, t, 1), [a, b, c], body)
    return ir.Program([kernel], [A, B, C], [C])


def vthread_program(dtype: str = "float16", n: int = 32) -> ir.Program:
    """`multi_tile_program` with the column tiles on a vthread loop and one-tile fragments,
    before `inject_virtual_threads` (which expands b and c to n/16 tiles)."""
    t = n // 16
    A, B = ir.Buffer("A", (n, n), dtype), ir.Buffer("B", (n, n), dtype)
    C = ir.Buffer("C", (n, n), "float32")
    a, b, c = fragments(dtype)
    v, k = Var("vt"), Var("k")
    step = [
        ir.FragmentLoad(a, ZERO, tile(A, TY * 16 * n + k * 16, n)),
        ir.FragmentLoad(b, ZERO, tile(B, k * 16 * n + v * 16, n)),
        ir.FragmentMma(c, ZERO, a, ZERO, b, ZERO),
    ]
    per_vthread = ir.seq(
        [
            ir.FragmentFill(c, ZERO, FZERO),
            ir.For(k, t, "serial", ir.seq(step)),
            ir.FragmentStore(tile(C, TY * 16 * n + v * 16, n), c, ZERO),
        ]
    )
    body = ir.For(v, t, ir.VTHREAD_KIND, per_vthread)
    kernel = ir.Kernel("wmma_vthread", (1, 1, 1), (32, t, 1), [a, b, c], body)
    return ir.Program([kernel], [A, B, C], [C])


def test_register_index_unrolling_and_multi_tile_fragments():
    program = multi_tile_program()
    k = program.kernels[0]
    k.body = unroll_register_indices(k.body)
    kinds = {s.var.name: s.kind for s in ir.iter_stmts(k.body) if isinstance(s, ir.For)}
    assert kinds == {"j": "unroll", "k": "serial"}
    verify_program(program)
    a, b, ref = operands("float16", "row_major", "row_major")
    np.testing.assert_allclose(run_cpu(program, a, b), ref, rtol=1e-6, atol=1e-6)


def test_vthread_injection_expands_fragments():
    from autosched.lower.vthread import inject_virtual_threads

    program = vthread_program("bfloat16")
    k = program.kernels[0] = inject_virtual_threads(program.kernels[0])
    a_frag, b_frag, c_frag = k.allocs
    assert (a_frag.size, b_frag.size, c_frag.size) == (256, 512, 512)  # a is shared by both
    assert sum(isinstance(s, ir.FragmentLoad) for s in ir.iter_stmts(k.body)) == 3
    k.body = unroll_register_indices(k.body)
    verify_program(program)
    a, b, ref = operands("bfloat16", "row_major", "row_major")
    np.testing.assert_allclose(run_cpu(program, a, b), ref, rtol=1e-6, atol=1e-6)


# ---- verifier ------------------------------------------------------------------------------


def _fill(c, tile_no=ZERO, value=FZERO):
    return ir.FragmentFill(c, tile_no, value)


def _set_block(p, k, ss, f):
    k.block = (64, 2, 1)


def _retype_a(p, k, ss, f):
    f[0].dtype = "float64"  # float32 is TF32; no wmma shape takes float64 here


def _shrink_c(p, k, ss, f):
    f[2].shape = (200,)


VERIFIER_CASES = {
    "block": (_set_block, "needs blockDim.x == 32"),
    "lane expr": (lambda p, k, ss, f: [_fill(f[2], TX // 32), *ss], "uses threadIdx.x"),
    "lane guard": (
        lambda p, k, ss, f: [ir.IfThenElse(TX < 16, ss[0]), *ss[1:]],
        r"under the lane-dependent condition \(threadIdx.x < 16\)",
    ),
    "vectorize": (
        lambda p, k, ss, f: [ir.For(Var("v"), 2, "vectorize", ss[0]), *ss[1:]],
        "inside the vectorize loop v",
    ),
    "fragment dtype": (_retype_a, r"wmma.matrix_a A_frag is float64, not one of"),
    "fragment size": (_shrink_c, "C_frag has 200 elements, not a multiple of 256"),
    "element-wise": (
        lambda p, k, ss, f: [ir.Store(f[2], ZERO, FZERO), *ss],
        "fragment C_frag is accessed element-wise",
    ),
    "scope": (
        lambda p, k, ss, f: [*ss, ir.FragmentMma(f[2], ZERO, f[1], ZERO, f[0], ZERO)],
        "B_frag has scope wmma.matrix_b, expected one of",
    ),
    "local tile": (
        lambda p, k, ss, f: [*ss, ir.FragmentLoad(f[0], ZERO, tile(_local(k), 0, 16))],
        "tile of L in local memory",
    ),
    "layout": (_load_a(0, 32, "diag"), "layout 'diag' is not one of"),
    "ldm": (_load_a(0, 36), "ldm 36 of A is not a multiple of 16 bytes"),
    "offset": (
        _load_a(TY * 8, 32),
        r"offset \(threadIdx.y\*8\) into A is not provably a multiple of 32 bytes",
    ),
    "two layouts": (_load_a(0, 32, "col_major"), "A_frag is loaded col_major here and row_major"),
    "tile range": (
        lambda p, k, ss, f: [*ss, _fill(f[2], TY)],
        r"tile number threadIdx.y of C_frag ranges over 0..3, beyond its 1 tiles",
    ),
    "store dtype": (
        lambda p, k, ss, f: [*ss, ir.FragmentStore(tile(p.params[0], 0, 32), f[2], ZERO)],
        "stores the float32 accumulator into float16 A",
    ),
    "fill dtype": (
        lambda p, k, ss, f: [_fill(f[2], value=ZERO), *ss],
        "the fill value is int32, not float32",
    ),
}


def _local(k: ir.Kernel) -> ir.Buffer:
    buf = ir.Buffer("L", (256,), "float16", "local")
    k.allocs.append(buf)
    return buf


@pytest.mark.parametrize("case", sorted(VERIFIER_CASES))
def test_verifier_rules(case):
    change, match = VERIFIER_CASES[case]
    verify_program(wmma_program())  # the unchanged program passes
    with pytest.raises(LoweringError, match=match):
        verify_program(_mutated(change))


def test_verifier_accepts_every_variant():
    for program in (
        wmma_program("bfloat16", "col_major", "row_major", shared=True),
        multi_tile_program("bfloat16"),
    ):
        verify_program(program)


# ---- CUDA printer --------------------------------------------------------------------------


def test_printer_golden_lines():
    source = codegen_program(wmma_program("float16", "row_major", "col_major", shared=True))
    lines = [line.strip() for line in source.splitlines()]
    wmma = "nvcuda::wmma"
    expected = [
        "#include <mma.h>",
        f"{wmma}::fragment<{wmma}::matrix_a, 16, 16, 16, half, {wmma}::row_major> A_frag[1];",
        f"{wmma}::fragment<{wmma}::matrix_b, 16, 16, 16, half, {wmma}::col_major> B_frag[1];",
        f"{wmma}::fragment<{wmma}::accumulator, 16, 16, 16, float> C_frag[1];",
        "__shared__ __align__(32) half A_shared[1024];",
        "__shared__ __align__(32) float C_shared[1024];",
        f"{wmma}::fill_fragment(C_frag[0], 0.000000000e+00f);",
        f"{wmma}::load_matrix_sync(A_frag[0], "
        "&A_shared[((((((int)threadIdx.y) / 2) * 16) * 32) + (k * 16))], 32);",
        f"{wmma}::mma_sync(C_frag[0], A_frag[0], B_frag[0], C_frag[0]);",
        f"{wmma}::store_matrix_sync(&C_shared[((((((int)threadIdx.y) / 2) * 16) * 32) + "
        f"((((int)threadIdx.y) % 2) * 16))], C_frag[0], 32, {wmma}::mem_row_major);",
    ]
    for line in expected:
        assert line in lines, (line, source)
    # C is written through store_matrix_sync only: not a const parameter
    assert "float* __restrict__ C" in source and "const float*" not in source
    bf16 = codegen_program(wmma_program("bfloat16"))
    assert "const __nv_bfloat16* __restrict__ A" in bf16
    assert f"{wmma}::matrix_a, 16, 16, 16, __nv_bfloat16, {wmma}::row_major> A_frag[1];" in bf16


def test_printer_header_only_when_used_and_one_layout():
    from tests.lower.test_interpreter import elementwise_program

    assert "mma.h" not in codegen_program(elementwise_program())
    program = _mutated(VERIFIER_CASES["two layouts"][0])
    with pytest.raises(LoweringError, match="A_frag is loaded both row_major and col_major"):
        codegen_program(program)


def _compile_ok(program: ir.Program) -> None:
    source = codegen_program(program)
    resources = compile_resources(source, arch="sm_90")
    for name, res in resources.items():
        assert res.spill_bytes == 0 and res.stack_bytes == 0, (name, res, source)


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_nvcc_compiles_without_spills(dtype):
    _compile_ok(wmma_program(dtype, "col_major", "row_major", shared=True))
    program = multi_tile_program(dtype)
    program.kernels[0].body = unroll_register_indices(program.kernels[0].body)
    _compile_ok(program)


# ---- features ------------------------------------------------------------------------------


def test_features_count_tensor_core_work():
    from autosched.features import FEATURE_NAMES
    from autosched.features.walk import ProgramWalker

    program = wmma_program("float16", shared=True)
    infos = ProgramWalker(program).run()
    assert [i.buffer.name for i in infos] == [
        "A_shared", "B_shared", "C_frag", "A_frag", "B_frag", "C_frag", "C_shared", "C",
    ]  # fmt: skip
    mma = infos[5]
    warps, k_tiles = 4, 2
    assert mma.ops[:3] == [warps * k_tiles * 16**3] * 3  # float mad, add/sub, mul
    load_a = {b.name: b for b in infos[3].buffers}
    assert load_a["A_shared"].bytes == warps * k_tiles * 256 * 2
    assert load_a["A_shared"].unique_bytes == 32 * 32 * 2
    assert load_a["A_frag"].scope == "local"
    assert infos[3].kernel_local_bytes == 8 * (2 + 2 + 4)  # a lane's share of the fragments
    feats = extract_features(program)
    assert feats.shape == (8, len(FEATURE_NAMES)) and np.isfinite(feats).all()
    mad = FEATURE_NAMES.index("float_mad")
    assert feats[5, mad] == np.float32(np.log2(1 + warps * k_tiles * 16**3))
    vthread = vthread_program()
    from autosched.lower.vthread import inject_virtual_threads

    vthread.kernels[0] = inject_virtual_threads(vthread.kernels[0])
    for p in (multi_tile_program(), vthread):
        assert np.isfinite(extract_features(p)).all()


# ---- GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shared", [False, True])
def test_gpu_matches_numpy(dtype, shared):
    from autosched.codegen.build import build_program

    for program in (
        wmma_program(dtype, "row_major", "col_major", n=64, shared=shared),
        multi_tile_program(dtype, n=64, kind="unroll"),
    ):
        layout_b = "col_major" if program.kernels[0].name == "wmma_kernel" else "row_major"
        a, b, ref = operands(dtype, "row_major", layout_b, n=64)
        kernel = build_program(program)
        c = np.full((64, 64), np.nan, np.float32)
        kernel(a, b, c)
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(run_cpu(program, a, b), ref, rtol=1e-6, atol=1e-6)
