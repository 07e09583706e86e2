"""One cluster exchange for a softmax's max and sum of exponentials (online softmax).

A softmax whose row is split over a thread-block cluster (sketch/row_cluster.py) reduces its
row twice: the max m, then the sum of exp(x - m). Exchanged one after the other
(`cross_thread.cluster_exchange`), each takes a cluster barrier, and the sum's block-local
part waits for the row's max. With `Stage.online_exchange` on the sum, each block instead sums
exp(x - m_b) with its own block's max m_b, publishes the pair (m_b, s_b), and after ONE cluster
barrier every block folds the pairs of the cluster: M = max_b m_b, S = sum_b s_b exp(m_b - M)
(exact: exp(x - m_b) exp(m_b - M) = exp(x - M)). The max stage's exchange is then made by
the sum (`cross_thread.deferred_max`): it publishes its block's max and stores it for the sum
to read, and the sum's fold stores the row's max in its place for the stages after.

`max_read` finds the pattern: a sum of exp(a - m[...]), m a stage's tensor that `a` does not
read. `cross_thread.online_partner` checks the rest where a stage asks for the exchange (m a
cross-thread max over the same cluster, computed at the same loop, one value per thread block,
every other reader of m reading the sum too, so that it runs after the fold), and lowering
refuses the state where it does not hold.
"""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower.cluster_ir import ClusterLoad
from autosched.lower.ir import I32, int32
from autosched.lower.plan import LoweringPlan
from autosched.te.expr import BinOp, Call, Expr, Load, Reduce, Var
from autosched.te.reduce import BUILTIN_REDUCERS
from autosched.te.tensor import Tensor
from autosched.te.visitor import walk


def max_read(plan: LoweringPlan, i: int) -> tuple[int | None, str]:
    """(the max stage that stage i's sum rescales by, "") or (None, why not)."""
    body = plan.info[i].body
    if not isinstance(body, Reduce):
        return None, "it is no reduction"
    if body.reducer is not BUILTIN_REDUCERS["sum"] or body.condition is not None:
        return None, "it is not an unconditional sum"
    src = body.source
    if not (isinstance(src, Call) and src.func == "exp" and len(src.args) == 1):
        return None, "it does not sum exp(...)"
    arg = src.args[0]
    if not (isinstance(arg, BinOp) and arg.op == "-" and isinstance(arg.b, Load)):
        return None, "it does not sum exp(a - m[...])"
    if not isinstance(arg.b.buffer, Tensor):
        return None, "m is not a stage's tensor"
    m = plan.producer_stage[id(arg.b.buffer.op)]
    if any(isinstance(n, Load) and n.buffer is arg.b.buffer for n in walk(arg.a)):
        return None, "a reads m too"
    return m, ""


def online_fold(plan: LoweringPlan, m: int, s: int, cluster: int) -> list[ir.Stmt]:
    """After the cluster barrier: the row's max folded from the cluster's published maxima
    into m's result, then its sum from the published (max, sum) pairs rescaled to that max
    into s's result (`cluster_exchange` made both stages' slots and remote temporaries)."""
    zero = int32(0)
    m_red, m_slots, m_got = plan.extra_allocs[m][1:4]
    s_red, s_slots, s_got = plan.extra_allocs[s][1:4]
    m_reducer, s_reducer = plan.reduction(m).reducer, plan.reduction(s).reducer
    top, total = Load(m_red, (zero,)), Load(s_red, (zero,))
    got_max, got_sum = Load(m_got, (zero,)), Load(s_got, (zero,))
    max_rank = Var(plan.unique_name(f"{plan.stages[m].name}_rank"), I32)
    sum_rank = Var(plan.unique_name(f"{plan.stages[s].name}_rank"), I32)
    scale: Expr = Call("exp", [BinOp("-", got_max, top, got_max.dtype)], got_max.dtype)
    rescaled = BinOp("*", got_sum, scale, got_sum.dtype)
    gather_max = ir.seq(
        [
            ClusterLoad(m_got, zero, m_slots, zero, max_rank),
            ir.Store(m_red, zero, m_reducer.combine(top, got_max)),
        ]
    )
    gather_pair = ir.seq(
        [
            ClusterLoad(m_got, zero, m_slots, zero, sum_rank),
            ClusterLoad(s_got, zero, s_slots, zero, sum_rank),
            ir.Store(s_red, zero, s_reducer.combine(total, rescaled)),
        ]
    )
    return [
        ir.Store(m_red, zero, plan.reduction(m).identity),
        ir.For(max_rank, cluster, "unroll", gather_max),
        ir.Store(s_red, zero, plan.reduction(s).identity),
        ir.For(sum_rank, cluster, "unroll", gather_pair),
    ]


__all__ = ["max_read", "online_fold"]
