"""The init rule `OnlineExchange`: for a softmax whose row is split over a thread-block cluster
(sketch/row_cluster.py), whether its blocks exchange their max and then their sum of
exponentials (two cluster barriers), or their (max, sum) pairs once (online softmax: the
`online_exchange` pragma on the sum; lower/online_exchange.py), with even odds: both forms
stay in the search, which measures them. A centred layer norm over a cluster gets the same
draw: its mean and then its variance, or their (mean, variance) pairs once (Chan's merge).

It touches a stage that sums over a reduction iterator bound to the cluster rank and reads
(through the stages inlined into it) a max reduction bound to the cluster rank too, or sums
the squared deviations from a mean reduced over the cluster (`variance_read`); lowering
checks the rest (the sum is of exp(x - max), one value per block) and refuses a state where
it does not hold. It runs last of the init rules, so the other rules' draws are unchanged.
"""

from __future__ import annotations

from autosched.lower.online_exchange import variance_read
from autosched.schedule.loop_state import State
from autosched.schedule.stage import CLUSTER_RANK_TAG, REDUCE
from autosched.sketch.factorization import pick
from autosched.sketch.init_base import InitRule
from autosched.sketch.utils import is_inlined
from autosched.te.expr import Reduce
from autosched.te.tensor import ComputeOp

PRAGMA = "online_exchange"


def _reduces_over_cluster(state: State, i: int, reducer: str) -> bool:
    stage = state.stages[i]
    body = stage.op.body if isinstance(stage.op, ComputeOp) else None
    return (
        isinstance(body, Reduce)
        and body.reducer.name == reducer
        and any(it.kind == REDUCE and it.annotation == CLUSTER_RANK_TAG for it in stage.iters)
    )


def reads_through_inlined(state: State, i: int) -> set[int]:
    """The stages stage i's op reads, through the stages inlined into it."""
    by_op = {id(s.op): j for j, s in enumerate(state.stages)}
    seen: set[int] = set()
    todo = [i]
    while todo:
        op = state.stages[todo.pop()].op
        for t in getattr(op, "input_tensors", ()):
            j = by_op.get(id(t.op))
            if j is not None and j not in seen:
                seen.add(j)
                if is_inlined(state.stages[j]):
                    todo.append(j)
    return seen


def _centres_on_cluster_mean(state: State, i: int) -> bool:
    """Whether sum stage i is a variance centred on a mean reduced over the cluster too."""
    by_op = {id(s.op): j for j, s in enumerate(state.stages)}

    def body_of(j: int) -> tuple:
        op = state.stages[j].op
        return (op.body, tuple(op.axis)) if isinstance(op, ComputeOp) else (None, ())

    m, _ = variance_read(i, lambda t: by_op.get(id(t.op)), body_of)
    return m is not None and _reduces_over_cluster(state, m, "sum")


def online_candidates(state: State) -> list[int]:
    """The stages the rule draws the pragma for (the module's description)."""
    return [
        i
        for i in range(len(state.stages))
        if _reduces_over_cluster(state, i, "sum")
        and (
            any(_reduces_over_cluster(state, j, "max") for j in reads_through_inlined(state, i))
            or _centres_on_cluster_mean(state, i)
        )
    ]


class OnlineExchange(InitRule):
    """`online_exchange` 0 or 1, with even odds, on each candidate sum (the module's
    description)."""

    def apply(self, ctx, plan, state, rng):
        for i in online_candidates(state):
            state = state.pragma(i, 0, PRAGMA, pick((0, 1), rng))
        return state


__all__ = ["OnlineExchange", "online_candidates", "reads_through_inlined"]
