"""A Tensor Core kernel's epilogue tile over its operand tiles' shared memory.

A kernel whose accumulators reach its output through a shared tile (the cast epilogue of a
half-precision matmul: a float32 tile the size of the block's outputs) holds that tile and
its pipelined operand tiles at once, although it writes the tile only after its last
multiply. `alias_epilogue_tile` records the tile as laid over the operand tiles
(`ir.SharedAlias`) where `overlay_problem` proves their live ranges apart, at block level in
the kernel's statement order:

- each is accessed only in top-level statements of the kernel body (no loop encloses both);
- every top-level statement that accesses an operand tile (or an mbarrier that a TMA copy
  into one completes on) precedes a top-level `__syncthreads()` that precedes every one that
  accesses the tile;
- between the last operand access and that barrier the asynchronous work on the operands is
  done: a `WgmmaWait(0)` where wgmmas read them (each warpgroup's; the barrier then covers
  the block) and a `cp.async.wait_group 0` where grouped cp.async copies fill them (ungrouped
  ones the printer waits for at every barrier). A TMA copy completes on its mbarrier, waited
  before the barrier; the interpreter fails a kernel whose copy into an overlaid buffer no
  wait made visible.

A warp-specialised kernel (`lower/warp_specialize.py`) is read with its role split unfolded:
the producer's branch, which touches the operand tiles only through TMA copies the consumers
wait for, then the consumers' statements, whose `bar.sync 1` is the separating barrier.

Where the proof fails the buffers stay apart, as before. The verifier checks every recorded
alias again with the same proof.
"""

from __future__ import annotations

import dataclasses
import functools

from autosched.lower import ir, stmt_walk
from autosched.lower import tma_ir as ti
from autosched.lower import warp_roles_ir as wr
from autosched.lower import wgmma_ir as wi
from autosched.te.expr import Expr
from autosched.te.visitor import loads


def _buffer_ids(value: object, out: set[int]) -> set[int]:
    """`out` with the ids of every IR buffer `value` names added: its fields', its
    expressions' loads', its statements' (a conservative walk over the dataclass fields, so
    that a new statement type is covered)."""
    if isinstance(value, ir.Buffer):
        out.add(id(value))
    elif isinstance(value, Expr):
        for node in loads(value):
            if isinstance(node.buffer, ir.Buffer):
                out.add(id(node.buffer))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _buffer_ids(item, out)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for name in _field_names(type(value)):
            _buffer_ids(getattr(value, name), out)
    return out


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    """The names of dataclass `cls`'s fields, in `dataclasses.fields` order (made once per
    class: `fields()` is slow)."""
    return tuple(f.name for f in dataclasses.fields(cls))


def _top_level(kernel: ir.Kernel) -> list[ir.Stmt]:
    """The kernel body's top-level statements; a warp-specialised kernel's role split, its
    last, read as the producer's branch (its copies, which the consumers wait for) followed by
    the consumers' statements, whose named barriers separate as a barrier does."""
    top = stmt_walk.statements(kernel.body)
    split = wr.role_split(top[-1]) if top else None
    if split is None:
        return top
    producer, consumer, _ = split
    return [*top[:-1], producer, *stmt_walk.statements(consumer)]


def epilogue_overlay(kernel: ir.Kernel) -> ir.SharedAlias | None:
    """The candidate alias: the one shared tile the accumulators are stored into, over the
    shared tiles the multiplies read their operands from (in allocation order); None for a
    kernel without exactly one such tile or without operand tiles."""
    stores, operands = set(), set()
    for s in ir.iter_stmts(kernel.body):
        if isinstance(s, (ir.FragmentStore, wi.WgmmaStore)):
            stores.add(id(s.dst.buffer))
        elif isinstance(s, ir.FragmentLoad):
            operands.add(id(s.src.buffer))
        elif isinstance(s, wi.WgmmaMma):
            operands |= {id(s.a.buffer), id(s.b.buffer)}
        elif isinstance(s, wi.WgmmaOperandTile):
            operands.add(id(s.operand.buffer))
    shared = [b for b in kernel.allocs if b.scope == "shared"]
    tiles = [b for b in shared if id(b) in stores]
    if len(tiles) != 1 or id(tiles[0]) in operands:
        return None
    hosts = tuple(b for b in shared if id(b) in operands)
    return ir.SharedAlias(tiles[0], hosts) if hosts else None


def overlay_problem(kernel: ir.Kernel, alias: ir.SharedAlias) -> str | None:
    """Why `alias.tile` may not share `alias.hosts`' bytes in `kernel` (the module docstring's
    proof), or None where it may."""
    hosts = {id(b) for b in alias.hosts}
    nested = list(ir.iter_stmts(kernel.body))
    bars = {id(s.bars) for s in nested if isinstance(s, ti.TmaLoad) and id(s.dst) in hosts}
    guarded = hosts | bars
    top = _top_level(kernel)
    touched = [_buffer_ids(s, set()) for s in top]
    last = max((i for i, t in enumerate(touched) if t & guarded), default=-1)
    first = min((i for i, t in enumerate(touched) if id(alias.tile) in t), default=len(top))
    if last >= first:
        return f"{alias.tile.name} is accessed before the last access of its operand tiles"
    separating = (ir.Barrier, wr.NamedBarrier)
    barriers = [i for i in range(last + 1, first) if isinstance(top[i], separating)]
    if not barriers:
        return f"no __syncthreads() separates {alias.tile.name} from its operand tiles"
    between = top[last + 1 : barriers[-1]]
    if any(isinstance(s, wi.WgmmaMma) for s in nested) and not any(
        isinstance(s, wi.WgmmaWait) and s.pending == 0 for s in between
    ):
        return "no WgmmaWait(0) after the last wgmma reads the operand tiles"
    if any(isinstance(s, ir.AsyncGroupStmt) for s in nested) and not any(
        isinstance(s, ir.AsyncWait) and s.pending == 0 for s in between
    ):
        return "no cp.async.wait_group 0 after the last copy into the operand tiles"
    return None


def alias_epilogue_tile(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with its epilogue tile laid over its operand tiles where `overlay_problem`
    proves it safe; otherwise (or with no such tile) the kernel as it is."""
    alias = epilogue_overlay(kernel)
    if alias is None or kernel.shared_aliases or overlay_problem(kernel, alias) is not None:
        return kernel
    return dataclasses.replace(kernel, allocs=list(kernel.allocs), shared_aliases=(alias,))


__all__ = ["alias_epilogue_tile", "epilogue_overlay", "overlay_problem"]
