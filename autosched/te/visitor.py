"""Generic traversal and rewriting of expression trees: each node lists and replaces its own
children (`Expr.children`, `Expr.with_children`); walks and a memoised rewrite build on that."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from autosched.te.expr import Const, Expr, Load, Var


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `e` (each node class knows its own: `Expr.children`)."""
    return e.children()


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
        kids = node.children()
        if kids:
            stack.extend(reversed(kids))


def nodes(e: Expr) -> list[Expr]:
    """`walk`'s nodes as a list, in the same order (parents before children, shared subtrees
    once): the passes that scan every expression of a program for loads or variables call it
    on each index and value, and a generator's per-node resumption would dominate."""
    out: list[Expr] = []
    seen: set[int] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        out.append(node)
        kids = node.children()
        if kids:
            stack.extend(reversed(kids))
    return out


def rebuild(e: Expr, new_children: Sequence[Expr]) -> Expr:
    """`e` with its children replaced (no dtype re-checks beyond the constructors')."""
    return e.with_children(new_children)


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
            kids = node.children()
            if kids:
                new_kids = tuple([go(k) for k in kids])
                for n, k in zip(new_kids, kids, strict=True):
                    if n is not k:
                        repl = node.with_children(new_kids)
                        break
        memo[id(node)] = repl
        return repl

    return go(e)


def rewrite_loads(
    e: Expr, fn: Callable[[Load], Expr | None], memo: dict[int, Expr] | None = None
) -> Expr:
    """`rewrite` with `fn` asked of the Load nodes only (every other node is kept, its children
    rewritten): what lowering's buffer redirections do to each stage body and index, without a
    call per node that is not a load. `memo` (id of a node -> its rewrite) may be shared by the
    calls of one `fn` on parts of one tree (`fn` rewriting a load's indices with the same `fn`):
    the subtrees they share are then rewritten once. The tree must stay alive while the memo
    is in use (its keys are ids)."""
    memo = {} if memo is None else memo

    def go(node: Expr) -> Expr:
        got = memo.get(id(node))
        if got is not None:
            return got
        repl = fn(node) if type(node) is Load else None
        if repl is None:
            repl = node
            kids = node.children()
            if kids:
                new_kids = tuple([go(k) for k in kids])
                for n, k in zip(new_kids, kids, strict=True):
                    if n is not k:
                        repl = node.with_children(new_kids)
                        break
        memo[id(node)] = repl
        return repl

    return go(e)


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace variables (keys: Var objects) by expressions."""
    if not mapping:
        return e
    by_id = {id(k): v for k, v in mapping.items()}
    memo: dict[int, Expr] = {}

    # `rewrite` with the replacement written in: only a leaf can be one of the variables
    # (they are alive as the mapping's keys, so no other node has their id). Lowering
    # substitutes into every index it derives.
    def go(node: Expr) -> Expr:
        got = memo.get(id(node))
        if got is not None:
            return got
        kids = node.children()
        if not kids:
            repl = by_id.get(id(node), node)
        else:
            repl = node
            new_kids = tuple([go(k) for k in kids])
            for n, k in zip(new_kids, kids, strict=True):
                if n is not k:
                    repl = node.with_children(new_kids)
                    break
        memo[id(node)] = repl
        return repl

    return go(e)


def free_vars(e: Expr) -> list[Var]:
    """Variables used in `e`, in order of first appearance (`walk`'s order, written out here:
    lowering asks this of every index term, and the generator's overhead would dominate)."""
    out: list[Var] = []
    seen: set[int] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Var):
            out.append(node)
            continue
        kids = node.children()
        if kids:
            stack.extend(reversed(kids))
    return out


def loads(e: Expr) -> list[Load]:
    """Every Load node in `e` (pre-order)."""
    return [n for n in nodes(e) if isinstance(n, Load)]


__all__ = [
    "children",
    "walk",
    "nodes",
    "rebuild",
    "rewrite",
    "rewrite_loads",
    "substitute",
    "free_vars",
    "loads",
    "Const",
]
