"""Loop-invariant code motion for the CPU interpreter (`interpreter`): so that inner loops
evaluate fewer expression nodes, pure sub-expressions are computed once per iteration of the
innermost loop they depend on and bound to a variable by an interpreter-only `Let` statement."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from autosched.lower import ir
from autosched.lower.dispatch import TypeTable
from autosched.lower.warp_roles_ir import role_split
from autosched.te.expr import Expr, Load, Var
from autosched.te.visitor import children, rebuild


@dataclass(eq=False)
class Let(ir.Stmt):
    """Interpreter-internal statement: bind `var` to the value of a hoisted expression."""

    var: Var
    value: Expr


class Hoister:
    """Loop-invariant code motion, so that inner loops evaluate fewer nodes: every load-free
    sub-expression that does not depend on the innermost enclosing loop is computed once per
    iteration of the innermost loop whose variable it uses (at kernel start when it uses thread
    indices only). Hoisted expressions are pure, so computing them for every lane is safe."""

    def __init__(self) -> None:
        self.level: dict[int, int] = {id(v): 0 for v in ir.THREAD_VARS.values()}
        self.levels: dict[int, int | None] = {}  # id(expr) -> deepest loop level; None: a load
        self.scopes: list[tuple[list[ir.Stmt], dict]] = []  # per open loop level: lets, memo
        # statement type -> rewrite(statement, loop depth); other statements stay as they are
        self.table: TypeTable[ir.Stmt, [int], ir.Stmt] = TypeTable()
        self.table.register(ir.Seq, lambda s, d: ir.Seq([self.stmt(c, d) for c in s.stmts]))
        self.table.register(ir.For, self._for)
        self.table.register(
            ir.IfThenElse,
            lambda s, d: ir.IfThenElse(
                s.cond if role_split(s) is not None else self.expr(s.cond, d),  # recognisable
                self.stmt(s.then_case, d),
                None if s.else_case is None else self.stmt(s.else_case, d),
            ),
        )
        self.table.register(
            ir.Store,
            lambda s, d: ir.Store(s.buffer, self.expr(s.index, d), self.expr(s.value, d)),
        )
        self.table.register(
            ir.AllReduce,
            lambda s, d: dataclasses.replace(
                s,
                value=self.expr(s.value, d),
                index=self.expr(s.index, d),
                cond=None if s.cond is None else self.expr(s.cond, d),
            ),
        )

    def scoped(self, s: ir.Stmt, depth: int) -> ir.Stmt:
        """`s` (a kernel or loop body at `depth`) preceded by the lets hoisted to its level."""
        self.scopes.append(([], {}))
        body = self.stmt(s, depth)
        lets, _ = self.scopes.pop()
        return ir.seq([*lets, body])

    def stmt(self, s: ir.Stmt, d: int) -> ir.Stmt:
        fn = self.table.handler(s)
        return s if fn is None else fn(s, d)

    def _for(self, s: ir.For, d: int) -> ir.Stmt:
        self.level[id(s.var)] = d + 1
        self.levels.clear()  # a var object reused at another depth changes cached levels
        return ir.For(s.var, s.extent, s.kind, self.scoped(s.body, d + 1))

    def _level(self, e: Expr) -> int | None:
        got = self.levels.get(id(e), -1)
        if got == -1:
            if isinstance(e, Load):
                got = None
            elif isinstance(e, Var):
                got = self.level.get(id(e))
            else:
                kids = [self._level(k) for k in children(e)]
                known = [k for k in kids if k is not None]
                got = None if len(known) < len(kids) else max(known, default=0)
            self.levels[id(e)] = got
        return got

    def expr(self, e: Expr, d: int) -> Expr:
        kids = children(e)
        level = self._level(e)
        if level is not None and level < d and kids:
            lets, memo = self.scopes[level]
            var = memo.get(e._key)
            if var is None:
                var = memo[e._key] = Var(f"hoisted{len(memo)}", e.dtype)
                lets.append(Let(var, self.expr(e, level)))
            return var
        new = tuple(self.expr(k, d) for k in kids)
        return e if all(n is k for n, k in zip(new, kids, strict=True)) else rebuild(e, new)
