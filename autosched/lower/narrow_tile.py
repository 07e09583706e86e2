"""The lowering pass `narrow_tiles`: a Tensor Core stage's copy-out tile kept in 16 bits.

A Tensor Core stage with an element-wise epilogue stores its float32 accumulators to a shared
tile, and the epilogue reads that tile back. Where the epilogue only casts each element to the
output's 16-bit type (`T = cast(C)`: a matmul's or an implicit GEMM conv's fp16 / bf16
output), rounding the accumulators as they are stored gives the very values the cast would,
in half the shared memory: the tile then takes half the bytes its kernel's blocks per SM are
bounded by, and the epilogue reads half as many (one 16-byte read per 8 outputs). This is what
the mark `State.narrow_tile` (`NarrowTileStep`, drawn by the EpilogueVector rule) asks for.

The pass narrows a marked tile (`Kernel.narrow_tiles`) where it can show nothing changes:

- the tile is a float32 shared buffer written only by the accumulator stores of mma-flavour
  fragments (`FragmentStore`: the mma and wgmma instruction families; wmma's
  `store_matrix_sync` writes a float fragment as floats only);
- every read of it is a `Load` directly under a `Cast` to one 16-bit type.

Then the buffer becomes that type, the stores round as they write (the printer's `__half2` /
`__nv_bfloat162` pairs, the interpreter's `to_storage`), and each `cast(tile[i])` becomes
`tile[i]`. A marked tile that fails either condition is left as it is: the mark changes
nothing. It runs before `alias_epilogue_tile`, which then lays the narrower tile over the
operand tiles.
"""

from __future__ import annotations

import dataclasses

from autosched.lower import ir
from autosched.lower.stmt_walk import expressions, map_exprs
from autosched.te.dtype import HALF_DTYPES
from autosched.te.expr import Cast, Expr, Load
from autosched.te.visitor import rewrite


def narrowed(buffer: ir.Buffer) -> bool:
    """Whether accumulator stores into `buffer` round to 16 bits: a shared tile of a 16-bit
    type (one this pass narrowed; other accumulator stores write float32)."""
    return buffer.scope == "shared" and buffer.dtype in HALF_DTYPES


def _read_as(exprs: list[Expr], tile: ir.Buffer) -> str | None:
    """The one 16-bit type every load of `tile` in `exprs` is directly cast to; None where
    some load is not so cast, or casts differ, or there is no load."""
    casts: set[str] = set()
    bare = False

    def visit(e: Expr, parent: Expr | None) -> None:
        nonlocal bare
        if isinstance(e, Load) and e.buffer is tile:
            if isinstance(parent, Cast) and parent.dtype in HALF_DTYPES:
                casts.add(parent.dtype)
            else:
                bare = True
        for child in e.children():
            visit(child, e)

    for e in exprs:
        visit(e, None)
    return casts.pop() if len(casts) == 1 and not bare else None


def _written_only_by_mma_stores(kernel: ir.Kernel, tile: ir.Buffer) -> bool:
    """Whether the statements that name `tile` are all mma-flavour accumulator stores (the
    expressions' loads are checked apart: `_read_as`)."""
    writers = [s for s in ir.iter_stmts(kernel.body) if _names(s, tile)]
    return bool(writers) and all(
        isinstance(s, ir.FragmentStore) and s.frag.fragment_flavour == "mma" for s in writers
    )


def _names(s: ir.Stmt, tile: ir.Buffer) -> bool:
    if isinstance(s, (ir.Store, ir.AllReduce)):
        return s.buffer is tile
    buffers = getattr(s, "buffers", None)
    return buffers is not None and any(b is tile for b in buffers())


def narrowed_type(kernel: ir.Kernel, tile: ir.Buffer) -> str | None:
    """The 16-bit type shared tile `tile` of `kernel` may be kept in (see the module
    docstring), or None."""
    if tile.scope != "shared" or tile.dtype != "float32":
        return None
    if not _written_only_by_mma_stores(kernel, tile):
        return None
    return _read_as(expressions(kernel.body), tile)


def _narrowed(kernel: ir.Kernel, tile: ir.Buffer, dtype: str) -> ir.Kernel:
    narrow = dataclasses.replace(tile, dtype=dtype)

    def uncast(e: Expr) -> Expr | None:
        if isinstance(e, Cast) and isinstance(e.value, Load) and e.value.buffer is tile:
            return Load(narrow, e.value.indices)
        return None

    def redirect(s: ir.WarpStmt) -> ir.WarpStmt:
        if isinstance(s, ir.FragmentStore) and s.dst.buffer is tile:
            return dataclasses.replace(s, dst=dataclasses.replace(s.dst, buffer=narrow))
        return s

    memo: dict[int, Expr] = {}
    body = map_exprs(kernel.body, lambda e: rewrite(e, uncast, memo), warp=redirect)
    allocs = [narrow if b is tile else b for b in kernel.allocs]
    return dataclasses.replace(kernel, allocs=allocs, body=body)


def narrow_tile_kernels(program: ir.Program) -> list[str]:
    """The names of `program`'s kernels that store accumulators into a 16-bit tile."""
    return [
        k.name
        for k in program.kernels
        if any(
            isinstance(s, ir.FragmentStore) and narrowed(s.dst.buffer)
            for s in ir.iter_stmts(k.body)
        )
    ]


def narrow_tiles(kernel: ir.Kernel) -> ir.Kernel:
    """The pass: each tile of `kernel.narrow_tiles` kept in 16 bits where it may be."""
    for name in kernel.narrow_tiles:
        tile = next((b for b in kernel.allocs if b.name == name), None)
        dtype = narrowed_type(kernel, tile) if tile is not None else None
        if dtype is not None and tile is not None:
            kernel = _narrowed(kernel, tile, dtype)
    return kernel


__all__ = ["narrow_tile_kernels", "narrow_tiles", "narrowed", "narrowed_type"]
