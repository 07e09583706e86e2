"""te.visitor and the tree structure it builds on: every expression node lists its children
(`Expr.children`) and rebuilds itself from new ones (`Expr.with_children`)."""

from __future__ import annotations

import pytest

from autosched import te
from autosched.te import expr as E
from autosched.te.visitor import (
    children,
    free_vars,
    loads,
    nodes,
    rebuild,
    rewrite,
    substitute,
    walk,
)

A = te.placeholder((8, 8), name="A")
AXIS = te.IterVar("i", 0, 8, te.IterVar.SPATIAL)
K = te.reduce_axis((0, 8), name="k")
X = E.Var("x", "float32")


def _samples() -> dict[type, E.Expr]:
    """One node of every expression class, each with children where the class has any."""
    load = A[AXIS, K]
    return {
        E.Const: E.const(3),
        E.Var: E.Var("v"),
        E.IterVar: AXIS,
        E.BinOp: AXIS + 1,
        E.Not: ~(AXIS < 3),
        E.Select: te.if_then_else(AXIS < 3, load, 0.0),
        E.Cast: te.cast(load, "float16"),
        E.Call: te.exp(load),
        E.Load: load,
        E.Reduce: te.sum(load, axis=K, where=K < AXIS),
    }


def _all_subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _all_subclasses(sub)
    return out


def test_every_node_class_has_a_sample():
    assert set(_samples()) == _all_subclasses(E.Expr)


@pytest.mark.parametrize("cls", list(_samples()), ids=lambda c: c.__name__)
def test_children_hold_every_subexpression_field(cls):
    """A node's Expr-valued fields (single or tuples) are exactly its children, so a walk or a
    rewrite reaches every sub-expression."""
    node = _samples()[cls]
    fields = []
    for klass in type(node).__mro__:
        for slot in getattr(klass, "__slots__", ()):
            if slot.startswith("_"):
                continue
            value = getattr(node, slot)
            items = value if isinstance(value, tuple) else (value,)
            fields += [v for v in items if isinstance(v, E.Expr)]
    if isinstance(node, E.Reduce):  # its axes bind variables; they are no sub-expressions
        fields = [node.source, node.condition]
    got = node.children()
    assert len(got) == len(fields)
    assert all(any(c is f for f in fields) for c in got)


@pytest.mark.parametrize("cls", list(_samples()), ids=lambda c: c.__name__)
def test_rebuilding_from_its_own_children_gives_an_equal_node(cls):
    node = _samples()[cls]
    again = rebuild(node, children(node))
    assert type(again) is type(node)
    assert again.same_as(node)
    assert repr(again) == repr(node)


@pytest.mark.parametrize("cls", list(_samples()), ids=lambda c: c.__name__)
def test_rebuilding_with_new_children_puts_them_in_place(cls):
    node = _samples()[cls]
    kids = node.children()
    if not kids:
        assert rebuild(node, ()) is node
        return
    # replace the first child by a different expression of the same dtype
    first = kids[0]
    other = E.const(True) if first.dtype == "bool" else first + E.const(1, first.dtype)
    new = rebuild(node, (other,) + kids[1:])
    assert new.children()[0] is other
    assert all(a is b for a, b in zip(new.children()[1:], kids[1:], strict=True))


def test_walk_visits_shared_subtrees_once_parents_first():
    x2 = X * X
    e = x2 + x2
    nodes = list(walk(e))
    assert nodes[0] is e
    assert sum(n is x2 for n in nodes) == 1
    assert [v.name for v in free_vars(e)] == ["x"]


def test_nodes_lists_the_tree_pre_order_left_first_shared_subtrees_once():
    y = E.Var("y", "float32")
    x2 = X * X
    e = (x2 + y) - x2
    expected = [e, e.a, x2, X, y]  # x2 and X once: where they are first met
    assert [id(n) for n in nodes(e)] == [id(n) for n in expected]


def test_loads_are_the_loads_among_the_nodes_in_their_order():
    B = te.placeholder((8,), name="B")
    inner = B[AXIS]  # shared: met twice, listed once
    e = te.if_then_else(AXIS < 3, A[AXIS, inner.astype("int32")] + inner, B[K])
    expected = [n for n in nodes(e) if isinstance(n, E.Load)]
    assert len(expected) == 3
    assert [id(n) for n in loads(e)] == [id(n) for n in expected]


def test_rewrite_and_substitute_rebuild_only_what_changes():
    y = E.Var("y", "float32")
    e = te.exp(X) + y
    got = substitute(e, {X: E.const(2.0)})
    assert repr(got) == "(tir.exp(2f) + y)"
    assert got.children()[1] is y
    assert rewrite(e, lambda n: None) is e


def test_rewrite_with_a_shared_memo_rewrites_a_shared_subtree_once():
    """Two trees rewritten under one memo: the subtree they share is asked of `fn` once and
    gets one rewrite (each call on its own memo asks again)."""
    shared = te.exp(X) * E.const(3.0)
    first, second = shared + E.const(1.0), shared - E.const(1.0)
    asked: list[E.Expr] = []

    def fn(node: E.Expr) -> E.Expr | None:
        asked.append(node)
        return E.const(2.0) if node is X else None

    memo: dict[int, E.Expr] = {}
    a, b = rewrite(first, fn, memo), rewrite(second, fn, memo)
    assert repr(a) == "((tir.exp(2f)*3f) + 1f)"
    assert a.children()[0] is b.children()[0]
    assert sum(n is shared for n in asked) == 1
    asked.clear()
    rewrite(first, fn), rewrite(second, fn)
    assert sum(n is shared for n in asked) == 2
