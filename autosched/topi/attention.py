"""Scaled dot-product attention as one compute DAG: `softmax(Q K^T * scale + mask) V`.

    T_attention_scores  S[b, i, j] = sum_d f32(q[b, i, d]) * f32(k[b, j, d])   (a batch_matmul)
    T_attention_logits  L[b, i, j] = S * scale (+ mask) (causal: -inf where j > i + Skv - Sq)
    T_attention_max     M[b, i]    = max_j L[b, i, j]
    T_attention_exp     E[b, i, j] = exp(L - M)        (M read as 0 where a row is all -inf)
    T_attention_sum     Z[b, i]    = sum_j E[b, i, j]
    T_attention_probs   P[b, i, j] = v.dtype(E / max(Z, 1))
    T_attention_pv      O[b, i, e] = sum_j f32(P[b, i, j]) * f32(v[b, j, e])  (a batch_matmul)
    T_attention         out        = out_dtype(O)

Sums and the softmax are float32 whatever the inputs are. Z is at least 1 wherever a row has one
finite logit (its largest term is exp(0)); a row masked everywhere has M = -inf, every E = 0 and
Z = 0, and `max(Z, 1)` makes its probabilities, and its output, 0 (PyTorch's safe softmax)
instead of 0 / 0.

The probabilities are a stage of their own, in v's dtype, so that the second product is a
product of two loads the Tensor Core rule matches. The sketch rules compute P and its row
reductions inside the second product's kernel, or as one softmax kernel, or inline P, E and L
into that product's shared-memory fetch (`KeepFetchedNormalization`, sketch/softmax_fusion.py).
The division is done on the probabilities, not deferred to O (flash attention's arrangement):
deferred, Z's only reader is the product's epilogue, and no rule computes a row reduction
there, so Z would be a kernel of its own (docs/DESIGN.md, "Attention: one task").
"""

from __future__ import annotations

from autosched import te
from autosched.te.dtype import HALF_DTYPES, check_dtype
from autosched.te.expr import Expr, const
from autosched.topi.utils import cast_to, check, check_tensor

ACCUMULATE = "float32"
FLOAT_DTYPES = HALF_DTYPES | {"float32"}
NEG_INF = const(float("-inf"), ACCUMULATE)


def _check_inputs(q: te.Tensor, k: te.Tensor, v: te.Tensor, mask: te.Tensor | None) -> None:
    op = "attention"
    check_tensor(q, 3, op, "q (batch*heads, Sq, D)")
    check_tensor(k, 3, op, "k (batch*heads, Skv, D)")
    check_tensor(v, 3, op, "v (batch*heads, Skv, Dv)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        check(
            t.dtype in FLOAT_DTYPES,
            f"{op}: {name} must be float16, bfloat16 or float32, got {t.dtype}",
        )
    check(q.dtype == k.dtype, f"{op}: q is {q.dtype} but k is {k.dtype}")
    bh, _, d = q.shape
    check(
        k.shape[0] == bh and k.shape[2] == d,
        f"{op}: k has shape {list(k.shape)}, need ({bh}, Skv, {d}) for q {list(q.shape)}",
    )
    check(
        v.shape[0] == bh and v.shape[1] == k.shape[1],
        f"{op}: v has shape {list(v.shape)}, need ({bh}, {k.shape[1]}, Dv) for k {list(k.shape)}",
    )
    if mask is None:
        return
    check_tensor(mask, 3, op, "mask (batch*heads or 1, Sq, Skv)")
    want = (q.shape[1], k.shape[1])
    check(
        mask.shape[0] in (1, bh) and tuple(mask.shape[1:]) == want,
        f"{op}: mask has shape {list(mask.shape)}, need ({bh} or 1, {want[0]}, {want[1]})",
    )
    check(mask.dtype in FLOAT_DTYPES, f"{op}: mask must be a float tensor, got {mask.dtype}")


def attention(
    q: te.Tensor,
    k: te.Tensor,
    v: te.Tensor,
    *,
    scale: float,
    causal: bool = False,
    mask: te.Tensor | None = None,
    out_dtype: str | None = None,
) -> te.Tensor:
    """`softmax(q k^T * scale + mask) v` per batch-head: q (BH, Sq, D), k (BH, Skv, D),
    v (BH, Skv, Dv); `mask` an additive (BH or 1, Sq, Skv) tensor (a padding mask holds 0 and
    -inf, or a large negative value); `causal` masks key j of query i where j > i + Skv - Sq
    (the queries are the last Sq of Skv positions). Sums and the softmax are float32; the
    output is `out_dtype` (q's dtype by default), shape (BH, Sq, Dv). Ops: see the module."""
    _check_inputs(q, k, v, mask)
    dtype = q.dtype if out_dtype is None else check_dtype(out_dtype)
    check(isinstance(scale, (int, float)), f"attention: scale must be a number, got {scale!r}")
    bh, sq, d = q.shape
    skv, dv = k.shape[1], v.shape[2]
    masked = causal or mask is not None

    kd = te.reduce_axis((0, d), name="d")
    scores = te.compute(
        (bh, sq, skv),
        lambda b, i, j: te.sum(
            cast_to(q[b, i, kd], ACCUMULATE) * cast_to(k[b, j, kd], ACCUMULATE), axis=kd
        ),
        name="T_attention_scores",
        tag="batch_matmul",
    )

    def logit(b: Expr, i: Expr, j: Expr) -> Expr:
        x = scores[b, i, j] * const(float(scale), ACCUMULATE)
        if mask is not None:
            x = x + cast_to(mask[0 if mask.shape[0] == 1 else b, i, j], ACCUMULATE)
        if causal:
            last = i + (skv - sq) if skv != sq else i  # the last key query i may see
            x = te.if_then_else(j <= last, x, NEG_INF)
        return x

    logits = te.compute((bh, sq, skv), logit, name="T_attention_logits", tag="elemwise")
    kj = te.reduce_axis((0, skv), name="j")
    row_max = te.compute(
        (bh, sq), lambda b, i: te.max(logits[b, i, kj], axis=kj), name="T_attention_max"
    )

    def shifted(b: Expr, i: Expr, j: Expr) -> Expr:
        m: Expr = row_max[b, i]
        if masked:  # a row masked everywhere: exp(-inf - 0) = 0, not exp(-inf + inf)
            m = te.if_then_else(m == NEG_INF, const(0.0, ACCUMULATE), m)
        return te.exp(logits[b, i, j] - m)

    exp = te.compute((bh, sq, skv), shifted, name="T_attention_exp", tag="elemwise")
    ks = te.reduce_axis((0, skv), name="j")
    row_sum = te.compute(
        (bh, sq), lambda b, i: te.sum(exp[b, i, ks], axis=ks), name="T_attention_sum"
    )
    one = const(1.0, ACCUMULATE)
    probs = te.compute(
        (bh, sq, skv),
        lambda b, i, j: cast_to(exp[b, i, j] / te.max(row_sum[b, i], one), v.dtype),
        name="T_attention_probs",
        tag="elemwise",
    )
    kv = te.reduce_axis((0, skv), name="j")
    pv = te.compute(
        (bh, sq, dv),
        lambda b, i, e: te.sum(
            cast_to(probs[b, i, kv], ACCUMULATE) * cast_to(v[b, kv, e], ACCUMULATE), axis=kv
        ),
        name="T_attention_pv",
        tag="batch_matmul",
    )
    return te.compute(
        (bh, sq, dv),
        lambda b, i, e: cast_to(pv[b, i, e], dtype),
        name="T_attention",
        tag="attention",
    )


__all__ = ["attention"]
