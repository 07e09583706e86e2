"""Generic traversal and rewriting of expression trees (children table, memoised rewrite)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from autosched.te.expr import BinOp, Call, Cast, Const, Expr, Load, Not, Reduce, Select, Var


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `e`."""
    t = type(e)
    if t is BinOp:
        return (e.a, e.b)
    if t is Load:
        return e.indices
    if t is Select:
        return (e.cond, e.t, e.f)
    if t is Call:
        return e.args
    if t is Cast or t is Not:
        return (e.value,) if t is Cast else (e.a,)
    if t is Reduce:
        return (e.source,) if e.condition is None else (e.source, e.condition)
    return ()


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of the tree, parents before children (shared subtrees once)."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        yield node
        kids = children(node)
        if kids:
            stack.extend(reversed(kids))


def rebuild(e: Expr, new_children: tuple[Expr, ...]) -> Expr:
    """`e` with its children replaced (no dtype re-checks beyond the constructors')."""
    t = type(e)
    if t is BinOp:
        a, b = new_children
        return BinOp(e.op, a, b, "bool" if e.dtype == "bool" else a.dtype)
    if t is Load:
        return Load(e.buffer, new_children)
    if t is Select:
        return Select(*new_children, style=e.style)
    if t is Call:
        return Call(e.func, new_children, new_children[0].dtype if new_children else e.dtype)
    if t is Cast:
        return Cast(e.dtype, new_children[0])
    if t is Not:
        return Not(new_children[0])
    if t is Reduce:
        cond = new_children[1] if len(new_children) > 1 else None
        return Reduce(e.reducer, new_children[0], e.axes, cond)
    return e


def rewrite(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Bottom-up rewrite: `fn(node)` returns a replacement or None to keep (children rewritten)."""
    memo: dict[int, Expr] = {}

    def go(node: Expr) -> Expr:
        got = memo.get(id(node))
        if got is not None:
            return got
        repl = fn(node)
        if repl is None:
            repl = node
            kids = children(node)
            if kids:
                new_kids = tuple([go(k) for k in kids])
                for n, k in zip(new_kids, kids, strict=True):
                    if n is not k:
                        repl = rebuild(node, new_kids)
                        break
        memo[id(node)] = repl
        return repl

    return go(e)


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace variables (keys: Var objects) by expressions."""
    if not mapping:
        return e
    by_id = {id(k): v for k, v in mapping.items()}
    return rewrite(e, lambda n: by_id.get(id(n)) if isinstance(n, Var) else None)


def free_vars(e: Expr) -> list[Var]:
    """Variables used in `e`, in order of first appearance."""
    out, seen = [], set()
    for node in walk(e):
        if isinstance(node, Var) and id(node) not in seen:
            seen.add(id(node))
            out.append(node)
    return out


def loads(e: Expr) -> list[Load]:
    """Every Load node in `e` (pre-order)."""
    return [n for n in walk(e) if isinstance(n, Load)]


__all__ = ["children", "walk", "rebuild", "rewrite", "substitute", "free_vars", "loads", "Const"]
