"""The hook for fused attention: `aten.scaled_dot_product_attention` as an anchor when
`autosched.topi.attention` exists (imported lazily), else it stays in PyTorch.

The topi function takes q, k, v as (batch * heads, seq, head_dim) placeholders and returns
softmax(q k^T * scale + mask) v; a float mask is broadcast to (batch * heads, Sq, Sk), a boolean
one (True: attend) passed as an additive 0 / -inf. Dropout and grouped-query attention stay in
PyTorch.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any

import torch
from torch import fx

from autosched import te
from autosched.frontend.dag_builder import ACC_DTYPE, ANCHOR_BUILDERS
from autosched.frontend.graph import args_of, constant, operand, register, shape_of
from autosched.frontend.layout import memory_layout
from autosched.frontend.ops import ANCHORS
from autosched.frontend.specs import Anchor, Operand

aten = torch.ops.aten

MODULE = "autosched.topi.attention"


def attention_available() -> bool:
    """Whether `autosched.topi.attention` (fused attention) is there."""
    return MODULE in sys.modules or importlib.util.find_spec(MODULE) is not None


def _build(a: Anchor, t: list[te.Tensor]) -> te.Tensor:
    from autosched.topi.attention import attention  # type: ignore[import-not-found,unused-ignore]

    mask = t[3] if len(t) > 3 else None
    scale, causal = a.attrs["scale"], a.attrs["causal"]
    out: te.Tensor = attention(
        t[0], t[1], t[2], scale=scale, causal=causal, mask=mask, out_dtype=ACC_DTYPE
    )
    return out


ANCHOR_BUILDERS["attention"] = _build


@register(ANCHORS, aten.scaled_dot_product_attention.default)
def _attention(node, gm):
    """softmax(q k^T * scale + mask) v over (batch * heads), when fused attention exists."""
    a = args_of(node)
    if not attention_available() or a["dropout_p"] != 0.0 or a["enable_gqa"]:
        return None
    qs, ks, vs = (shape_of(a[n]) for n in ("query", "key", "value"))
    out = shape_of(node)
    if qs is None or ks is None or vs is None or out is None or len(qs) < 3:
        return None
    if not (len(qs) == len(ks) == len(vs) and qs[:-2] == ks[:-2] == vs[:-2]):
        return None
    batch = math.prod(qs[:-2])
    qkv = [
        operand("q", a["query"], gm, (batch, *qs[-2:])),
        operand("k", a["key"], gm, (batch, *ks[-2:])),
        operand("v", a["value"], gm, (batch, *vs[-2:])),
    ]
    operands = [o for o in qkv if o is not None]
    if len(operands) != 3:
        return None
    for o in operands:  # q, k, v are often transposed views of a projection: read in place
        o.layout = memory_layout(o.node.meta.get("val") if o.node is not None else None, o.shape)
    mask = a["attn_mask"]
    if mask is not None:
        m = _mask_operand(mask, gm, (*qs[:-1], ks[-2]), operands[0].dtype)
        if m is None:
            return None
        operands.append(m)
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(qs[-1])
    attrs = {"scale": float(scale), "causal": bool(a["is_causal"])}
    return Anchor("attention", attrs, operands, (batch, qs[-2], vs[-1]))


def _mask_operand(mask: Any, gm: fx.GraphModule, scores: tuple, dtype: str) -> Operand | None:
    """The mask as an additive (batch * heads, Sq, Sk) operand: a float mask as it is, a
    boolean one (True: attend) as 0 / -inf in the queries' dtype."""
    val = mask.meta.get("val") if isinstance(mask, fx.Node) else None
    value = constant(mask, gm)
    shape = tuple(value.shape) if value is not None else tuple(getattr(val, "shape", ()))
    if not _expands(shape, scores):
        return None
    flat = (math.prod(scores[:-2]), *scores[-2:])
    is_bool = getattr(value if value is not None else val, "dtype", None) == torch.bool
    if not is_bool:
        m = operand("mask", mask, gm, flat)
        if m is not None:
            m.expand = scores
        return m
    if value is not None:
        return Operand("mask", flat, value=value, dtype=dtype, expand=scores, additive=True)
    return Operand("mask", flat, node=mask, dtype=dtype, expand=scores, additive=True)


def _expands(small: tuple, big: tuple) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big), strict=False))
