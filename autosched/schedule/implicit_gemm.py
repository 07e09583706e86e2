"""The tensor-expression side of implicit GEMM: a convolution rewritten as a matrix product.

A convolution `C[n, y, x, f] = sum(A[n, y*s + ry, x*s + rx, rc] * W[ry, rx, rc, f])` is a
matrix product whose rows (M) are the output pixels (n, y, x) together, but none of A's
dimensions is indexed by one row axis alone, so no 16x16 tile of A is a tile of a matrix.
`implicit_gemm_ops(op)` gives the three ops that replace it (MetaSchedule's reindex of a
block into a GEMM, made here by one step, `ImplicitGemmStep`):

    <C>.im2col[m, ry, rx, rc] = A[n(m), y(m)*s + ry, x(m)*s + rx, rc]     the gather
    <C>.gemm[m, f]            = sum(im2col[m, ry, rx, rc] * W[ry, rx, rc, f])
    <C>[n, y, x, f]           = gemm[(n*OH + y)*OW + x, f]                 the reshape

The row axes (`row_axes`) are the spatial axes read by the first factor only, in order; they
are fused into one axis `m` (its digits recover them: `x = m % OW`, ...). The gather is indexed
by `m` and the reduction axes the first factor reads, so its shared copy is a matrix with `m` as
rows and the innermost reduction axis (the input channels) as columns; inlined into that copy,
the gather (and a padding stage inlined into it) becomes the shared tile fetch. Nothing is
stored in the gather's own buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autosched.errors import ScheduleError
from autosched.te.expr import BinOp, Cast, Const, Expr, IterVar, Load, Reduce
from autosched.te.reduce import sum_reducer
from autosched.te.tensor import ComputeOp, Tensor
from autosched.te.visitor import substitute, walk

I32 = "int32"
IMPLICIT_GEMM_ORIGIN = "implicit_gemm"  # the origin of the gather's and the product's stages


@dataclass(frozen=True)
class ImplicitGemmOps:
    """The ops that replace a convolution: the gather, the product and the reshape."""

    gather: ComputeOp
    gemm: ComputeOp
    reshape: ComputeOp


def product_loads(op: ComputeOp) -> tuple[Load, Load] | None:
    """The two tensor loads (under optional casts) of a sum of products `sum(a * b)`."""
    body = op.body
    if not isinstance(body, Reduce) or body.reducer is not sum_reducer:
        return None
    if body.condition is not None:
        return None
    src = body.source
    if not (isinstance(src, BinOp) and src.op == "*"):
        return None
    a, b = (e.value if isinstance(e, Cast) else e for e in (src.a, src.b))
    if not (isinstance(a, Load) and isinstance(b, Load)):
        return None
    if not (isinstance(a.buffer, Tensor) and isinstance(b.buffer, Tensor)):
        return None
    return a, b


def _axes_read(load: Load) -> set[int]:
    return {id(n) for idx in load.indices for n in walk(idx) if isinstance(n, IterVar)}


def row_axes(op: ComputeOp) -> list[IterVar]:
    """The spatial axes read by the product's first factor only (a convolution's n, y, x), in
    the op's order; empty when `op` is not a sum of two loads."""
    loads = product_loads(op)
    if loads is None:
        return []
    in_a, in_b = _axes_read(loads[0]), _axes_read(loads[1])
    return [a for a in op.axis if id(a) in in_a and id(a) not in in_b]


def _digits(m: Expr, axes: list[IterVar]) -> dict[IterVar, Expr]:
    """Each of `axes` as a digit of the fused index `m` (the last axis varies fastest)."""
    out: dict[IterVar, Expr] = {}
    stride = 1
    for k in range(len(axes) - 1, -1, -1):
        a = axes[k]
        part = BinOp("floordiv", m, _const(stride), I32) if stride > 1 else m
        out[a] = BinOp("floormod", part, _const(a.extent), I32) if k > 0 else part
        stride *= a.extent
    return out


def _flat(axes: list[Expr], extents: list[int]) -> Expr:
    """The fused index of `axes` (extents `extents`): `(a0*e1 + a1)*e2 + a2`."""
    total = axes[0]
    for a, e in zip(axes[1:], extents[1:], strict=True):
        total = BinOp("+", BinOp("*", total, _const(e), I32), a, I32)
    return total


def _const(v: int) -> Expr:
    return Const(v, I32)


def implicit_gemm_ops(op: ComputeOp) -> ImplicitGemmOps:
    """The gather, product and reshape ops of a sum of products with two or more row axes
    (`row_axes`); ScheduleError for any other op."""
    loads = product_loads(op)
    rows = row_axes(op)
    if loads is None or len(rows) < 2:
        raise ScheduleError(
            f"implicit_gemm: {op.name!r} is not a sum of products with two or more row axes"
        )
    assert isinstance(op.body, Reduce)  # product_loads checked it
    la, lb = loads
    name = "_".join(a.name for a in rows) + "_fused"
    m = IterVar(name, 0, math.prod(a.extent for a in rows), IterVar.SPATIAL)
    read_by_a = _axes_read(la)
    # the gather's axes: the spatial axes A shares with B (a batch, split-K's parts), m, and
    # the reduction axes A reads
    batch = [a for a in op.axis if id(a) in read_by_a and a not in rows]
    reduces = [r for r in op.reduce_axis if id(r) in read_by_a]
    g_batch = [IterVar(a.name, 0, a.extent, IterVar.SPATIAL) for a in batch]
    g_red = [IterVar(r.name, 0, r.extent, IterVar.SPATIAL) for r in reduces]
    mapping = {
        **_digits(m, rows),
        **dict(zip(batch, g_batch, strict=True)),
        **dict(zip(reduces, g_red, strict=True)),
    }
    gather_axes = (*g_batch, m, *g_red)
    gather = ComputeOp(f"{op.name}.im2col", "injective", gather_axes, substitute(la, mapping), {})

    # the product: the row axes replaced by m at the first one's place, fresh iterators
    first = op.axis.index(rows[0])
    kept = [a for a in op.axis if a not in rows]
    new_axis = {a: IterVar(a.name, 0, a.extent, IterVar.SPATIAL) for a in kept}
    gm = IterVar(name, 0, m.extent, IterVar.SPATIAL)
    g_axes = [new_axis[a] for a in kept]
    g_axes.insert(first, gm)
    raxis = {r: IterVar(r.name, r.lo, r.extent, IterVar.REDUCE) for r in op.reduce_axis}
    gathered: Expr = Load(
        gather.output(0), [*(new_axis[a] for a in batch), gm, *(raxis[r] for r in reduces)]
    )
    src = op.body.source
    assert isinstance(src, BinOp)
    if isinstance(src.a, Cast):
        gathered = Cast(src.a.dtype, gathered)
    b_side = substitute(src.b, {**new_axis, **raxis})
    product = BinOp("*", gathered, b_side, src.dtype)
    body = Reduce(op.body.reducer, product, tuple(raxis.values()), None)
    gemm = ComputeOp(f"{op.name}.gemm", op.tag, tuple(g_axes), body, dict(op.attrs))

    # the reshape: the original axes, reading the product at the fused row index
    out_axis = tuple(IterVar(a.name, 0, a.extent, IterVar.SPATIAL) for a in op.axis)
    by_old = dict(zip(op.axis, out_axis, strict=True))
    index: list[Expr] = [by_old[a] for a in kept]
    index.insert(first, _flat([by_old[a] for a in rows], [a.extent for a in rows]))
    reshape = ComputeOp(op.name, "injective", out_axis, Load(gemm.output(0), index), {})
    return ImplicitGemmOps(gather, gemm, reshape)


__all__ = [
    "IMPLICIT_GEMM_ORIGIN",
    "ImplicitGemmOps",
    "implicit_gemm_ops",
    "product_loads",
    "row_axes",
]
