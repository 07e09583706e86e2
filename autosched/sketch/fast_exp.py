"""The init rule `FastExp`: for a kernel that keeps its rows in registers (a thread-private
cache, lower/thread_private.py; sketch/row_in_shared.py, sketch/row_cluster.py) and computes
float32 exponentials (a softmax), whether they are exact (`expf`) or fast ones (`__expf`, the
`fast_exp` pragma on its root stage; lower/fast_exp.py), with even odds: both stay in the
search, which measures them and checks each kernel's results against the task's tolerance.

Such a kernel computes its exponentials between the row's loads and its stores, with nothing in
flight to hide them behind; a row in shared memory, or read again from L2, leaves the kernel
waiting on memory instead, and keeps the exact form. It runs after OnlineExchange, so the
other rules' draws are unchanged. Off with `SketchParams.fast_exp` False.
"""

from __future__ import annotations

from autosched.lower.fast_exp import FAST_EXP_DTYPE
from autosched.lower.thread_private import is_thread_private
from autosched.schedule.loop_state import State
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.online_exchange import reads_through_inlined
from autosched.sketch.utils import is_inlined
from autosched.te.expr import Call
from autosched.te.tensor import ComputeOp
from autosched.te.visitor import walk

PRAGMA = "fast_exp"


def _computes_exp(state: State, i: int) -> bool:
    op = state.stages[i].op
    body = op.body if isinstance(op, ComputeOp) else None
    return body is not None and any(
        isinstance(n, Call) and n.func == "exp" and n.dtype == FAST_EXP_DTYPE for n in walk(body)
    )


def fast_exp_candidates(state: State) -> list[int]:
    """The root stages the rule draws the pragma for: each one a thread-private cache is
    computed at whose kernel (its own stage, those computed at its loops and the stages they
    inline) computes a float32 exponential."""
    roots = sorted(
        {
            s.attach[0]
            for s in state.stages
            if s.attach is not None and is_thread_private(s, s.scope)
        }
    )
    out = []
    for root in roots:
        kernel = {root} | {
            j for j, s in enumerate(state.stages) if s.attach is not None and s.attach[0] == root
        }
        for j in list(kernel):
            kernel |= {k for k in reads_through_inlined(state, j) if is_inlined(state.stages[k])}
        if any(_computes_exp(state, j) for j in kernel):
            out.append(root)
    return out


class FastExp(InitRule):
    """`fast_exp` 0 or 1, with even odds, on each candidate root (the module's description)."""

    def apply(self, ctx, plan, state, rng):
        if not ctx.params.fast_exp:
            return state
        for root in fast_exp_candidates(state):
            state = state.pragma(root, 0, PRAGMA, pick((0, 1), rng))
        return state


__all__ = ["FastExp", "fast_exp_candidates"]
