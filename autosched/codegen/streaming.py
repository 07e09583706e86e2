"""Which global accesses the printer makes streaming (evict-first) ones, and the text of a
store.

- A kernel marked `stream_reads` reads its largest read-only inputs with `__ldcs`
  (`streamed_inputs`): the data it streams through, each element read once. Smaller read-only
  inputs (a layer norm's gamma and beta, an RMSNorm's weight) are operands that every row's
  blocks read again: they stay plain loads, so that L2 keeps them.
- A kernel marked `stream_writes` stores each global buffer it stores and never loads with
  `__stcs` (`streamed_outputs`, `store_line`): an output written once, whose lines need not
  stay in L2, where they would push out lines still to be read.

Cache hints only: the values are the same, so the interpreter ignores them."""

from __future__ import annotations

from autosched.codegen.context import PrintContext
from autosched.codegen.expr_printer import STREAMED_SCALARS, STREAMED_VECTORS
from autosched.lower import ir, stmt_walk
from autosched.te.expr import Expr, Load
from autosched.te.visitor import walk


def streamed_inputs(kernel: ir.Kernel, params: list[ir.Buffer], written: set[int]) -> set[int]:
    """ids of the buffers of `params` that `kernel` reads by streaming loads: of those it
    loads and never writes (not in `written`), the largest; empty unless the kernel is marked
    `stream_reads`."""
    if not kernel.stream_reads:
        return set()
    loaded = _loaded(kernel)
    read_only = [b for b in params if id(b) in loaded and id(b) not in written]
    most = max((b.size for b in read_only), default=0)
    return {id(b) for b in read_only if b.size == most}


def _loaded(kernel: ir.Kernel) -> set[int]:
    """ids of the buffers `kernel`'s expressions and warp statements read."""
    loaded: set[int] = set()

    def note_loads(e: Expr) -> Expr:
        loaded.update(id(n.buffer) for n in walk(e) if isinstance(n, Load))
        return e

    stmt_walk.map_exprs(kernel.body, note_loads)
    for s in ir.iter_stmts(kernel.body):
        if isinstance(s, ir.WarpStmt):
            loaded.update(id(b) for b in s.reads())
    return loaded


def streamed_outputs(kernel: ir.Kernel, params: list[ir.Buffer]) -> set[int]:
    """ids of the global buffers of `params` that `kernel` stores (`ir.Store`) and never
    loads; empty unless the kernel is marked `stream_writes`."""
    if not kernel.stream_writes:
        return set()
    stored = {id(s.buffer) for s in ir.iter_stmts(kernel.body) if isinstance(s, ir.Store)}
    loaded = _loaded(kernel)
    return {id(b) for b in params if id(b) in stored and id(b) not in loaded}


def store_line(
    p: PrintContext, buffer: ir.Buffer, at: str, value: str, vector_type: str | None = None
) -> str:
    """The statement writing `value` to element `at` (`name[index]`) of `buffer`, or, with
    `vector_type`, the vector of that type starting there."""
    streamed = id(buffer) in p.ex.stream_stored
    if vector_type is None:
        if streamed and buffer.dtype in STREAMED_SCALARS:
            return f"__stcs(&{at}, {value});"
        return f"{at} = {value};"
    if streamed and vector_type in STREAMED_VECTORS:
        return f"__stcs(reinterpret_cast<{vector_type}*>(&{at}), {value});"
    return f"*reinterpret_cast<{vector_type}*>(&{at}) = {value};"


__all__ = ["store_line", "streamed_inputs", "streamed_outputs"]
