"""The range of every variable of a kernel, which the program passes simplify under."""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower.arith import Bounds
from autosched.lower.cluster_ir import CLUSTER_RANK


def kernel_bounds(kernel: ir.Kernel) -> Bounds:
    """id(Var) -> (lo, hi) for every loop variable (0 .. extent - 1), launch index
    (0 .. its grid or block extent - 1), cluster rank (0 .. cluster - 1, in a cluster kernel)
    and unit variable (0) of `kernel`."""
    bounds: Bounds = {id(v): (0, 0) for v in kernel.unit_vars}
    for s in ir.iter_stmts(kernel.body):
        if isinstance(s, ir.For):
            bounds[id(s.var)] = (0, s.extent - 1)
    launch = zip(ir.LAUNCH_TAGS, (*kernel.grid, *kernel.block), strict=True)
    for tag, extent in launch:
        bounds[id(ir.THREAD_VARS[tag])] = (0, extent - 1)
    if kernel.cluster > 1:
        bounds[id(CLUSTER_RANK)] = (0, kernel.cluster - 1)
    return bounds
