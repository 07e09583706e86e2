"""The verifier's rules of the warpgroup statements (`lower/wgmma_ir.py`), checked within
`verify._KernelVerifier` (which registers `WarpgroupRules.check` for each of them):

- the launch: blockDim.x == 32 and blockDim.y a multiple of 4, blockDim.z == 1 (warpgroup g is
  threadIdx.y / 4 == g; the printer finds a thread's place in it from threadIdx.x and y);
- no thread-dependent guard around them and no threadIdx.x in their expressions (a warpgroup's
  128 threads run them together with the same arguments: the interpreter checks the rest);
- an accumulator of the wgmma flavour, float32, N a multiple of 8 up to 256, tile numbers
  provably in range;
- operands in shared memory, float16 or bfloat16 alike, a known major-ness and swizzle, LBO and
  SBO multiples of 16 bytes that fit the descriptor, offsets provably 16-byte aligned;
- stores into float32 global or shared tiles with an even `ldm` and offset (float2 stores);
- `WgmmaWait`'s pending count a small constant.
"""

from __future__ import annotations

from typing import Any

from autosched.lower import ir
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.lower.arith import expr_bounds, is_multiple
from autosched.te.dtype import BYTES
from autosched.te.expr import Expr
from autosched.te.expr_text import expr_str
from autosched.te.visitor import free_vars

MAX_PENDING = 7


class WarpgroupRules:
    """Checks one kernel's warpgroup statements for a `_KernelVerifier` (`kv`)."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv

    def check(self, s: ir.Stmt, divergent: str | None) -> None:
        kv = self.kv
        where = s.describe() if isinstance(s, wi.WarpgroupStmt) else type(s).__name__
        bx, by, bz = kv.k.block
        if bx != ir.WARP_SIZE or by % wl.WARPGROUP_WARPS or bz != 1:
            kv.fail(
                f"{where}: a kernel with warpgroup statements needs blockDim (32, 4g, 1), "
                f"not {kv.k.block}"
            )
        if divergent is not None:
            kv.fail(f"{where} under the thread-dependent condition {divergent}")
        if not isinstance(s, wi.WarpgroupStmt):
            return  # ProxyFence: each thread's own
        lane = ir.THREAD_VARS["threadIdx.x"]
        for e in s.exprs():
            kv.expr(e, where)
            if any(v is lane for v in free_vars(e)):
                kv.fail(f"{where}: {expr_str(e)} uses threadIdx.x (the warpgroup must agree)")
        if isinstance(s, wi.WgmmaWait) and not (
            isinstance(s.pending, int) and 0 <= s.pending <= MAX_PENDING
        ):
            kv.fail(f"{where}: pending groups {s.pending!r} must be an int in 0..{MAX_PENDING}")
        if isinstance(s, wi.WgmmaFill):
            self.accumulator(s.acc, s.tile, where)
        elif isinstance(s, wi.WgmmaMma):
            self.mma_accumulator(s, where)
            for op in (s.a, s.b):
                self.operand(op, where)
            if s.a.buffer.dtype != s.b.buffer.dtype:
                kv.fail(f"{where}: A is {s.a.buffer.dtype} but B is {s.b.buffer.dtype}")
        elif isinstance(s, wi.WgmmaStore):
            self.accumulator(s.acc, s.tile, where)
            self.store_tile(s.dst, where)

    def accumulator(self, acc: Any, tile: Expr, where: str) -> None:
        kv = self.kv
        kv.buffer(acc, where, fragment=True)
        if acc.scope != ir.ACCUMULATOR_SCOPE or acc.fragment_flavour != ir.WGMMA_FLAVOUR:
            kv.fail(f"{where}: {acc.name} is not a warpgroup accumulator")
        if acc.dtype != "float32" or acc.shape[-1] not in wl.VALID_N:
            kv.fail(
                f"{where}: {acc.name} is {acc.dtype} with N = {acc.shape[-1]}; wgmma "
                f"accumulates float32, N a multiple of {wl.N_STEP} up to {wl.N_MAX}"
            )
        kv.tile_number(acc, tile, where)

    def mma_accumulator(self, s: wi.WgmmaMma, where: str) -> None:
        """A wgmma's accumulator: a warpgroup one of width N, or N / 16 tiles of an mma-flavour
        one (N a multiple of 16 then)."""
        kv, acc = self.kv, s.acc
        if acc.fragment_flavour == ir.WGMMA_FLAVOUR:
            self.accumulator(acc, s.acc_tile, where)
            if s.n != acc.shape[-1]:
                kv.fail(f"{where}: N = {s.n} but {acc.name}'s tiles are {acc.shape[-1]} wide")
            return
        kv.buffer(acc, where, fragment=True)
        if acc.scope != ir.ACCUMULATOR_SCOPE or acc.fragment_flavour != "mma":
            kv.fail(f"{where}: {acc.name} is neither a warpgroup nor an mma accumulator")
        if s.n not in wl.VALID_N or s.n % ir.WMMA_TILE:
            kv.fail(f"{where}: N = {s.n} into mma tiles must be a multiple of 16 up to 256")
        kv.expr(s.acc_tile, where, "int")
        tiles = acc.size // ir.tile_elems(acc)
        lo, hi = expr_bounds(s.acc_tile, kv.ranges)
        if lo < 0 or hi + s.n // ir.WMMA_TILE > tiles:
            kv.fail(
                f"{where}: tiles {expr_str(s.acc_tile)} .. + {s.n // ir.WMMA_TILE} of "
                f"{acc.name} reach past its {tiles} tiles"
            )

    def operand(self, op: Any, where: str) -> None:
        kv = self.kv
        if not isinstance(op, wi.SharedOperand):
            kv.fail(f"{where}: {op!r} is not a SharedOperand")
        b = op.buffer
        kv.buffer(b, where)
        if b.scope != "shared" or b.dtype not in wl.TYPES:
            kv.fail(
                f"{where}: operand {b.name} is {b.scope} {b.dtype}; wgmma reads "
                f"{tuple(wl.TYPES)} from shared memory"
            )
        if op.major not in wl.MAJORS or op.swizzle not in wl.SWIZZLE_BITS:
            kv.fail(f"{where}: operand {b.name}: major {op.major!r} / swizzle {op.swizzle!r}")
        for name, value in (("LBO", op.lbo), ("SBO", op.sbo)):
            if not isinstance(value, int) or value % 16 or not 0 <= value <= wl.FIELD_MASK:
                kv.fail(
                    f"{where}: {name} {value!r} of {b.name} is no multiple of 16 bytes "
                    "that a descriptor holds"
                )
        kv.expr(op.offset, where, "int")
        step = wl.UNIT_BYTES // BYTES[b.dtype]
        if not is_multiple(op.offset, step, kv.ranges):
            kv.fail(
                f"{where}: offset {expr_str(op.offset)} into {b.name} is not provably "
                "16-byte aligned"
            )

    def store_tile(self, m: Any, where: str) -> None:
        kv = self.kv
        if not isinstance(m, ir.MatrixTile):
            kv.fail(f"{where}: {m!r} is not an ir.MatrixTile")
        kv.buffer(m.buffer, where)
        b = m.buffer
        if b.scope not in ir.MEMORY_TILE_SCOPES or b.dtype != "float32":
            kv.fail(
                f"{where}: stores into {b.scope} {b.dtype} {b.name}; float32 global or "
                "shared memory only"
            )
        if m.layout not in ir.MATRIX_LAYOUTS:
            kv.fail(f"{where}: layout {m.layout!r} is not one of {ir.MATRIX_LAYOUTS}")
        kv.expr(m.offset, where, "int")
        if not isinstance(m.ldm, int) or m.ldm <= 0 or m.ldm % 2:
            kv.fail(f"{where}: ldm {m.ldm!r} of {b.name} must be a positive even int")
        if not is_multiple(m.offset, 2, kv.ranges):
            kv.fail(f"{where}: offset {expr_str(m.offset)} into {b.name} is not provably even")


__all__ = ["WarpgroupRules"]
