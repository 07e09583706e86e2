"""Whole-tree walks over IR statements beyond visiting them (`ir.iter_stmts`): a tree rebuilt
with its expressions mapped (`map_exprs`), how many statements a tree executes
(`executed_statements`, the unrolling budget's and the verifier's count), a statement's
top-level sequence (`statements`) and every expression a tree holds (`expressions`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

from autosched.lower.cluster_ir import ClusterLoad
from autosched.lower.ir import (
    AllReduce,
    Buffer,
    For,
    IfThenElse,
    Seq,
    Stmt,
    Store,
    WarpStmt,
)
from autosched.lower.tma_ir import TmaStmt
from autosched.lower.wgmma_ir import WarpgroupStmt, WgmmaOperandTile
from autosched.te.expr import Expr


def statements(s: Stmt) -> list[Stmt]:
    """The statements `s` runs in order at its top level: a Seq's, or `s` alone."""
    return list(s.stmts) if isinstance(s, Seq) else [s]


def _same_target(buffer: Buffer, index: Expr) -> tuple[Buffer, Expr]:
    return buffer, index


def map_exprs(s: Stmt, fe, target=_same_target, warp=None) -> Stmt:
    """`s` rebuilt with `fe` applied to every expression (conditions, indices, values) and
    `target(buffer, index)` choosing where each Store / AllReduce writes (default: where it did)
    and where a wgmma operand's tile (`WgmmaOperandTile`) starts;
    `warp(stmt)`, when given, then rebuilds each warp statement (e.g. to redirect its buffers)."""
    if isinstance(s, Seq):
        return Seq([map_exprs(c, fe, target, warp) for c in s.stmts])
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, map_exprs(s.body, fe, target, warp))
    if isinstance(s, IfThenElse):
        els = map_exprs(s.else_case, fe, target, warp) if s.else_case is not None else None
        return IfThenElse(fe(s.cond), map_exprs(s.then_case, fe, target, warp), els)
    if isinstance(s, Store):
        buffer, index = target(s.buffer, fe(s.index))
        return Store(buffer, index, fe(s.value))
    if isinstance(s, AllReduce):
        buffer, index = target(s.buffer, fe(s.index))
        cond = fe(s.cond) if s.cond is not None else None
        value = fe(s.value)
        return AllReduce(s.reducer, value, cond, buffer, index, s.thread_tag, s.extent, s.once)
    if isinstance(s, WarpStmt):
        s = s.with_exprs([fe(e) for e in s.exprs()])
        return s if warp is None else warp(s)
    if isinstance(s, WgmmaOperandTile):  # an access of its shared tile at the tile's origin
        mapped = s.with_exprs([fe(e) for e in s.exprs()])
        assert isinstance(mapped, WgmmaOperandTile)
        buffer, offset = target(mapped.operand.buffer, mapped.operand.offset)
        operand = dataclasses.replace(mapped.operand, buffer=buffer, offset=offset)
        return WgmmaOperandTile(mapped.frag, mapped.tile, operand)
    if isinstance(s, (WarpgroupStmt, TmaStmt)):
        return s.with_exprs([fe(e) for e in s.exprs()])
    if isinstance(s, ClusterLoad):  # its destination is where `target` says; its source stays
        dst, dst_index = target(s.dst, fe(s.dst_index))
        return ClusterLoad(dst, dst_index, s.src, fe(s.src_index), fe(s.rank))
    return s


def expressions(s: Stmt) -> list[Expr]:
    """Every expression of the statements of `s` (conditions, indices, values), as `map_exprs`
    meets them."""
    found: list[Expr] = []

    def keep(e: Expr) -> Expr:
        found.append(e)
        return e

    map_exprs(s, keep)
    return found


def executed_statements(
    s: Stmt,
    loop_kinds: Collection[str] | None = None,
    small_loops: int = 0,
    weight: Callable[[Stmt], int] | None = None,
) -> int:
    """How many statements `s` executes (an if counts both branches): every loop multiplies its
    body by its extent, or only loops of `loop_kinds` when given (e.g. {"unroll"}: the statements
    in the code once unrolled), and then also any loop whose copies come to at most
    `small_loops` statements (what a compiler unrolls on its own). `weight(stmt)`, when given,
    counts each other statement (default 1)."""
    if isinstance(s, Seq):
        return sum(executed_statements(c, loop_kinds, small_loops, weight) for c in s.stmts)
    if isinstance(s, For):
        body = executed_statements(s.body, loop_kinds, small_loops, weight)
        copies = loop_kinds is None or s.kind in loop_kinds or s.extent * body <= small_loops
        return s.extent * body if copies else body
    if isinstance(s, IfThenElse):
        return executed_statements(s.then_case, loop_kinds, small_loops, weight) + (
            executed_statements(s.else_case, loop_kinds, small_loops, weight)
            if s.else_case is not None
            else 0
        )
    return 1 if weight is None else weight(s)
