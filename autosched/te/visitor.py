"""Generic traversal and rewriting of expression trees: each node lists and replaces its own
children (`Expr.children`, `Expr.with_children`); walks and a memoised rewrite build on that."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import is_not

from autosched.te.expr import Const, Expr, Load, Var


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of `e` (each node class knows its own: `Expr.children`)."""
    return e.children()


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of the tree, parents before children (shared subtrees once)."""
    return iter(nodes(e))


def nodes(e: Expr) -> list[Expr]:
    """`walk`'s nodes as a list, in its order: the form lowering's hot loops take (the passes
    look for the loads and variables of every expression they meet, and resuming a generator
    per node would cost more than the look)."""
    return _unique_nodes(e, None)


def _unique_nodes(e: Expr, kind: type | None) -> list:
    """The nodes of `e` (of type `kind` only, unless None) in `walk`'s order, shared subtrees
    once: one loop for `nodes` and `loads`."""
    out: list = []
    seen: set[int] = set()
    stack = [e]
    pop, push, add, keep = stack.pop, stack.extend, seen.add, out.append
    while stack:
        node = pop()
        key = id(node)
        if key in seen:
            continue
        add(key)
        if kind is None or isinstance(node, kind):
            keep(node)
        kids = node.children()
        if kids:
            push(reversed(kids))
    return out


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
    return _rewritten(e, fn, {} if memo is None else memo)


# The recursions of `rewrite` and `substitute` are module functions, not closures: a closure
# that calls itself is a reference cycle, which keeps its memo (and every node in it) alive
# until the cycle collector runs, and lowering calls them for every expression it derives.


def _rewritten(node: Expr, fn: Callable[[Expr], Expr | None], memo: dict[int, Expr]) -> Expr:
    got = memo.get(id(node))
    if got is not None:
        return got
    repl = fn(node)
    if repl is None:
        repl = node
        kids = node.children()
        if kids:
            new_kids = [_rewritten(k, fn, memo) for k in kids]
            if any(map(is_not, new_kids, kids)):
                repl = node.with_children(new_kids)
    memo[id(node)] = repl
    return repl


def substitute(e: Expr, mapping: dict, memo: dict[int, Expr] | None = None) -> Expr:
    """Replace variables (keys: Var objects) by expressions. `memo` (id of a node -> its
    substitute), as `rewrite`'s, may be shared by the calls of one mapping on trees that share
    subtrees (the indices of one statement's loads), which are then substituted once and stay
    shared; the trees must stay alive while it is in use."""
    if not mapping:
        return e
    # `rewrite` with the replacement written in: only a leaf can be one of the variables
    # (they are alive as the mapping's keys, so no other node has their id). Lowering
    # substitutes into every index it derives.
    return _substituted(e, {id(k): v for k, v in mapping.items()}, {} if memo is None else memo)


def _substituted(node: Expr, by_id: dict[int, Expr], memo: dict[int, Expr]) -> Expr:
    got = memo.get(id(node))
    if got is not None:
        return got
    kids = node.children()
    if not kids:
        repl = by_id.get(id(node), node)
    else:
        repl = node
        new_kids = [_substituted(k, by_id, memo) for k in kids]
        if any(map(is_not, new_kids, kids)):
            repl = node.with_children(new_kids)
    memo[id(node)] = repl
    return repl


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
    """Every Load node in `e`, in `walk`'s order (shared subtrees once), found in the one walk:
    the passes that count or inspect the loads of every expression of a kernel ask for them (a
    list of all nodes, read again, would cost more)."""
    return _unique_nodes(e, Load)


__all__ = [
    "children",
    "walk",
    "nodes",
    "rebuild",
    "rewrite",
    "substitute",
    "free_vars",
    "loads",
    "Const",
]
