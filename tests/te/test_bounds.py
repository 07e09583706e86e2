"""te.bounds: interval arithmetic over a compute's domain, guards, and the read check."""

from __future__ import annotations

import pytest

from autosched import te
from autosched.errors import TEError
from autosched.te.bounds import Domain, check_reads, linear, span


def axes(*extents: int) -> tuple[te.IterVar, ...]:
    return tuple(te.IterVar(f"i{n}", 0, e, te.IterVar.SPATIAL) for n, e in enumerate(extents))


def bounds(e, *vs, dom=None):
    got = span(e, dom or Domain.of_axes(vs))
    return None if got is None else (got.lo, got.hi, got.exact)


# ---- the evaluator -------------------------------------------------------------------------


def test_linear_forms_collapse_repeated_variables():
    i, j = axes(4, 3)
    assert linear(i * 2 - i + 3) == linear(i + 3)
    assert linear(i * j) is None and linear(te.floordiv(i, 2)) is None
    assert bounds(i * 2 - i, i) == (0, 3, True)  # not [-3, 6]


@pytest.mark.parametrize(
    "make,want",
    [
        (lambda i, j: i + j - 1, (-1, 4, True)),
        (lambda i, j: i * 3 + j, (0, 11, True)),
        (lambda i, j: te.floordiv(i * 3 + j, 2), (0, 5, True)),
        (lambda i, j: te.floordiv(i, -2), (-2, 0, True)),
        (lambda i, j: te.floormod(j, 4), (0, 2, True)),
        (lambda i, j: te.floormod(i + 2, 4), (0, 3, False)),
        (lambda i, j: te.min(i, j) + 1, (1, 3, True)),
        (lambda i, j: te.max(i - 2, 0), (0, 1, True)),
        (lambda i, j: te.min(i, j) + i, (0, 5, False)),  # i on both sides
        (lambda i, j: i * j, (0, 6, True)),
        (lambda i, j: i * i, (0, 9, False)),  # i twice: the corners need not be reached
        (lambda i, j: te.floordiv(i, 2) * 2 + te.floormod(i, 2), (0, 3, False)),
    ],
)
def test_spans(make, want):
    i, j = axes(4, 3)
    assert bounds(make(i, j), i, j) == want


def test_what_the_evaluator_does_not_model_has_no_span():
    i, j = axes(4, 3)
    a = te.placeholder((4,), "int32", name="idx")
    assert bounds(a[i], i) is None
    assert bounds(te.floordiv(i, j), i, j) is None  # the divisor's range holds 0
    assert bounds(te.abs(i), i) is None


def test_guards_narrow_single_axes_exactly():
    (i,) = axes(8)
    dom = Domain.of_axes((i,)).assume(te.all(i >= 1, i < 7))
    assert bounds(i - 1, dom=dom) == (0, 5, True)
    assert bounds(i * 2 - 1, dom=Domain.of_axes((i,)).assume(i * 2 > 3)) == (3, 13, True)
    negated = Domain.of_axes((i,)).assume(te.any(i < 1, i >= 7), truth=False)
    assert bounds(i - 1, dom=negated) == (0, 5, True)
    assert bounds(i, dom=Domain.of_axes((i,)).assume(~(i < 3))) == (3, 7, True)


def test_multi_axis_guards_are_facts_and_make_axes_opaque():
    i, j = axes(8, 3)
    dom = Domain.of_axes((i, j)).assume(te.all(i + j >= 1, i + j < 9))
    assert bounds(i + j - 1, dom=dom) == (0, 7, False)
    assert bounds(j - 5, dom=dom)[2] is False
    one_sided = Domain.of_axes((i, j)).assume(i - j > 6)
    assert one_sided.reachable and bounds(i - j, dom=one_sided) == (7, 7, False)
    assert not one_sided.assume(j - i >= 0).reachable


def test_unreadable_guards_make_their_axes_opaque():
    i, j = axes(8, 3)
    dom = Domain.of_axes((i, j)).assume(te.floormod(i, 2) == 0)
    assert bounds(i + 9, dom=dom)[2] is False and bounds(j, dom=dom)[2] is True
    assert bounds(i, dom=Domain.of_axes((i,)).assume(te.any(i < 1, i > 6)))[2] is False


def test_impossible_guards_are_unreachable():
    (i,) = axes(4)
    assert not Domain.of_axes((i,)).assume(i >= 4).reachable
    assert not Domain.of_axes((i,)).assume(te.const(False)).reachable
    assert Domain.of_axes((i,)).assume(i >= 3).reachable


# ---- the check -----------------------------------------------------------------------------


def test_shifted_read_is_rejected_with_its_range():
    a = te.placeholder((4,), name="A")
    out = te.compute((4,), lambda i: a[i + 1], name="B")
    with pytest.raises(TEError) as err:
        check_reads(out.op)
    msg = str(err.value)
    assert "compute 'B' reads A[(i + 1)]" in msg
    assert "index range [1, 4] on axis 0 of extent 4" in msg


def test_reduction_longer_than_the_dimension_is_rejected():
    a = te.placeholder((3, 4), name="A")
    k = te.reduce_axis((0, 5), name="k")
    out = te.compute((3,), lambda i: te.sum(a[i, k], axis=k), name="S")
    with pytest.raises(TEError, match=r"A\[i, k\] with index range \[0, 4\] on axis 1 of extent 4"):
        check_reads(out.op)
    k2 = te.reduce_axis((1, 5), name="k2")  # [1, 5): starts inside, ends outside
    with pytest.raises(TEError, match=r"range \[1, 4\]"):
        check_reads(te.compute((3,), lambda i: te.sum(a[i, k2], axis=k2)).op)


@pytest.mark.parametrize(
    "body",
    [
        lambda a, i: te.if_then_else(i >= 1, a[i - 1], 0.0),
        lambda a, i: te.if_then_else(i < 1, 0.0, a[i - 1]),
        # an odd i keeps the read in bounds; the evaluator cannot read the guard, so trusts it
        lambda a, i: te.if_then_else(te.floormod(i, 2) == 1, a[te.floordiv(i, 2) + 2], 0.0),
        lambda a, i: te.if_then_else(a[0] > 0.0, 1.0, a[te.min(i, 3)]),
        lambda a, i: a[te.if_then_else(i >= 4, i - 1, i)],
        lambda a, i: te.if_then_else(i >= 9, a[i], 0.0),  # never taken
    ],
)
def test_guarded_reads_are_accepted(body):
    a = te.placeholder((4,), name="A")
    check_reads(te.compute((5,), lambda i: body(a, i), name="G").op)


def test_reduce_where_guards_its_source():
    a = te.placeholder((4,), name="A")
    k = te.reduce_axis((0, 6), name="k")
    ok = te.compute((1,), lambda i: te.sum(a[k - 1], axis=k, where=te.all(k >= 1, k < 5)))
    check_reads(ok.op)
    bad = te.compute((1,), lambda i: te.sum(a[k - 1], axis=k, where=k >= 1), name="R")
    with pytest.raises(TEError, match=r"'R' reads A\[\(k - 1\)\] with index range \[0, 4\]"):
        check_reads(bad.op)


def test_a_guard_on_one_side_does_not_cover_the_other():
    a = te.placeholder((4,), name="A")
    out = te.compute((5,), lambda i: te.if_then_else(i < 2, a[i], a[i + 1]), name="G")
    with pytest.raises(TEError, match=r"reads A\[\(i \+ 1\)\] with index range \[3, 5\]"):
        check_reads(out.op)  # the else side runs for i in [2, 4]


def test_padded_conv_written_by_hand_is_accepted():
    data = te.placeholder((1, 2, 6, 6), name="data")
    kernel = te.placeholder((3, 2, 3, 3), name="kernel")
    rc = te.reduce_axis((0, 2), name="rc")
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")

    def body(n, f, y, x):
        h, w = y + ry - 1, x + rx - 1
        inside = te.all(h >= 0, h < 6, w >= 0, w < 6)
        value = te.if_then_else(inside, data[n, rc, h, w], 0.0)
        return te.sum(value * kernel[f, rc, ry, rx], axis=[rc, ry, rx])

    check_reads(te.compute((1, 3, 6, 6), body, name="conv").op)
