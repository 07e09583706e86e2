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


def rebuild(e: Expr, new_children: Sequence[Expr]) -> Expr:
    """`e` with its children replaced (no dtype re-checks beyond the constructors')."""
    return e.with_children(new_children)


def rewrite(
    e: Expr, fn: Callable[[Expr], Expr | None], memo: dict[int, Expr] | None = None
) -> Expr:
    """Bottom-up rewrite: `fn(node)` returns a replacement or None to keep (children rewritten).
    `memo` (id of a node -> its rewrite) may be shared by the calls of one `fn` on parts of
    one tree, or on trees that share subtrees (`fn` rewriting a load's indices with itself, the
    expressions of one statement tree): a shared subtree is then rewritten once. Its keys are
    ids, so the trees must stay alive while it is in use."""
    memo = {} if memo is None else memo

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
    return [n for n in walk(e) if isinstance(n, Load)]


__all__ = ["children", "walk", "rebuild", "rewrite", "substitute", "free_vars", "loads", "Const"]
