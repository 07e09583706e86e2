"""Normalisations built from reductions: softmax, layer_norm, norm2d.

A reduction must be the whole body of a compute, so each is several ops: the reductions, then
the elementwise ops reading them. A reduction over every axis keeps one axis of extent 1 (ops
of rank 0 are not made).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autosched import te
from autosched.te.expr import Expr, const
from autosched.topi.utils import check, check_tensor, normalize_axes


def _reduced(shape: Sequence[int], axes: tuple[int, ...]) -> tuple[tuple[int, ...], Callable]:
    """The shape left after removing `axes`, and a map from full indices to indices into it."""
    keep = [d for d in range(len(shape)) if d not in axes]
    if not keep:
        return (1,), lambda idx: (0,)
    return tuple(shape[d] for d in keep), lambda idx: tuple(idx[d] for d in keep)


def _expand(idx: Sequence[Expr], axes: tuple[int, ...], ks: Sequence[Expr], ndim: int) -> tuple:
    """Full indices from reduced-shape indices `idx` and reduce axes `ks` at positions `axes`."""
    if len(axes) == ndim:
        return tuple(ks)
    it_idx, it_k = iter(idx), iter(ks)
    return tuple(next(it_k) if d in axes else next(it_idx) for d in range(ndim))


def softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    """TVM's softmax: T_softmax_maxelem, T_softmax_exp, T_softmax_expsum, T_softmax_norm."""
    op = "softmax"
    check_tensor(x, None, op, "x")
    check(x.dtype.startswith("float"), f"{op}: needs a float tensor, got {x.dtype}")
    axes = normalize_axes(axis, x.ndim, op)
    rshape, project = _reduced(x.shape, axes)
    k1 = te.reduce_axis((0, x.shape[axes[0]]), name="k")
    k2 = te.reduce_axis((0, x.shape[axes[0]]), name="k")
    max_elem = te.compute(
        rshape,
        lambda *i: te.max(x[_expand(i, axes, [k1], x.ndim)], axis=k1),
        name="T_softmax_maxelem",
    )
    exp = te.compute(
        x.shape,
        lambda *i: te.exp(x[i] - max_elem[project(i)]),
        name="T_softmax_exp",
        tag="elemwise",
    )
    expsum = te.compute(
        rshape,
        lambda *i: te.sum(exp[_expand(i, axes, [k2], x.ndim)], axis=k2),
        name="T_softmax_expsum",
    )
    return te.compute(
        x.shape,
        lambda *i: exp[i] / expsum[project(i)],
        name="T_softmax_norm",
        tag="softmax_output",
        attrs={"axis": axes[0]},
    )


def layer_norm(
    data: te.Tensor,
    gamma: te.Tensor,
    beta: te.Tensor,
    axis: Any = -1,
    epsilon: float = 1e-5,
    moments: bool = False,
) -> te.Tensor:
    """`(x - mean) * rsqrt(var + epsilon) * gamma + beta` over `axis` (an int or ints).

    Ops: T_layer_norm_mean (sum of x/N), T_layer_norm_var (sum of (x - mean)^2/N, the biased
    variance), T_layer_norm. gamma and beta have the shape of the normalised axes.

    With `moments`, the statistics are one reduction instead: T_layer_norm_moments, the mean
    of x and of x^2 along a last axis of 2, read in one pass over the data (the variance
    E[x^2] - E[x]^2, kept from going below 0). Two passes over a row read it twice: rows too
    long for a block's shared memory then cost one more read from L2 or DRAM each. The
    centred form is the more accurate where the mean is large against the spread.
    """
    if moments:
        return _layer_norm_moments(data, gamma, beta, axis, epsilon)
    axes, count = _layer_norm_checks(data, gamma, beta, axis)
    rshape, project = _reduced(data.shape, axes)
    inv_n = const(1.0 / count, data.dtype)
    ks = [te.reduce_axis((0, data.shape[a]), name=f"k{j}") for j, a in enumerate(axes)]
    vs = [te.reduce_axis((0, data.shape[a]), name=f"k{j}") for j, a in enumerate(axes)]
    mean = te.compute(
        rshape,
        lambda *i: te.sum(data[_expand(i, axes, ks, data.ndim)] * inv_n, axis=ks),
        name="T_layer_norm_mean",
    )

    def centred(i: Sequence[Expr], rs: Sequence[Expr]) -> Expr:
        full = _expand(i, axes, rs, data.ndim)
        return data[full] - mean[project(full)]

    def sq_dev(*i: Expr) -> Expr:
        c = centred(i, vs)
        return te.sum(c * c * inv_n, axis=vs)

    var = te.compute(rshape, sq_dev, name="T_layer_norm_var")

    def normed(*i: Expr) -> Expr:
        g = tuple(i[a] for a in axes)
        scale = te.rsqrt(var[project(i)] + const(epsilon, data.dtype))
        return (data[i] - mean[project(i)]) * scale * gamma[g] + beta[g]

    return te.compute(data.shape, normed, name="T_layer_norm", tag="injective")


def _layer_norm_checks(
    data: te.Tensor, gamma: te.Tensor, beta: te.Tensor, axis: Any
) -> tuple[tuple[int, ...], int]:
    """layer_norm's argument checks: the normalised axes and how many elements each
    normalisation covers."""
    op = "layer_norm"
    check_tensor(data, None, op, "data")
    check(data.dtype.startswith("float"), f"{op}: needs a float tensor, got {data.dtype}")
    axes = normalize_axes(axis, data.ndim, op)
    norm_shape = tuple(data.shape[a] for a in axes)
    for what, t in (("gamma", gamma), ("beta", beta)):
        check_tensor(t, None, op, what)
        check(
            tuple(t.shape) == norm_shape,
            f"{op}: {what} has shape {list(t.shape)}, need {list(norm_shape)} (data axes "
            f"{list(axes)})",
        )
    count = 1
    for s in norm_shape:
        count *= s
    return axes, count


def _layer_norm_moments(
    data: te.Tensor, gamma: te.Tensor, beta: te.Tensor, axis: Any, epsilon: float
) -> te.Tensor:
    """layer_norm with its statistics as one reduction of the first two moments."""
    axes, count = _layer_norm_checks(data, gamma, beta, axis)
    rshape, project = _reduced(data.shape, axes)
    inv_n = const(1.0 / count, data.dtype)
    ks = [te.reduce_axis((0, data.shape[a]), name=f"k{j}") for j, a in enumerate(axes)]

    def moment(*i: Expr) -> Expr:
        x = data[_expand(i[:-1], axes, ks, data.ndim)]
        # x * (1 or x): x also read outside the Select, so that one vector read serves both
        power = te.if_then_else(i[-1] == 1, x, const(1.0, data.dtype))
        return te.sum(x * power * inv_n, axis=ks)

    moments = te.compute(rshape + (2,), moment, name="T_layer_norm_moments")

    def normed(*i: Expr) -> Expr:
        g = tuple(i[a] for a in axes)
        row = project(i)
        mean = moments[row + (0,)]
        var = te.max(moments[row + (1,)] - mean * mean, const(0.0, data.dtype))
        scale = te.rsqrt(var + const(epsilon, data.dtype))
        return (data[i] - mean) * scale * gamma[g] + beta[g]

    return te.compute(data.shape, normed, name="T_layer_norm", tag="injective")


def norm2d(x: te.Tensor, keepdims: bool = False) -> te.Tensor:
    """The Frobenius norm over the last two axes: `T_norm2d_sqsum` then `T_norm2d = sqrt`.

    The output has shape x.shape[:-2] (+ (1, 1) with keepdims; (1,) for a 2-D x without).
    """
    op = "norm2d"
    check_tensor(x, None, op, "x")
    check(x.ndim >= 2, f"{op}: needs at least 2 dimensions, got shape {list(x.shape)}")
    check(x.dtype.startswith("float"), f"{op}: needs a float tensor, got {x.dtype}")
    axes = (x.ndim - 2, x.ndim - 1)
    rshape, _ = _reduced(x.shape, axes)
    if keepdims:
        rshape = tuple(x.shape[:-2]) + (1, 1)
    ks = [te.reduce_axis((0, x.shape[a]), name=f"k{j}") for j, a in enumerate(axes)]
    lead = x.ndim - 2

    def sqsum(*i: Expr) -> Expr:
        v = x[tuple(i[:lead]) + tuple(ks)]
        return te.sum(v * v, axis=ks)

    total = te.compute(rshape, sqsum, name="T_norm2d_sqsum")
    return te.compute(rshape, lambda *i: te.sqrt(total[i]), name="T_norm2d", tag="elemwise")
