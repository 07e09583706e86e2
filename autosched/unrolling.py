"""Which loops of a lowered kernel are unrolled, and how far: the passes that decide `For.kind`
`unroll` and `For.unroll_factor`.

  auto_unroll              the stage's `auto_unroll_max_step`: loop nests of at most that many
                           steps are unrolled (before virtual threads are injected)
  unroll_register_indices  every loop whose variable indexes a local array is unrolled
                           (registers have no addresses: a runtime index puts the array in memory)
  limit_fetch_unroll       an unrolled loop that copies global memory into shared memory is
                           unrolled `FETCH_UNROLL` copies at a time, not fully

Unrolling is where most register spills come from: ptxas issues every load of an unrolled
straight-line region as early as it can, so all their values (and addresses) are live at once.
"""

from __future__ import annotations

from . import ir
from .te.expr import Load
from .te.visitor import free_vars, walk

# Copies of a cooperative-fetch loop's body that are unrolled together (#pragma unroll 8): 8
# loads in flight per thread. Measured with ptxas (sm_90, NVRTC 13.0) on the 37 of 320 sampled
# suite states that spilled with fully unrolled fetch loops: capped at 4, 8, 16, 32 copies,
# 8, 10, 15, 22 of them still spill (the rest spill for other reasons, e.g. 255 registers of
# accumulators and operands). 0 switches the cap off.
FETCH_UNROLL = 8


def auto_unroll(s: ir.Stmt, max_step: int) -> ir.Stmt:
    """Mark serial loops whose whole nest takes at most `max_step` steps as unrolled."""
    if isinstance(s, ir.Seq):
        return ir.Seq([auto_unroll(c, max_step) for c in s.stmts])
    if isinstance(s, ir.IfThenElse):
        els = auto_unroll(s.else_case, max_step) if s.else_case is not None else None
        return ir.IfThenElse(s.cond, auto_unroll(s.then_case, max_step), els)
    if isinstance(s, ir.For):
        body = auto_unroll(s.body, max_step)
        kind = "unroll" if s.kind == "serial" and ir.executed_statements(s) <= max_step else s.kind
        return ir.For(s.var, s.extent, kind, body)
    return s


def unroll_register_indices(body: ir.Stmt) -> ir.Stmt:
    """Mark `unroll` every serial loop whose variable appears in the index of a local array.

    Local arrays live in registers only when every index is a compile-time constant once the
    code is unrolled; one runtime index puts the whole array in (slow) local memory. Measured on
    320 random suite states (nvcc 13, sm_90): 15% had such an array in local memory before this
    pass. Loops inside such a loop that index nothing local stay loops.
    """
    return _register_index_pass(body)[0]


def limit_fetch_unroll(body: ir.Stmt, copies: int | None = None) -> ir.Stmt:
    """Give every unrolled cooperative-fetch loop (its stores all go to shared memory, its
    loads come from global memory) an `unroll_factor` so that at most `copies` copies of its
    innermost store are unrolled together (at least one iteration). Changes nothing when
    `copies` is 0 (default: `FETCH_UNROLL`). Fully unrolled, a 120-iteration fetch loop puts 120
    loads and their addresses in registers at once and spills."""
    copies = FETCH_UNROLL if copies is None else copies
    if copies <= 0:
        return body
    todo = [body]
    while todo:
        node = todo.pop()
        if isinstance(node, ir.For) and node.kind == "unroll" and _is_fetch(node):
            factor = max(1, copies // ir.executed_statements(node.body, ("unroll",)))
            if node.extent > factor:
                node.unroll_factor = factor
        elif isinstance(node, ir.Seq):
            todo += node.stmts
        elif isinstance(node, ir.For):
            todo.append(node.body)
        elif isinstance(node, ir.IfThenElse):
            todo += [node.then_case] + ([node.else_case] if node.else_case is not None else [])
    return body


def _is_fetch(loop: ir.For) -> bool:
    """All stores of `loop` go to shared memory, some loads come from global memory, and no
    barrier is inside (the outermost such loop is the fetch loop of a shared stage)."""
    reads_global = False
    for node in ir.iter_stmts(loop.body):
        if isinstance(node, (ir.Barrier, ir.AllReduce)):
            return False
        if isinstance(node, ir.Store):
            if node.buffer.scope != "shared":
                return False
            reads_global = reads_global or any(
                type(e) is Load and getattr(e.buffer, "scope", "global") == "global"
                for e in walk(node.value))
    return reads_global


def _local_index_vars(exprs, out: set[int]) -> None:
    """Add to `out` the ids of the variables in the indices of local-buffer loads in `exprs`."""
    for e in exprs:
        for node in walk(e):
            if type(node) is Load and getattr(node.buffer, "scope", None) == "local":
                out.update(id(v) for i in node.indices for v in free_vars(i))


def _register_index_pass(s: ir.Stmt) -> tuple[ir.Stmt, set[int]]:
    if isinstance(s, ir.Seq):
        parts = [_register_index_pass(c) for c in s.stmts]
        return ir.Seq([p[0] for p in parts]), set().union(*(p[1] for p in parts))
    if isinstance(s, ir.For):
        body, used = _register_index_pass(s.body)
        kind = "unroll" if s.kind == "serial" and id(s.var) in used else s.kind
        return (s if kind == s.kind and body is s.body else ir.For(s.var, s.extent, kind, body)), used
    if isinstance(s, ir.IfThenElse):
        then, used = _register_index_pass(s.then_case)
        els = None
        if s.else_case is not None:
            els, used_else = _register_index_pass(s.else_case)
            used |= used_else
        _local_index_vars([s.cond], used)
        return ir.IfThenElse(s.cond, then, els), used
    used: set[int] = set()
    if isinstance(s, (ir.Store, ir.AllReduce)):
        if s.buffer.scope == "local":
            used.update(id(v) for v in free_vars(s.index))
        _local_index_vars([s.value, s.index] + ([s.cond] if getattr(s, "cond", None) is not None else []), used)
    return s, used


__all__ = ["FETCH_UNROLL", "auto_unroll", "limit_fetch_unroll", "unroll_register_indices"]
