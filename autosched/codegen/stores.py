"""How the printer writes an element or a vector of a buffer: an assignment, or, in a kernel
marked `stream_writes`, a streaming store (`__stcs`, evict-first) to each global buffer the
kernel stores and never loads (an output written once: its lines need not stay in L2, where
they would push out lines the kernel still reads). A cache hint only: the values stored are the
same, so the interpreter ignores it."""

from __future__ import annotations

from autosched.codegen.context import PrintContext
from autosched.codegen.expr_printer import STREAMED_SCALARS, STREAMED_VECTORS
from autosched.lower import ir, stmt_walk
from autosched.te.expr import Expr, Load
from autosched.te.visitor import walk


def streamed_outputs(kernel: ir.Kernel, params: list[ir.Buffer]) -> set[int]:
    """ids of the global buffers of `params` that `kernel` stores (`ir.Store`) and never
    loads; empty unless the kernel is marked `stream_writes`."""
    if not kernel.stream_writes:
        return set()
    stored = {id(s.buffer) for s in ir.iter_stmts(kernel.body) if isinstance(s, ir.Store)}
    loaded: set[int] = set()

    def note_loads(e: Expr) -> Expr:
        loaded.update(id(n.buffer) for n in walk(e) if isinstance(n, Load))
        return e

    stmt_walk.map_exprs(kernel.body, note_loads)
    for s in ir.iter_stmts(kernel.body):
        if isinstance(s, ir.WarpStmt):
            loaded.update(id(b) for b in s.reads())
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


__all__ = ["store_line", "streamed_outputs"]
