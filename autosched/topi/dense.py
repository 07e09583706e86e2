"""Matrix products: matmul, dense (with optional bias), batch_matmul, and bias_add."""

from __future__ import annotations

from autosched import te
from autosched.te.dtype import check_dtype
from autosched.topi.broadcast import add
from autosched.topi.utils import (
    ax_names,
    cast_to,
    check,
    check_tensor,
    normalize_axes,
    with_axis_names,
)


def _out_dtype(out_dtype: str | None, a: te.Tensor) -> str:
    return a.dtype if out_dtype is None else check_dtype(out_dtype)


def matmul(
    a: te.Tensor,
    b: te.Tensor,
    transpose_a: bool = False,
    transpose_b: bool = False,
    out_dtype: str | None = None,
) -> te.Tensor:
    """`T_matmul(i, j) = sum_k A[i, k] * B[k, j]` (A is (K, M) if transpose_a, B (N, K) if
    transpose_b)."""
    op = "matmul"
    check_tensor(a, 2, op, "A")
    check_tensor(b, 2, op, "B")
    dtype = _out_dtype(out_dtype, a)
    m, ka = (a.shape[1], a.shape[0]) if transpose_a else a.shape
    kb, n = (b.shape[1], b.shape[0]) if transpose_b else b.shape
    check(
        ka == kb,
        f"{op}: inner dimensions differ: A {list(a.shape)} (K={ka}) and B {list(b.shape)} (K={kb})",
    )
    k = te.reduce_axis((0, ka), name="k")

    def fcompute(i: te.Expr, j: te.Expr) -> te.Expr:
        x = a[k, i] if transpose_a else a[i, k]
        y = b[j, k] if transpose_b else b[k, j]
        return te.sum(cast_to(x, dtype) * cast_to(y, dtype), axis=k)

    return te.compute((m, n), fcompute, name="T_matmul", tag="matmul")


def dense(
    data: te.Tensor, weight: te.Tensor, bias: te.Tensor | None = None, out_dtype: str | None = None
) -> te.Tensor:
    """`T_dense(i, j) = sum_k data[i, k] * weight[j, k]`; a bias (out,) is added by `T_add`."""
    op = "dense"
    check_tensor(data, 2, op, "data (batch, in)")
    check_tensor(weight, 2, op, "weight (out, in)")
    dtype = _out_dtype(out_dtype, data)
    batch, in_dim = data.shape
    out_dim, w_in = weight.shape
    check(
        in_dim == w_in,
        f"{op}: data has {in_dim} features but weight {list(weight.shape)} expects {w_in}",
    )
    k = te.reduce_axis((0, in_dim), name="k")
    out = te.compute(
        (batch, out_dim),
        lambda i, j: te.sum(cast_to(data[i, k], dtype) * cast_to(weight[j, k], dtype), axis=k),
        name="T_dense",
        tag="dense",
    )
    if bias is None:
        return out
    check_tensor(bias, 1, op, "bias (out,)")
    check(bias.shape[0] == out_dim, f"{op}: bias has {bias.shape[0]} entries, need {out_dim}")
    return add(out, bias)


def batch_matmul(
    a: te.Tensor,
    b: te.Tensor,
    transpose_a: bool = False,
    transpose_b: bool = True,
    out_dtype: str | None = None,
) -> te.Tensor:
    """`T_batch_matmul_XY(b, i, j) = sum_k A[b, i, k] * B[b, j, k]` with TVM's default
    transpose_b=True (B is (batch, N, K)); transpose_b=False takes B as (batch, K, N), and
    transpose_a=True takes A as (batch, K, M). A batch of 1 broadcasts against the other."""
    op = "batch_matmul"
    check_tensor(a, 3, op, "A")
    check_tensor(b, 3, op, "B")
    dtype = _out_dtype(out_dtype, a)
    ba, m, ka = (a.shape[0], a.shape[2], a.shape[1]) if transpose_a else a.shape
    bb, n, kb = b.shape if transpose_b else (b.shape[0], b.shape[2], b.shape[1])
    check(
        ka == kb,
        f"{op}: inner dimensions differ: A {list(a.shape)} (K={ka}) and B {list(b.shape)} (K={kb})",
    )
    check(ba == bb or 1 in (ba, bb), f"{op}: batch sizes {ba} and {bb} do not broadcast")
    k = te.reduce_axis((0, ka), name="k")
    name = f"T_batch_matmul_{'T' if transpose_a else 'N'}{'T' if transpose_b else 'N'}"

    def fcompute(bt: te.Expr, i: te.Expr, j: te.Expr) -> te.Expr:
        xb = 0 if ba == 1 and bb != 1 else bt
        yb = 0 if bb == 1 and ba != 1 else bt
        x = a[xb, k, i] if transpose_a else a[xb, i, k]
        y = b[yb, j, k] if transpose_b else b[yb, k, j]
        return te.sum(cast_to(x, dtype) * cast_to(y, dtype), axis=k)

    # The axis is named `b` as in TVM (the parameter cannot be: `b` is the tensor here).
    return te.compute(
        (max(ba, bb), m, n),
        with_axis_names(("b", "i", "j"), fcompute),
        name=name,
        tag="batch_matmul",
    )


def bias_add(data: te.Tensor, bias: te.Tensor, axis: int = 1) -> te.Tensor:
    """`T_add(ax0, ...) = data[ax0, ...] + bias[ax<axis>]`: a 1-D bias along `axis`."""
    op = "bias_add"
    check_tensor(data, None, op, "data")
    check_tensor(bias, 1, op, "bias")
    (axis,) = normalize_axes(axis, data.ndim, op)
    check(
        bias.shape[0] == data.shape[axis],
        f"{op}: bias has {bias.shape[0]} entries but data axis {axis} has {data.shape[axis]}",
    )
    fcompute = with_axis_names(ax_names(data.ndim), lambda *i: data[i] + bias[i[axis]])
    return te.compute(data.shape, fcompute, name="T_add", tag="broadcast")
