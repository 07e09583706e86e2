"""Element-wise formulas models write out by hand, rewritten to the one ATen operator they
compute, so that the epilogue table can fuse them (a registered list of pattern, replacement).

Hugging Face's GPT-2 (`NewGELUActivation`, "gelu_new") spells the tanh approximation of GELU
as eight operators; `aten.gelu(x, approximate="tanh")` is the same function. Patterns are
matched structurally, literals included, by `torch.fx.subgraph_rewriter`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import fx
from torch.fx.subgraph_rewriter import replace_pattern_with_filters

aten = torch.ops.aten

# (pattern, replacement): functions of the same inputs, written with ATen operators
REWRITES: list[tuple[Callable, Callable]] = []


def rewrite(pattern: Callable) -> Callable:
    """Decorator: register `replacement` (the decorated function) for `pattern`."""

    def wrap(replacement: Callable) -> Callable:
        REWRITES.append((pattern, replacement))
        return replacement

    return wrap


def _gelu_tanh_written_out(x):
    inner = aten.add.Tensor(x, aten.mul.Tensor(aten.pow.Tensor_Scalar(x, 3.0), 0.044715))
    t = aten.tanh.default(aten.mul.Tensor(inner, math.sqrt(2.0 / math.pi)))
    return aten.mul.Tensor(aten.mul.Tensor(x, 0.5), aten.add.Tensor(t, 1.0))


@rewrite(_gelu_tanh_written_out)
def _gelu_tanh(x):
    return aten.gelu.default(x, approximate="tanh")


def apply_rewrites(gm: fx.GraphModule) -> int:
    """Rewrite every registered pattern in `gm` in place; the new nodes take the shape and
    dtype (`meta["val"]`) of the nodes they replace. Returns how many were rewritten."""
    count = 0
    for pattern, replacement in REWRITES:
        for match in replace_pattern_with_filters(gm, pattern, replacement):
            old_out = match.anchor
            replaced = match.nodes_map[old_out]
            for node in match.replacements:
                if node.op == "call_function":
                    node.meta["val"] = replaced.meta.get("val")
            count += 1
    if count:
        gm.graph.lint()
        gm.recompile()
    return count
