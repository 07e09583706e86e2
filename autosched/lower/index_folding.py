"""Index-digit folding: the device pass that recombines the per-axis digits of flat indices."""

from __future__ import annotations

import dataclasses

from autosched.lower import ir, stmt_walk
from autosched.lower.digit_folding import fold_digits
from autosched.lower.kernel_ranges import kernel_bounds
from autosched.te.expr import Expr, Load
from autosched.te.visitor import rewrite


def fold_index_digits(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with the digits of every store and load index folded (`digit_folding.fold_digits`,
    under the loops' and launch indices' ranges): the per-axis decomposition
    `(f // 72)*72 + ((f // 9) % 8)*9 + ... + f % 3` of a cooperative fetch becomes `f`, which
    saves the device the divisions and the registers that hold their results."""
    bounds = kernel_bounds(kernel)

    def fold_loads(e: Expr) -> Expr:
        return rewrite(
            e,
            lambda n: (
                Load(n.buffer, [fold_digits(i, bounds) for i in n.indices])
                if isinstance(n, Load)
                else None
            ),
        )

    body = stmt_walk.map_exprs(kernel.body, lambda e: fold_digits(fold_loads(e), bounds))
    return dataclasses.replace(kernel, allocs=list(kernel.allocs), body=body)
