"""The tensor-expression side of rfactor: the two ops that replace a factored reduction.

`rfactor_ops(stage, iter_index, factor_axis)` follows TVM's `Schedule.rfactor`. The reduce
iterator `it` of the stage (usually a part of a split reduce axis) becomes a spatial axis of a new
op `<name>.rf`, which computes partial reductions over the remaining reduce iterators; a new op
with the stage's name then reduces the rf tensor over that axis (`<it>_v`).

Which reduce axes are *touched*: those connected to `it` through the stage's split / fuse
relations. Their original index is re-composed from the touched leaf iterators (`k = k_o * 4 +
k_i`), with a bound check wherever a split does not divide its parent. Untouched reduce axes stay
whole reduce axes of the rf op (their own splits are dropped, like Ansor, which gives both new
stages fresh iterators).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from autosched.errors import ScheduleError
from autosched.schedule.stage import MIXED, REDUCE, FuseRel, SplitRel, Stage
from autosched.te.expr import Expr, IterVar, Reduce, Select
from autosched.te.tensor import ComputeOp
from autosched.te.visitor import substitute


@dataclass(frozen=True)
class RfactorOps:
    """`rf_op` computes the partial reductions; `final_op` reduces them into the stage's result."""

    rf_op: ComputeOp
    final_op: ComputeOp


class IteratorTree:
    """Extents, kinds and connections of every iterator a stage ever had (roots, intermediate
    split / fuse results, leaves), re-derived from its root iterators and relations."""

    def __init__(self, stage: Stage) -> None:
        self.relations = stage.relations
        self.extent: dict[str, int | None] = {it.name: it.extent for it in stage.root_iters}
        self.kind: dict[str, str] = {it.name: it.kind for it in stage.root_iters}
        self.neighbours: dict[str, set[str]] = {name: set() for name in self.extent}
        for rel in stage.relations:
            if isinstance(rel, SplitRel):
                self._add_split(rel)
            else:
                self._add_fuse(rel)

    def _add_split(self, rel: SplitRel) -> None:
        parent = self.extent[rel.parent]
        rest = None
        if parent is not None and None not in rel.lengths:
            rest = -(-parent // math.prod(rel.lengths))
        extents = [rest, *rel.lengths] if rel.inner_to_outer else [*rel.lengths, rest]
        for child, extent in zip(rel.children, extents, strict=True):
            self.extent[child] = extent
            self.kind[child] = self.kind[rel.parent]
            self._connect(rel.parent, child)

    def _add_fuse(self, rel: FuseRel) -> None:
        extents = [self.extent[c] for c in rel.children]
        known = [e for e in extents if e is not None]
        self.extent[rel.fused] = math.prod(known) if len(known) == len(extents) else None
        kinds = {self.kind[c] for c in rel.children}
        self.kind[rel.fused] = kinds.pop() if len(kinds) == 1 else MIXED
        for child in rel.children:
            self._connect(child, rel.fused)

    def _connect(self, a: str, b: str) -> None:
        self.neighbours.setdefault(a, set()).add(b)
        self.neighbours.setdefault(b, set()).add(a)

    def connected(self, name: str) -> set[str]:
        """The iterators linked to `name` through relations (itself included)."""
        seen, todo = {name}, [name]
        while todo:
            for other in self.neighbours.get(todo.pop(), ()):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        return seen

    def known_extents(self, names: set[str]) -> dict[str, int]:
        """The extents of `names`, each of which must be known (a ScheduleError names the first
        that is not: a sketch's unknown split length)."""
        out = {}
        for name in sorted(names):
            extent = self.extent[name]
            if extent is None:
                raise ScheduleError(
                    f"the extent of {name!r} is unknown (a sketch); fill the split lengths first"
                )
            out[name] = extent
        return out

    def compose(
        self, leaf_values: dict[str, Expr], touched: set[str]
    ) -> tuple[dict[str, Expr], list[Expr]]:
        """Values of all touched iterators from the touched leaves' values, walking the relations
        backwards, and the bound checks of the splits that do not divide their parent. The
        touched iterators' extents must be known."""
        value = dict(leaf_values)
        extent = self.known_extents(touched)
        checks: list[Expr] = []
        for rel in reversed(self.relations):
            if isinstance(rel, SplitRel) and rel.parent in touched:
                value[rel.parent] = _compose_split(rel, value, extent)
                if math.prod(extent[c] for c in rel.children) > extent[rel.parent]:
                    checks.append(value[rel.parent] < extent[rel.parent])
            elif isinstance(rel, FuseRel) and rel.fused in touched:
                value.update(_decompose_fuse(rel, value[rel.fused], extent))
        return value, checks


def _compose_split(rel: SplitRel, value: dict[str, Expr], extent: Mapping[str, int]) -> Expr:
    """parent = sum of child * (product of the extents of the children inside it)."""
    total: Expr | None = None
    stride = 1
    for child in reversed(rel.children):
        term = value[child] if stride == 1 else value[child] * stride
        total = term if total is None else term + total
        stride *= extent[child]
    assert total is not None, "a split has at least one child"
    return total


def _decompose_fuse(rel: FuseRel, fused: Expr, extent: Mapping[str, int]) -> dict[str, Expr]:
    """child k = fused // (product of the inner children's extents) % extent of child k."""
    out, stride = {}, 1
    for k in range(len(rel.children) - 1, -1, -1):
        child = rel.children[k]
        part = fused // stride if stride > 1 else fused
        out[child] = part % extent[child] if k > 0 else part
        stride *= extent[child]
    return out


def rfactor_ops(stage: Stage, iter_index: int, factor_axis: int) -> RfactorOps:
    """The rf op and the final op that replace reduction `stage` when its leaf iterator
    `iter_index` is factored out, as the rf op's spatial axis number `factor_axis`."""
    op, it = stage.op, stage.iters[iter_index]
    where = f"rfactor of {stage.name}.{it.name}"
    body = op.body if isinstance(op, ComputeOp) else None
    if not isinstance(op, ComputeOp) or not isinstance(body, Reduce):
        raise ScheduleError(f"{where}: stage {stage.name!r} is not a reduction")
    _require(
        it.kind == REDUCE, f"{where}: {it.name!r} is a {it.kind} iterator, not a reduce iterator"
    )
    _require(
        0 <= factor_axis <= len(op.axis),
        f"{where}: factor_iter_id {factor_axis} is out of "
        f"range; the rf op has {len(op.axis) + 1} spatial axes (0..{len(op.axis)})",
    )
    tree = IteratorTree(stage)
    touched = tree.connected(it.name)
    for name in sorted(touched):
        _require(
            tree.kind[name] == REDUCE,
            f"{where}: {it.name!r} is linked through splits/fuses "
            f"to {name!r}, a {tree.kind[name]} iterator; only reduce axes can be factored",
        )
    final_name = f"{it.name}_v"
    _require(
        final_name not in {a.name for a in op.axis},
        f"{where}: the final reduce axis name {final_name!r} is taken by a spatial axis",
    )

    try:
        extent = tree.known_extents(touched)
    except ScheduleError as e:
        raise ScheduleError(f"{where}: {e}") from None
    spatial = [IterVar(a.name, a.lo, a.extent, IterVar.SPATIAL) for a in op.axis]
    factored = IterVar(it.name, 0, extent[it.name], IterVar.SPATIAL)
    rf_axis = tuple(spatial[:factor_axis] + [factored] + spatial[factor_axis:])
    kept = [a for a in op.reduce_axis if a.name not in touched]
    kept_new = [IterVar(a.name, a.lo, a.extent, IterVar.REDUCE) for a in kept]
    touched_leaves = [x for x in stage.iters if x.name in touched and x.name != it.name]
    leaf_new = [IterVar(x.name, 0, extent[x.name], IterVar.REDUCE) for x in touched_leaves]
    value, checks = tree.compose(
        {it.name: factored, **{x.name: v for x, v in zip(touched_leaves, leaf_new, strict=True)}},
        touched,
    )

    mapping: dict = {
        **dict(zip(op.axis, spatial, strict=True)),
        **dict(zip(kept, kept_new, strict=True)),
    }
    for a in op.reduce_axis:
        if a.name in touched:
            mapping[a] = value[a.name] + a.lo if a.lo else value[a.name]
    source = substitute(body.source, mapping)
    if body.condition is not None:
        checks.append(substitute(body.condition, mapping))
    cond = _all(checks)
    raxis = tuple(kept_new + leaf_new)
    if raxis:
        rf_body: Expr = Reduce(body.reducer, source, raxis, cond)
    else:  # nothing left to reduce: one element per rf point (identity where out of bounds)
        rf_body = source if cond is None else Select(cond, source, body.identity)
    rf_op = ComputeOp(f"{op.name}.rf", op.tag, rf_axis, rf_body, dict(op.attrs))

    out_axis = [IterVar(a.name, a.lo, a.extent, IterVar.SPATIAL) for a in op.axis]
    final_axis = IterVar(final_name, 0, extent[it.name], IterVar.REDUCE)
    index = out_axis[:factor_axis] + [final_axis] + out_axis[factor_axis:]
    final_body = Reduce(body.reducer, rf_op.output(0)[tuple(index)], (final_axis,), None)
    final_op = ComputeOp(op.name, op.tag, tuple(out_axis), final_body, dict(op.attrs))
    return RfactorOps(rf_op, final_op)


def _all(conds: list[Expr]) -> Expr | None:
    out = None
    for c in conds:
        out = c if out is None else out & c
    return out


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ScheduleError(msg)
