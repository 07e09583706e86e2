"""A hand-built TMA + mbarrier + wgmma matmul for the tests: C (M x N, float32) = A (M x K) @
B (K x N), A and B row-major float16 / bfloat16 in global memory.

A block of `warpgroups` warpgroups computes a (64 warpgroups) x BN tile of C, BN a multiple of
64, through a ring of `slots` shared stages of BK = 64: stage s holds A's BM x 64 tile (one
box of 128-byte rows, 128B swizzle: K-major, SBO 1024) and B's 64 x BN tile as BN / 64 boxes of
64 x 64 (N-major, 128B swizzle, boxes 8192 bytes apart = the descriptor's LBO). Thread 0 issues
the copies of k tile t + slots - 1 once every warpgroup retired the wgmmas of tile t - 1 (a
block barrier after `wgmma.wait_group 1` releases that slot); every thread waits on the slot's
mbarrier with the parity of the tile's lap around the ring. K need not be a multiple of 64: the
last box reads zeros beyond K.
"""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.te.dtype import BYTES
from autosched.te.expr import Const, Var

TY = ir.THREAD_VARS["threadIdx.y"]
BX, BY = ir.THREAD_VARS["blockIdx.x"], ir.THREAD_VARS["blockIdx.y"]
BK = 64  # one 128-byte swizzled row of 16-bit elements
BOX_N = 64
B_BOX_BYTES = BK * 128  # one 64 x 64 box of B: the N-major descriptor's LBO


def _int(v: int) -> Const:
    return Const(v, "int32")


def tma_matmul_program(
    m: int = 128,
    n: int = 128,
    k: int = 256,
    warpgroups: int = 2,
    bn: int = 128,
    slots: int = 3,
    dtype: str = "float16",
    release: bool = True,
    parity_flip: bool = True,
    wait: bool = True,
) -> ir.Program:
    """The pipelined matmul; `release=False` drops the barrier that frees a slot before its
    refill, `parity_flip=False` waits on parity 0 every lap, `wait=False` drops the consumers'
    mbarrier wait (programs the interpreter must refuse)."""
    bm = wl.M * warpgroups
    assert m % bm == 0 and n % bn == 0 and bn % BOX_N == 0 and slots >= 2
    A, B = ir.Buffer("A", (m, k), dtype), ir.Buffer("B", (k, n), dtype)
    C = ir.Buffer("C", (m, n), "float32")
    a_map = ti.TensorMap(A, (bm, BK), "128B")
    b_map = ti.TensorMap(B, (BK, BOX_N), "128B")
    a_s = ir.Buffer("A_shared", (slots * bm * BK,), dtype, "shared")
    b_s = ir.Buffer("B_shared", (slots * BK * bn,), dtype, "shared")
    bars = ir.Buffer("full", (slots,), ti.MBARRIER_DTYPE, "shared")
    acc = ir.Buffer("C_acc", (1, wl.M, bn), "float32", ir.ACCUMULATOR_SCOPE)
    acc.fragment_flavour = ir.WGMMA_FLAVOUR
    ktiles = -(-k // BK)
    m0, n0 = BX * bm, BY * bn
    stage_bytes = a_map.box_bytes + bn // BOX_N * b_map.box_bytes

    def issue(t) -> ir.Stmt:
        """Thread 0's copies of k tile `t` into slot t % slots."""
        slot = t % slots
        copies: list[ir.Stmt] = [ti.MbarrierExpectTx(bars, slot, stage_bytes)]
        copies.append(ti.TmaLoad(a_map, a_s, slot * (bm * BK), (m0, t * BK), bars, slot))
        for j in range(bn // BOX_N):
            offset = slot * (BK * bn) + j * (B_BOX_BYTES // BYTES[dtype])
            copies.append(ti.TmaLoad(b_map, b_s, offset, (t * BK, n0 + j * BOX_N), bars, slot))
        return ir.seq(copies)

    elem = BYTES[dtype]
    wg = TY // 4
    kt = Var("kt")
    slot = kt % slots
    mmas: list[ir.Stmt] = []
    for s in range(BK // wl.K):
        a_off = slot * (bm * BK) + wg * (wl.M * BK) + s * (32 // elem)
        b_off = slot * (BK * bn) + s * (2048 // elem)
        mmas.append(
            wi.WgmmaMma(
                acc,
                _int(0),
                wi.SharedOperand(a_s, a_off, "k", 16, 1024, "128B"),
                wi.SharedOperand(b_s, b_off, "mn", B_BOX_BYTES, 1024, "128B"),
                bn,
            )
        )
    parity = (kt // slots) % 2 if parity_flip else _int(0)
    step: list[ir.Stmt] = [ti.MbarrierWait(bars, slot, parity)] if wait else []
    step += [wi.WgmmaFence(), *mmas, wi.WgmmaCommit(), wi.WgmmaWait(1)]
    step += [ir.Barrier()] if release else []  # every warpgroup retired tile kt - 1: free
    ahead = kt + (slots - 1)
    step.append(ir.IfThenElse(ahead < ktiles, issue(ahead)))
    prologue = [issue(_int(t)) for t in range(min(slots - 1, ktiles))]
    body = ir.seq(
        [
            ti.MbarrierInit(bars, 1),
            ir.Barrier(),
            wi.WgmmaFill(acc, _int(0), Const(0.0, "float32")),
            *prologue,
            ir.For(kt, ktiles, "serial", ir.seq(step)),
            wi.WgmmaWait(0),
            wi.WgmmaStore(
                ir.MatrixTile(C, (m0 + wg * wl.M) * n + n0, n, "row_major"), acc, _int(0)
            ),
        ]
    )
    kernel = ir.Kernel(
        "tma_matmul", (m // bm, n // bn, 1), (32, 4 * warpgroups, 1), [a_s, b_s, bars, acc], body
    )
    return ir.Program([kernel], [A, B, C], [C])


__all__ = ["tma_matmul_program"]
