"""The `warpgroup_mma` lowering pass: a Tensor Core stage of the "wgmma" instruction family
becomes Hopper warpgroup MMAs (`wgmma_ir.WgmmaMma`).

Lowering gives such a stage an accumulator of the "mma" flavour, marks its operand fragments
`ir.WGMMA_FLAVOUR`, stores their shared stages in the canonical layout (`wgmma_operands`) and
emits, instead of each operand tile load, a `WgmmaOperandTile`: the shared tile it stands for.
Every warp then still multiplies 16x16 tiles. This pass regroups them per warpgroup:

- A region is a maximal subtree of loops over operand tiles and multiply-accumulates (a K
  step's; a serial loop whose body is one stays a loop around the region's wgmmas); its loops
  are expanded to find, per warp, each 16x16x16 product (constant tile numbers) and the operand
  tile each reads (the latest load into that fragment tile).
- The products that share an A tile form one wgmma: their accumulator tiles must be consecutive
  (t .. t + N/16 - 1) and their B tiles consecutive 16-column slabs of one 16 x N tile. The A
  tiles of a warpgroup's 4 warps must be the 4 consecutive 16-row slabs of one 64 x 16 tile
  (warp w's at rows 16w: the accumulator layout wgmma writes), and B the same for the 4 warps.
  So a warpgroup's wgmma of width N computes what its warps' tiles held: the mma flavour's
  per-warp accumulator tiles are its registers (`WgmmaMma`).
- Ordering: `WgmmaFence` before the region (before its enclosing serial K loop when the region
  is that loop's whole body), then `WgmmaCommit` after it; the `WgmmaWait(0)` comes before the
  kernel's next barrier (with a `ProxyFence`: the shared tiles are written by ordinary stores
  or cp.async), which precedes any overwrite of the operands, and after the loop that holds
  the wgmmas, before the accumulators are read; so a K step's wgmmas run while the next step
  waits for its tiles (cp.async.wait_group). A cp.async pipeline of three or more slots gets
  the Hopper mainloop order instead (`wgmma_mainloop`): one group of wgmmas stays in flight
  across the next step's barrier and fetch; so does a TMA-fed pipeline's loop
  (`tma_fetch.overlapped_tma_loop`), across the barrier that releases a slot to its refill.

Anything else (a guarded product, a warp layout that is not warpgroup-shaped, a block that is not
whole warpgroups) raises LoweringError: the state is not a wgmma program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.lower.arith import simplify
from autosched.lower.kernel_ranges import kernel_bounds
from autosched.lower.tensor_access import at_origin, coefficients
from autosched.lower.tma_fetch import overlapped_tma_loop
from autosched.lower.wgmma_mainloop import overlapped_loop
from autosched.lower.wgmma_operands import GROUP, SWIZZLE_COLUMNS
from autosched.te.expr import BinOp, Const, Expr
from autosched.te.visitor import free_vars, substitute

T = ir.WMMA_TILE
TY = ir.THREAD_VARS["threadIdx.y"]


def uses_operand_tiles(kernel: ir.Kernel) -> bool:
    return any(isinstance(s, wi.WgmmaOperandTile) for s in ir.iter_stmts(kernel.body))


def warpgroup_mma(kernel: ir.Kernel) -> ir.Kernel:
    """The pass (a no-op on kernels without `WgmmaOperandTile`s)."""
    if not uses_operand_tiles(kernel):
        return kernel
    bx, by, bz = kernel.block
    if bx != ir.WARP_SIZE or by % wl.WARPGROUP_WARPS or bz != 1:
        raise LoweringError(
            f"wgmma: kernel {kernel.name} has blockDim {kernel.block}, not whole warpgroups of "
            "(32, 4g, 1)"
        )
    body = _rewrite(kernel.body, kernel_bounds(kernel), kernel.block)
    if any(isinstance(s, (wi.WgmmaOperandTile, ir.FragmentMma)) for s in ir.iter_stmts(body)):
        raise LoweringError(f"wgmma: kernel {kernel.name} keeps products no wgmma covers")
    allocs = [b for b in kernel.allocs if b.fragment_flavour != ir.WGMMA_FLAVOUR]
    return dataclasses.replace(kernel, allocs=allocs, body=body)


def _is_region(s: ir.Stmt) -> bool:
    if isinstance(s, (wi.WgmmaOperandTile, ir.FragmentMma)):
        return True
    if isinstance(s, ir.For):
        return s.kind in ("unroll", "serial") and _is_region(s.body)
    if isinstance(s, ir.Seq):
        return bool(s.stmts) and all(_is_region(c) for c in s.stmts)
    return False


def _has_mma(s: ir.Stmt) -> bool:
    return any(isinstance(x, ir.FragmentMma) for x in ir.iter_stmts(s))


def _has_wgmma(s: ir.Stmt) -> bool:
    return any(isinstance(x, wi.WgmmaMma) for x in ir.iter_stmts(s))


def _wait() -> ir.Stmt:
    return wi.WgmmaWait(0)


def _rewrite(s: ir.Stmt, bounds, block: tuple[int, int, int], in_loop: bool = False) -> ir.Stmt:
    """`s` with its regions as wgmmas. Inside a loop a K step's wgmmas stay in flight past the
    step's end: the wait comes before the next barrier (before anything overwrites their
    operands) or after the loop (before the accumulators are read)."""
    if isinstance(s, ir.Barrier):
        return ir.Seq([_wait(), wi.ProxyFence(), s])
    if isinstance(s, ir.For):

        def issue(c: ir.Stmt) -> ir.Stmt:
            return _rewrite(c, bounds, block, True)

        overlapped = overlapped_tma_loop(s, issue) or overlapped_loop(s, block, issue)
        if overlapped is not None:
            return overlapped
        if _is_region(s.body) and _has_mma(s.body) and s.kind != "unroll":
            loop = ir.For(s.var, s.extent, s.kind, _wgmmas(s.body, bounds))
            return _issued(loop, in_loop)
        if _is_region(s) and _has_mma(s):
            return _issued(_wgmmas(s, bounds), in_loop)
        loop = ir.For(s.var, s.extent, s.kind, _rewrite(s.body, bounds, block, in_loop=True))
        return ir.seq([loop, _wait()]) if _has_wgmma(loop) else loop
    if isinstance(s, ir.Seq):
        out: list[ir.Stmt] = []
        run: list[ir.Stmt] = []  # consecutive region statements
        for c in [*s.stmts, None]:
            if c is not None and _is_region(c):
                run.append(c)
                continue
            if run:
                region = ir.seq(run)
                # operand tiles that no product of their run reads need nothing
                if _has_mma(region):
                    out.append(_issued(_wgmmas(region, bounds), in_loop))
                run = []
            if c is not None:
                out.append(_rewrite(c, bounds, block, in_loop))
        return ir.seq(out)
    if isinstance(s, ir.IfThenElse):
        if _has_mma(s):
            raise LoweringError("wgmma: a multiply-accumulate under a guard (padded tiles)")
        els = _rewrite(s.else_case, bounds, block, in_loop) if s.else_case is not None else None
        return ir.IfThenElse(s.cond, _rewrite(s.then_case, bounds, block, in_loop), els)
    return s


def _issued(wgmmas: ir.Stmt, in_loop: bool) -> ir.Stmt:
    """A K step's wgmmas between a fence and a commit; waited for at once outside a loop."""
    out = [wi.WgmmaFence(), wgmmas, wi.WgmmaCommit()]
    return ir.seq([*out, _wait()] if not in_loop else out)


def _expand(s: ir.Stmt, env: dict) -> Iterator[ir.Stmt]:
    """The region's statements with its unroll loops' variables substituted, in order."""
    if isinstance(s, ir.Seq):
        for c in s.stmts:
            yield from _expand(c, env)
    elif isinstance(s, ir.For):
        for i in range(s.extent):
            yield from _expand(s.body, {**env, s.var: ir.int32(i)})
    elif isinstance(s, wi.WarpgroupStmt):
        yield s.with_exprs([simplify(substitute(e, env)) for e in s.exprs()])
    elif isinstance(s, ir.WarpStmt):
        yield s.with_exprs([simplify(substitute(e, env)) for e in s.exprs()])


def _constant(e: Expr, what: str) -> int:
    if not isinstance(e, Const):
        raise LoweringError(f"wgmma: {what} {e!r} is not constant over the region")
    return int(e.value)


def _wgmmas(region: ir.Stmt, bounds) -> ir.Stmt:
    """The region's products as wgmmas, in program order: the products that read one loaded A
    tile (a load's instance: a later load into the same fragment tile is another) form one."""
    loaded: dict[tuple[int, int], tuple[int, wi.SharedOperand]] = {}
    by_a: dict[int, tuple[wi.SharedOperand, list[tuple[ir.FragmentMma, wi.SharedOperand]]]] = {}
    for n, s in enumerate(_expand(region, {})):
        if isinstance(s, wi.WgmmaOperandTile):
            tile = _constant(s.tile, "an operand tile number")
            loaded[(id(s.frag), tile)] = (n, s.operand)
        elif isinstance(s, ir.FragmentMma):
            a = loaded.get((id(s.a), _constant(s.a_tile, "an A tile number")))
            b = loaded.get((id(s.b), _constant(s.b_tile, "a B tile number")))
            if a is None or b is None:
                raise LoweringError(
                    "wgmma: a product reads an operand tile its region does not load"
                )
            by_a.setdefault(a[0], (a[1], []))[1].append((s, b[1]))
    out: list[ir.Stmt] = []
    for a_tile, products in by_a.values():
        products.sort(key=lambda p: _constant(p[0].acc_tile, "an accumulator tile"))
        first = _constant(products[0][0].acc_tile, "an accumulator tile")
        for j, (m, _) in enumerate(products):
            if (
                _constant(m.acc_tile, "an accumulator tile") != first + j
                or m.acc is not products[0][0].acc
            ):
                raise LoweringError("wgmma: a product's accumulator tiles are not consecutive")
        n = T * len(products)
        if n > wl.N_MAX:
            raise LoweringError(f"wgmma: N = {n} > {wl.N_MAX}")
        b_slab = _b_slab([b for _, b in products])
        a_slab = _a_slab(a_tile, bounds)
        out.append(wi.WgmmaMma(products[0][0].acc, ir.int32(first), a_slab, b_slab, n))
    return ir.seq(out)


def _step(op: wi.SharedOperand, along_contiguous: bool) -> int:
    """Elements between a canonical tile's 16-element steps along its contiguous dimension
    (two column groups) or across it (two 8-row groups); within a swizzled atom, 16 elements of
    a 128-byte line or 16 lines."""
    if op.swizzle == "128B":
        return 2 * GROUP if along_contiguous else 2 * op.sbo // wl.ELEMENT_BYTES
    groups = (op.lbo if op.major == "k" else op.sbo) // wl.ELEMENT_BYTES  # column group stride
    return 2 * groups if along_contiguous else 2 * GROUP * GROUP


def _tile_offset(op: wi.SharedOperand, j: int, along_contiguous: bool) -> int:
    """Elements from a tile's start to its j-th 16-element step: an N-major swizzled tile
    steps into the next 64-element atom (LBO away) every 4 steps."""
    if op.swizzle == "128B" and along_contiguous:
        per_atom = SWIZZLE_COLUMNS // wl.K
        return j // per_atom * op.lbo // wl.ELEMENT_BYTES + j % per_atom * _step(op, True)
    return j * _step(op, along_contiguous)


def _same(e: Expr, f: Expr) -> bool:
    return isinstance(d := simplify(BinOp("-", e, f, ir.I32)), Const) and d.value == 0


def _a_slab(a: wi.SharedOperand, bounds) -> wi.SharedOperand:
    """The warpgroup's 64 x 16 A tile from warp w's 16 x 16 one at rows 16 w of it: the warps'
    tiles must be 16 rows apart along threadIdx.y (affine in it), so that warp threadIdx.y's
    lies 16 (threadIdx.y % 4) rows below warp 4 (threadIdx.y / 4)'s."""
    m_step = _step(a, along_contiguous=a.major == "mn")  # 16 rows of M
    try:
        (coeff,) = coefficients(a.offset, [TY], bounds, "a wgmma's A tile")
    except LoweringError:
        coeff = None
    if coeff != m_step:
        raise LoweringError(
            f"wgmma: the warps' A tiles {a.offset!r} are not 16-row slabs of one 64-row tile"
        )
    base = at_origin(a.offset, [TY]) + (TY // 4) * ir.int32(4 * m_step)
    return dataclasses.replace(a, offset=simplify(base, bounds))


def _b_slab(tiles: list[wi.SharedOperand]) -> wi.SharedOperand:
    """The 16 x N B tile of consecutive 16x16 ones, which every warp must read alike."""
    b = tiles[0]
    along = b.major == "mn"  # 16 columns of N
    for j, t in enumerate(tiles):
        at = b.offset + ir.int32(_tile_offset(b, j, along))
        if t.buffer is not b.buffer or not _same(t.offset, at):
            raise LoweringError("wgmma: a product's B tiles are not one 16 x N tile")
    if any(v is TY for v in free_vars(b.offset)):
        raise LoweringError("wgmma: the warps of a warpgroup read different B tiles")
    return b


__all__ = ["warpgroup_mma"]
