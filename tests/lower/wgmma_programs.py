"""Hand-built wgmma programs for the tests: C (M x N, float32) = A (M x K) @ B (K x N), A and B
row-major in global memory, one warpgroup per block computing a 64 x BN tile.

Each K step copies a 64 x BK tile of A into shared memory K-major and a BK x BN tile of B
N-major, both in a canonical layout (`wgmma_layout.canonical_offset`), fences them for the async
proxy, and issues BK / 16 wgmmas in one group that it waits for before the next step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autosched.lower import ir
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.te.dtype import from_storage, to_storage
from autosched.te.expr import Const, Load, Var

TX, TY = ir.THREAD_VARS["threadIdx.x"], ir.THREAD_VARS["threadIdx.y"]
BX, BY = ir.THREAD_VARS["blockIdx.x"], ir.THREAD_VARS["blockIdx.y"]
ZERO = Const(0, "int32")
FZERO = Const(0.0, "float32")
ELEM = wl.ELEMENT_BYTES


@dataclass(frozen=True)
class OperandLayout:
    """How one operand tile is stored in shared memory (and described to the wgmma)."""

    major: str
    swizzle: str
    lbo: int  # bytes
    sbo: int
    k_step: int  # bytes between the starts of consecutive 16-wide K slices


def layouts(bn: int, bk: int, swizzle: str = "none") -> tuple[OperandLayout, OperandLayout]:
    """A's (64 x BK, K-major) and B's (BK x BN, N-major) canonical layouts. No swizzle: A's
    8 x 8 core matrices of one 8-row group side by side (LBO 128 bytes, SBO BK / 8 of them), B's
    core matrices along N side by side (SBO 128), K groups of 8 BN / 8 apart (LBO). 128-byte
    swizzle: A in rows of 64 halfs (BK == 64; SBO 1024, K slices 32 bytes apart), B in rows of
    64 halfs along N (BN == 64; SBO 1024 between 8-k groups, K slices 2048 apart)."""
    if swizzle == "none":
        a = OperandLayout("k", "none", 128, bk // 8 * 128, 2 * 128)
        b = OperandLayout("mn", "none", bn // 8 * 128, 128, 2 * bn // 8 * 128)
        return a, b
    assert bk == 64 and bn == 64, "the swizzled test layouts are one 128-byte row wide"
    a = OperandLayout("k", "128B", 16, 1024, 32)
    b = OperandLayout("mn", "128B", 8192, 1024, 2048)
    return a, b


def wgmma_program(
    dtype: str = "float16",
    m: int = 64,
    n: int = 32,
    k: int = 32,
    bn: int = 32,
    bk: int = 16,
    swizzle: str = "none",
    proxy_fence: bool = True,
    wait: bool = True,
    fence: bool = True,
    a_layout: OperandLayout | None = None,
    mma_accumulator: bool = False,
) -> ir.Program:
    """C = A @ B by (m / 64) x (n / bn) blocks of one warpgroup (32, 4, 1); the flags drop
    a ProxyFence, the WgmmaWait or the WgmmaFence (programs the interpreter must refuse);
    `a_layout` describes A to the wgmma differently from how it is stored. With
    `mma_accumulator` the wgmmas accumulate into the bn / 16 tiles of each warp of an "mma"
    flavour accumulator, filled and stored by the mma flavour's warp statements."""
    A, B = ir.Buffer("A", (m, k), dtype), ir.Buffer("B", (k, n), dtype)
    C = ir.Buffer("C", (m, n), "float32")
    lay_a, lay_b = layouts(bn, bk, swizzle)
    a_s = ir.Buffer("A_shared", (wl.M * bk,), dtype, "shared")
    b_s = ir.Buffer("B_shared", (bk * bn,), dtype, "shared")
    if mma_accumulator:
        acc = ir.Buffer("C_acc", (bn // 16 * ir.TILE_ELEMS,), "float32", ir.ACCUMULATOR_SCOPE)
        acc.fragment_flavour = "mma"
    else:
        acc = ir.Buffer("C_acc", (1, wl.M, bn), "float32", ir.ACCUMULATOR_SCOPE)
        acc.fragment_flavour = ir.WGMMA_FLAVOUR
    tid = TY * 32 + TX
    m0, n0 = BX * wl.M, BY * bn
    ko = Var("ko")

    copy_a = _copy(
        a_s, lay_a, wl.M, bk, A, lambda r, c: (m0 + r) * k + ko * bk + c, lambda r, c: (r, c), tid
    )
    copy_b = _copy(
        b_s, lay_b, bk, bn, B, lambda r, c: (ko * bk + r) * n + n0 + c, lambda r, c: (c, r), tid
    )
    desc_a = a_layout or lay_a
    mmas = [
        wi.WgmmaMma(
            acc,
            ZERO,
            wi.SharedOperand(
                a_s,
                Const(s * desc_a.k_step // ELEM, "int32"),
                desc_a.major,
                desc_a.lbo,
                desc_a.sbo,
                desc_a.swizzle,
            ),
            wi.SharedOperand(
                b_s,
                Const(s * lay_b.k_step // ELEM, "int32"),
                lay_b.major,
                lay_b.lbo,
                lay_b.sbo,
                lay_b.swizzle,
            ),
            bn,
        )
        for s in range(bk // wl.K)
    ]
    step = [copy_a, copy_b]
    step += [wi.ProxyFence()] if proxy_fence else []
    step += [ir.Barrier()]
    step += [wi.WgmmaFence()] if fence else []
    step += [*mmas, wi.WgmmaCommit()]
    step += [wi.WgmmaWait(0)] if wait else []
    step += [ir.Barrier()]
    fill: ir.Stmt = wi.WgmmaFill(acc, ZERO, FZERO)
    store: ir.Stmt = wi.WgmmaStore(ir.MatrixTile(C, m0 * n + n0, n, "row_major"), acc, ZERO)
    if mma_accumulator:
        j = Var("j")
        fill = ir.For(j, bn // 16, "unroll", ir.FragmentFill(acc, j, FZERO))
        j = Var("j")
        origin = (m0 + TY * 16) * n + n0 + j * 16
        store = ir.For(
            j,
            bn // 16,
            "unroll",
            ir.FragmentStore(ir.MatrixTile(C, origin, n, "row_major"), acc, j),
        )
    body = ir.seq([fill, ir.For(ko, k // bk, "serial", ir.seq(step)), store])
    kernel = ir.Kernel("wgmma_kernel", (m // wl.M, n // bn, 1), (32, 4, 1), [a_s, b_s, acc], body)
    return ir.Program([kernel], [A, B, C], [C])


def _swizzled(at):
    """te arithmetic for Swizzle<3,4,3> on a byte offset: bits 4-6 XOR bits 7-9 (an XOR of two
    3-bit fields, written bit by bit)."""
    out = at - 16 * ((at // 16) % 8)
    for bit in range(3):
        x = (at // (16 << bit)) % 2
        y = (at // (128 << bit)) % 2
        out = out + (16 << bit) * ((x + y) % 2)
    return out


def _copy(dst, lay: OperandLayout, rows: int, cols: int, src, src_index, mn_k, tid):
    """Copy a rows x cols tile (row-major in `src`, element (r, c) at `src_index(r, c)`) into
    `dst` where the layout puts element (mn, k) = `mn_k(r, c)`, 128 threads in turn."""
    it = Var(f"{dst.name}_it")
    idx = it * wl.WARPGROUP_THREADS + tid
    r, c = idx // cols, idx % cols
    mn, kk = mn_k(r, c)
    if lay.swizzle == "none":
        at = wl.canonical_offset(lay.major, "none", mn, kk, lay.lbo, lay.sbo)
    else:  # the linear 128B-swizzle layout (see wgmma_layout.element_address), then swizzled
        if lay.major == "k":
            at = (mn % 8) * 128 + (mn // 8) * lay.sbo + kk * ELEM
        else:
            at = (mn % 64) * ELEM + (mn // 64) * lay.lbo + (kk % 8) * 128 + (kk // 8) * lay.sbo
        at = _swizzled(at)
    store = ir.Store(dst, at // ELEM, Load(src, (src_index(r, c),)))
    return ir.For(it, rows * cols // wl.WARPGROUP_THREADS, "serial", store)


def operands(dtype: str, m: int, n: int, k: int, seed: int = 0):
    """Random A (m x k), B (k x n) in storage dtype and the float32 reference C."""
    rng = np.random.default_rng(seed)
    a = to_storage(rng.uniform(-1, 1, (m, k)).astype(np.float32), dtype)
    b = to_storage(rng.uniform(-1, 1, (k, n)).astype(np.float32), dtype)
    ref = from_storage(a, dtype).astype(np.float64) @ from_storage(b, dtype).astype(np.float64)
    return a, b, ref.astype(np.float32)


def product_arrays(program: ir.Program, dtype: str):
    """Random operands for a hand-built C = A @ B program, C filled with NaN (an element no
    thread writes shows), and the float32 reference."""
    A, B, C = program.params
    a, b, ref = operands(dtype, A.shape[0], B.shape[1], A.shape[1])
    return a, b, np.full(C.shape, np.nan, np.float32), ref


def interpret_product(program: ir.Program, dtype: str = "float16"):
    """The program's C on the CPU interpreter (which raises on a broken pipeline), and the
    reference it should match."""
    from autosched.lower.interpreter import run_program

    a, b, c, ref = product_arrays(program, dtype)
    run_program(program, {"A": a, "B": b, "C": c})
    return c, ref


def assert_matches_numpy_on_gpu(program: ir.Program, dtype: str) -> None:
    """Run a hand-built C = A @ B program on the GPU and compare with numpy."""
    from autosched.codegen.build import build_program

    a, b, c, ref = product_arrays(program, dtype)
    build_program(program)(a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)
