"""What of a model stays in PyTorch: operators by count, and their share of the model's FLOPs.

FLOPs are counted from shapes for the operators that dominate a forward pass (convolutions,
matrix products, attention); element-wise and data-movement operators count zero. View
operators (reshapes, transposes, indexing) are not listed: they move no data.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from autosched.frontend.graph import op_name

aten = torch.ops.aten


def _shape(arg: Any) -> tuple[int, ...]:
    val = arg.meta.get("val") if isinstance(arg, fx.Node) else None
    return tuple(int(s) for s in val.shape) if isinstance(val, torch.Tensor) else ()


def _conv_flop(node: fx.Node) -> float:
    weight = _shape(node.args[1])
    return 2.0 * math.prod(_shape(node)) * math.prod(weight[1:])


def _product_flop(node: fx.Node) -> float:
    """2 * output elements * the contracted length (the first operand's last axis)."""
    a = node.args[1] if node.target == aten.addmm.default else node.args[0]
    inner = _shape(a)[-1:] or (0,)
    return 2.0 * math.prod(_shape(node)) * inner[0]


def _attention_flop(node: fx.Node) -> float:
    q, k, v = (_shape(a) for a in node.args[:3])
    if not q or not k or not v:
        return 0.0
    scores = math.prod(q[:-1]) * k[-2]
    return 2.0 * scores * q[-1] + 2.0 * scores * v[-1]


FLOP_COUNTERS: dict[Any, Callable[[fx.Node], float]] = {
    aten.conv2d.default: _conv_flop,
    aten.conv2d.padding: _conv_flop,
    aten.convolution.default: _conv_flop,
    aten.linear.default: _product_flop,
    aten.addmm.default: _product_flop,
    aten.mm.default: _product_flop,
    aten.bmm.default: _product_flop,
    aten.matmul.default: _product_flop,
    aten.scaled_dot_product_attention.default: _attention_flop,
}

VIEWS = frozenset(
    f"aten.{name}"
    for name in (
        "view",
        "reshape",
        "_unsafe_view",
        "transpose",
        "t",
        "permute",
        "unsqueeze",
        "squeeze",
        "expand",
        "select",
        "slice",
        "unflatten",
        "flatten",
        "split",
        "chunk",
        "unbind",
        "detach",
        "detach_",
        "alias",
        "_assert_tensor_metadata",
        "lift_fresh_copy",
    )
)


def flop_of(node: fx.Node) -> float:
    """The node's FLOPs (0 for operators not counted)."""
    counter = FLOP_COUNTERS.get(node.target)
    try:
        return counter(node) if counter is not None else 0.0
    except (IndexError, TypeError, ValueError):
        return 0.0


@dataclass
class Coverage:
    """Operators left in PyTorch (name -> count, and their FLOPs) and the model's FLOPs."""

    leftover: Counter[str] = field(default_factory=Counter)
    leftover_flop: dict[str, float] = field(default_factory=dict)
    total_flop: float = 0.0

    @property
    def leftover_share(self) -> float:
        """The fraction of the model's counted FLOPs that stays in PyTorch."""
        return sum(self.leftover_flop.values()) / self.total_flop if self.total_flop else 0.0

    def lines(self) -> list[str]:
        """`stays in PyTorch: ...` and the FLOP share, or that nothing does."""
        if not self.leftover:
            return ["nothing stays in PyTorch"]
        parts = []
        for name, count in self.leftover.most_common():
            flop = self.leftover_flop.get(name, 0.0)
            share = f" ({100 * flop / self.total_flop:.1f}% of FLOPs)" if flop else ""
            parts.append(f"{name} x{count}{share}")
        return [
            "stays in PyTorch: " + ", ".join(parts),
            f"{100 * self.leftover_share:.1f}% of the model's {self.total_flop * 1e-9:.4f} "
            "GFLOP (convolutions, matrix products, attention) stays in PyTorch",
        ]


def coverage(gm: fx.GraphModule, grouped: Iterable[fx.Node]) -> Coverage:
    """The operators of `gm` outside `grouped` (views left out) and the FLOPs of all."""
    inside = set(grouped)
    cov = Coverage()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        flop = flop_of(node)
        cov.total_flop += flop
        name = op_name(node)
        if node in inside or name in VIEWS or name == "getitem":
            continue
        cov.leftover[name] += 1
        cov.leftover_flop[name] = cov.leftover_flop.get(name, 0.0) + flop
    return cov
