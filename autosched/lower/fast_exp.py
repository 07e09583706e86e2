"""Fast exponentials: the device pass `approximate_exp` of a kernel marked `fast_exp`.

A softmax over a row kept in registers computes two exponentials per element (the sum's, then
the output's), in the phase between the row's loads and its stores, when no load is in flight
to hide them behind. `expf` is a short polynomial sequence; `__expf` is one multiply by log2(e)
and the special-function unit's `ex2.approx`, as the hand-written kernels of long rows use. Its
error grows with |x| (the multiply's rounding, scaled by x): a few float32 ulps for the
arguments a softmax gives it (x - max <= 0, exp underflowing below -88), within the tolerance
that the search's check of every measured kernel applies.

It is a drawn, recorded choice (the `fast_exp` pragma on the kernel's root stage; init rule
sketch/fast_exp.py), never a global switch: this pass rewrites each float32 `exp` call of a
marked kernel into `FAST_EXP`, which the CUDA printer prints as `__expf` and the interpreter
evaluates as the device does (te/npeval.py: a float32 multiply by log2(e), then 2 to that
power), so its results are checked against the tolerance on the CPU too. A device pass: the
analysis program, and the cost model's features, are those of the exact form.
"""

from __future__ import annotations

import dataclasses

from autosched.lower import ir, stmt_walk
from autosched.te.expr import Call, Expr
from autosched.te.visitor import rewrite

# the IR call of the fast exponential (the printer's `__expf`; npeval's emulation)
FAST_EXP = "fast_exp"
# the dtype whose exponentials have a fast form
FAST_EXP_DTYPE = "float32"


def _fast(e: Expr) -> Expr | None:
    if isinstance(e, Call) and e.func == "exp" and e.dtype == FAST_EXP_DTYPE:
        return Call(FAST_EXP, [rewrite(a, _fast) for a in e.args], e.dtype)
    return None


def approximate_exp(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with its float32 exponentials fast ones where it is marked `fast_exp`; any
    other kernel as it is."""
    if not kernel.fast_exp:
        return kernel
    body = stmt_walk.map_exprs(kernel.body, lambda e: rewrite(e, _fast))
    return dataclasses.replace(kernel, allocs=list(kernel.allocs), body=body)


__all__ = ["FAST_EXP", "FAST_EXP_DTYPE", "approximate_exp"]
