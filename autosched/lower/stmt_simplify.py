"""The statement simplifier lowering runs over each kernel: every expression simplified under
the kernel's variable bounds, guards that always hold dropped, guards that never hold dropped
with what they guard, and empty statements and back-to-back barriers removed."""

from __future__ import annotations

from autosched.lower import ir, stmt_walk
from autosched.lower.arith import Bounds, simplify
from autosched.te.expr import BinOp, Const, Expr


def simplify_stmt(s: ir.Stmt, bounds: Bounds) -> ir.Stmt | None:
    """`s` simplified under `bounds` (id(Var) -> (lo, hi)); None when nothing is left."""
    if isinstance(s, ir.Seq):
        kids: list[ir.Stmt] = []
        for child in s.stmts:
            k = simplify_stmt(child, bounds)
            if k is None or (
                isinstance(k, ir.Barrier) and kids and isinstance(kids[-1], ir.Barrier)
            ):
                continue  # drop empty statements and a barrier right after a barrier
            kids.append(k)
        return ir.seq(kids) if kids else None
    if isinstance(s, ir.For):
        body = simplify_stmt(s.body, bounds)
        return ir.For(s.var, s.extent, s.kind, body) if body is not None else None
    if isinstance(s, ir.IfThenElse):
        c = distinct_conjuncts(simplify(s.cond, bounds))
        if isinstance(c, Const):
            branch = s.then_case if c.value else s.else_case
            return simplify_stmt(branch, bounds) if branch is not None else None
        then = simplify_stmt(s.then_case, bounds)
        els = simplify_stmt(s.else_case, bounds) if s.else_case is not None else None
        if then is None and els is None:
            return None
        return ir.IfThenElse(c, then if then is not None else ir.Seq([]), els)
    return stmt_walk.map_exprs(s, lambda e: simplify(e, bounds))


def distinct_conjuncts(cond: Expr) -> Expr:
    """`cond` with repeated `&&` terms dropped (guards that simplify to the same test)."""
    terms: list[Expr] = []
    todo = [cond]
    while todo:
        e = todo.pop()
        if isinstance(e, BinOp) and e.op == "&&":
            todo += [e.b, e.a]
        else:
            terms.append(e)
    unique = list({t._key: t for t in terms}.values())
    if len(unique) == len(terms):
        return cond
    return ir.conjunction(unique)
