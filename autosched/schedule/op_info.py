"""What the search needs to know about one op: `OpInfo`, computed by `analyse_op`.

Ansor's per-op analysis: whether an op reduces, may be inlined, reuses its inputs (and so needs
multi-level tiling), and how many floating-point operations it performs. The compute DAG holds
it for its own ops; a stage that replaces an op (rfactor's partial sums) asks here.
"""

from __future__ import annotations

from dataclasses import dataclass

from autosched.te.dtype import is_float
from autosched.te.expr import BinOp, Call, Expr, Load, Reduce
from autosched.te.tensor import ComputeOp, Operation, Tensor
from autosched.te.visitor import free_vars, walk

# Math calls that make an op too costly to recompute by inlining (Ansor's "expensive" ops).
EXPENSIVE_CALLS = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "pow"})


@dataclass(frozen=True)
class OpInfo:
    """What the search needs to know about one op."""

    op: Operation
    is_placeholder: bool
    is_output: bool
    has_reduction: bool
    is_injective: bool
    is_strictly_inlineable: bool
    has_data_reuse: bool
    needs_multi_level_tiling: bool
    flop: float


def _float_ops(e: Expr) -> int:
    """Floating-point operations one evaluation of `e` performs (index arithmetic excluded)."""
    n = 0
    for node in walk(e):
        if isinstance(node, BinOp) and is_float(node.a.dtype):
            n += 1
        elif isinstance(node, Call) and is_float(node.dtype):
            n += 1
    return n


def _op_flop(op: Operation) -> float:
    if not isinstance(op, ComputeOp):
        return 0.0
    spatial = 1
    for a in op.axis:
        spatial *= a.extent
    body = op.body
    if isinstance(body, Reduce):
        red = 1
        for a in body.axes:
            red *= a.extent
        per_iter = _float_ops(body.source) + (1 if is_float(body.dtype) else 0)
        return float(spatial * red * per_iter)
    return float(spatial * _float_ops(body))


def analyse_op(op: Operation, is_output: bool) -> OpInfo:
    """What the search needs to know about `op` (the DAG holds it for its own ops; a stage
    that replaces an op, such as rfactor's, asks here)."""
    if not isinstance(op, ComputeOp):
        return OpInfo(op, True, is_output, False, False, False, False, False, 0.0)
    reads: list[tuple[Expr, ...]] = [
        node.indices
        for node in walk(op.body)
        if isinstance(node, Load) and isinstance(node.buffer, Tensor)
    ]
    has_reduction = isinstance(op.body, Reduce)
    expensive = any(isinstance(n, Call) and n.func in EXPENSIVE_CALLS for n in walk(op.body))
    # Data reuse / multi-level tiling (Ansor): count, over all reads, the spatial axes that a
    # read's indices do not mention; every such axis re-reads the same input elements.
    n_missing = 0
    for indices in reads:
        used = {id(v) for i in indices for v in free_vars(i)}
        n_missing += sum(1 for a in op.axis if id(a) not in used)
    has_reuse = has_reduction and n_missing > 0
    return OpInfo(
        op=op,
        is_placeholder=False,
        is_output=is_output,
        has_reduction=has_reduction,
        is_injective=not has_reduction,
        is_strictly_inlineable=not has_reduction and not expensive and not is_output,
        has_data_reuse=has_reuse,
        needs_multi_level_tiling=has_reduction and n_missing >= 2,
        flop=_op_flop(op),
    )


__all__ = ["EXPENSIVE_CALLS", "OpInfo", "analyse_op"]
