"""Which loops of a lowered kernel are unrolled: the passes that mark `For.kind` `unroll`.

  auto_unroll              the stage's `auto_unroll_max_step`: loop nests of at most that many
                           steps are unrolled (before virtual threads are injected)
  unroll_register_indices  every loop whose variable indexes a local array or numbers a
                           fragment tile is unrolled (registers have no addresses: a runtime
                           index puts the array in memory)

Unrolling is where most register spills come from: ptxas issues every load of an unrolled
straight-line region as early as it can, so all their values (and addresses) are live at once.
Cooperative-fetch loops (global -> shared copies) still stay fully unrolled: unrolling them a
few copies at a time spills less but makes the best kernels much slower.
"""

from __future__ import annotations

from autosched.lower import ir, stmt_walk
from autosched.te.expr import Load
from autosched.te.visitor import free_vars, loads


def auto_unroll(s: ir.Stmt, max_step: int) -> ir.Stmt:
    """Mark serial loops whose whole nest takes at most `max_step` steps as unrolled."""
    if isinstance(s, ir.Seq):
        return ir.Seq([auto_unroll(c, max_step) for c in s.stmts])
    if isinstance(s, ir.IfThenElse):
        els = auto_unroll(s.else_case, max_step) if s.else_case is not None else None
        return ir.IfThenElse(s.cond, auto_unroll(s.then_case, max_step), els)
    if isinstance(s, ir.For):
        body = auto_unroll(s.body, max_step)
        kind = (
            "unroll"
            if s.kind == "serial" and stmt_walk.executed_statements(s) <= max_step
            else s.kind
        )
        return ir.For(s.var, s.extent, kind, body)
    return s


def unroll_register_indices(body: ir.Stmt) -> ir.Stmt:
    """Mark `unroll` every serial loop whose variable appears in the index of a local array.

    Local arrays live in registers only when every index is a compile-time constant once the
    code is unrolled; one runtime index puts the whole array in (slow) local memory. Loops
    inside such a loop that index nothing local stay loops.
    """
    return _register_index_pass(body)[0]


def _local_index_vars(exprs, out: set[int]) -> None:
    """Add to `out` the ids of the variables in the indices of local-buffer loads in `exprs`."""
    for e in exprs:
        for node in loads(e):
            if type(node) is Load and getattr(node.buffer, "scope", None) == "local":
                out.update(id(v) for i in node.indices for v in free_vars(i))


def _register_index_pass(s: ir.Stmt) -> tuple[ir.Stmt, set[int]]:
    if isinstance(s, ir.Seq):
        parts = [_register_index_pass(c) for c in s.stmts]
        return ir.Seq([p[0] for p in parts]), set().union(*(p[1] for p in parts))
    if isinstance(s, ir.For):
        body, used = _register_index_pass(s.body)
        kind = "unroll" if s.kind == "serial" and id(s.var) in used else s.kind
        return (
            s if kind == s.kind and body is s.body else ir.For(s.var, s.extent, kind, body)
        ), used
    if isinstance(s, ir.IfThenElse):
        then, used = _register_index_pass(s.then_case)
        els = None
        if s.else_case is not None:
            els, used_else = _register_index_pass(s.else_case)
            used |= used_else
        _local_index_vars([s.cond], used)
        return ir.IfThenElse(s.cond, then, els), used
    used = set()
    if isinstance(s, (ir.Store, ir.AllReduce)):
        if s.buffer.scope == "local":
            used.update(id(v) for v in free_vars(s.index))
        cond = s.cond if isinstance(s, ir.AllReduce) else None
        _local_index_vars([s.value, s.index] + ([cond] if cond is not None else []), used)
    elif isinstance(s, ir.WarpStmt):  # fragment arrays are registers too: tile numbers
        for _, tile, _ in s.fragments():
            used.update(id(v) for v in free_vars(tile))
        _local_index_vars(s.exprs(), used)
    return s, used


# nvcc fully unrolls a loop without a pragma when its unrolled body stays small; estimated from
# what our loops cost it to compile (see `compiled_statements`)
COMPILER_UNROLL_STATEMENTS = 128


def compiled_statements(s: ir.Stmt, compiler_unroll: int = COMPILER_UNROLL_STATEMENTS) -> int:
    """Statements the compiler emits for `s`: loops marked unroll or vectorize are copied
    `extent` times, and so are serial loops whose copies come to at most `compiler_unroll`
    statements (nvcc unrolls those on its own). An estimate of compile time: it ranks build
    times better than source length or the unrolled loops alone, so the builder starts the
    builds of a batch in its order."""
    return stmt_walk.executed_statements(s, ("unroll", "vectorize"), compiler_unroll)


__all__ = [
    "COMPILER_UNROLL_STATEMENTS",
    "auto_unroll",
    "compiled_statements",
    "unroll_register_indices",
]
