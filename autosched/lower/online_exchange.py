"""One cluster exchange for a softmax's max and sum of exponentials (online softmax), or for a
centred layer norm's mean and variance (Chan's merge).

A softmax whose row is split over a thread-block cluster (sketch/row_cluster.py) reduces its
row twice: the max m, then the sum of exp(x - m). Exchanged one after the other
(`cross_thread.cluster_exchange`), each takes a cluster barrier, and the sum's block-local
part waits for the row's max. With `Stage.online_exchange` on the sum, each block instead sums
exp(x - m_b) with its own block's max m_b, publishes the pair (m_b, s_b), and after ONE cluster
barrier every block folds the pairs of the cluster: M = max_b m_b, S = sum_b s_b exp(m_b - M)
(exact: exp(x - m_b) exp(m_b - M) = exp(x - M)). The max stage's exchange is then made by
the sum (`cross_thread.exchanging_partner`): it publishes its block's max and stores it for the sum
to read, and the sum's fold stores the row's max in its place for the stages after.

`max_read` finds the pattern: a sum of exp(a - m[...]), m a stage's tensor that `a` does not
read. `cross_thread.online_partner` checks the rest where a stage asks for the exchange (m a
cross-thread max over the same cluster, computed at the same loop, one value per thread block,
every other reader of m reading the sum too, so that it runs after the fold), and lowering
refuses the state where it does not hold.

A centred layer norm's variance, a sum of (a - m[...])^2 k with m a sum of a k' (its mean), is
the same: exchanged after its mean, it waits for a second barrier. With `online_exchange` on the
variance each block centres its part on its own block's mean mu_b = p_b / (k' n_b) (p_b its
block's part of m, n_b = N / C its elements), sums q_b = sum (a - mu_b)^2 k, publishes the pair
(p_b, q_b), and after ONE barrier folds M = sum_b p_b and V = sum_b q_b + k n_b (mu_b - M)^2
(exact: sum (a - c)^2 = sum (a - mu_b)^2 + n_b (mu_b - c)^2 over a block, for any c). The mean
stage stores mu_b for the variance to read (`block_mean_scale`), and the fold stores M in its
place. `variance_read` finds the pattern (`mean_scale` checks that m is a's sum times k').
"""

from __future__ import annotations

from collections.abc import Callable

from autosched.lower import ir
from autosched.lower.cluster_ir import ClusterLoad
from autosched.lower.ir import I32, int32
from autosched.lower.plan import LoweringPlan
from autosched.te.expr import BinOp, Call, Const, Expr, Load, Reduce, Var
from autosched.te.reduce import BUILTIN_REDUCERS
from autosched.te.tensor import Tensor
from autosched.te.visitor import substitute, walk

# the kinds of pair one exchange folds: a softmax's (max, sum of exponentials) and a centred
# layer norm's (mean, variance)
SOFTMAX, VARIANCE = "softmax", "variance"


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


def _times_const(e: Expr) -> tuple[Expr, float]:
    """(f, k) where `e` is f * k or k * f with k a literal; (e, 1.0) otherwise."""
    if isinstance(e, BinOp) and e.op == "*":
        if isinstance(e.b, Const):
            return e.a, float(e.b.value)
        if isinstance(e.a, Const):
            return e.b, float(e.a.value)
    return e, 1.0


def _squared_deviation(source: Expr) -> tuple[Expr, Load, float] | None:
    """(a, the load of m, k) where `source` is (a - m[...]) * (a - m[...]) * k (k a literal,
    or none), a not reading m's buffer; None otherwise."""
    square, k = _times_const(source)
    if not (isinstance(square, BinOp) and square.op == "*" and square.a.same_as(square.b)):
        return None
    d = square.a
    if not (isinstance(d, BinOp) and d.op == "-" and isinstance(d.b, Load)):
        return None
    if any(isinstance(n, Load) and n.buffer is d.b.buffer for n in walk(d.a)):
        return None
    return d.a, d.b, k


# a stage's body and spatial axes, as the caller sees them (lowering's resolved body; the op's)
BodyOf = Callable[[int], tuple[Expr | None, tuple]]


def _corresponding(ours: tuple, theirs: tuple) -> bool:
    return len(ours) == len(theirs) and all(
        p.extent == q.extent for p, q in zip(ours, theirs, strict=True)
    )


def mean_scale(
    mean: Expr | None, mean_axes: tuple, a: Expr, body: Reduce, axes: tuple
) -> float | None:
    """k' where `mean` (spatial axes `mean_axes`) is an unconditional sum of a * k' (k' a
    literal, or none), a the expression that sum `body` (spatial axes `axes`) centres, its axes
    corresponding one to one, by position and extent, to those of `body`; None otherwise."""
    if not (isinstance(mean, Reduce) and mean.reducer is BUILTIN_REDUCERS["sum"]):
        return None
    if mean.condition is not None:
        return None
    if not (_corresponding(mean.axes, body.axes) and _corresponding(mean_axes, axes)):
        return None
    summed, k = _times_const(mean.source)
    mapping = dict(zip(mean.axes, body.axes, strict=True))
    mapping.update(zip(mean_axes, axes, strict=True))
    return k if substitute(summed, mapping).same_as(a) and k != 0 else None


def variance_read(i: int, producer, body_of: BodyOf) -> tuple[int | None, str]:
    """(the mean stage that stage i's sum centres on, "") or (None, why not); `producer(t)`
    gives the stage of tensor t (None when none), `body_of` each stage's body and axes."""
    body, axes = body_of(i)
    if not isinstance(body, Reduce) or body.reducer is not BUILTIN_REDUCERS["sum"]:
        return None, "it is not a sum"
    if body.condition is not None:
        return None, "it is not an unconditional sum"
    found = _squared_deviation(body.source)
    if found is None:
        return None, "it does not sum (a - m[...])^2"
    a, load, _ = found
    if not isinstance(load.buffer, Tensor):
        return None, "m is not a stage's tensor"
    m = producer(load.buffer)
    if m is None or mean_scale(*body_of(m), a, body, axes) is None:
        return None, "m is not the sum of a (times a literal)"
    return m, ""


def partner_read(plan: LoweringPlan, i: int) -> tuple[int | None, str, str]:
    """(the statistic stage that stage i's sum exchanges with, its kind, "") or (None, "", why
    not): a softmax's max (`max_read`) or a centred variance's mean (`variance_read`)."""
    m, why = max_read(plan, i)
    if m is not None:
        return m, SOFTMAX, ""
    body = plan.info[i].body
    if isinstance(body, Reduce) and isinstance(body.source, Call):
        return None, "", why
    m, why = variance_read(i, lambda t: plan.producer_stage.get(id(t.op)), _resolved(plan))
    return (m, VARIANCE, "") if m is not None else (None, "", why)


def _resolved(plan: LoweringPlan) -> BodyOf:
    """Each stage's body as lowering resolved it (cache reads redirected), and its op's axes."""
    return lambda j: (plan.info[j].body, tuple(getattr(plan.stages[j].op, "axis", ())))


def block_mean_scale(plan: LoweringPlan, m: int, s: int, cluster: int) -> float:
    """What mean stage m's block part p_b is multiplied by to give its block's mean mu_b, for
    variance stage s: 1 / (k' n_b), n_b the block's elements of the row."""
    body = plan.info[s].body
    assert isinstance(body, Reduce)
    found = _squared_deviation(body.source)
    assert found is not None  # online_partner checked it
    _, axes = _resolved(plan)(s)
    k_mean = mean_scale(*_resolved(plan)(m), found[0], body, axes)
    assert k_mean is not None
    return 1.0 / (k_mean * _block_elements(body, cluster))


def _block_elements(body: Reduce, cluster: int) -> int:
    count = 1
    for axis in body.axes:
        count *= axis.extent
    return count // cluster


def chan_fold(plan: LoweringPlan, m: int, s: int, cluster: int) -> list[ir.Stmt]:
    """After the cluster barrier: the row's mean M = sum_b p_b folded into m's result, then
    the variance V = sum_b q_b + k n_b (p_b / (k' n_b) - M)^2 into s's result, from the
    published (p_b, q_b) pairs (`cluster_exchange` made both stages' slots and remote
    temporaries)."""
    zero = int32(0)
    m_red, m_slots, m_got = plan.extra_allocs[m][1:4]
    s_red, s_slots, s_got = plan.extra_allocs[s][1:4]
    dtype = m_red.dtype
    body = plan.info[s].body
    assert isinstance(body, Reduce)
    found = _squared_deviation(body.source)
    assert found is not None  # online_partner checked it
    weight = Const(found[2] * _block_elements(body, cluster), dtype)
    to_mean = Const(block_mean_scale(plan, m, s, cluster), dtype)
    mean, total = Load(m_red, (zero,)), Load(s_red, (zero,))
    got_part, got_sum = Load(m_got, (zero,)), Load(s_got, (zero,))
    mean_rank = Var(plan.unique_name(f"{plan.stages[m].name}_rank"), I32)
    var_rank = Var(plan.unique_name(f"{plan.stages[s].name}_rank"), I32)
    apart = BinOp("-", BinOp("*", got_part, to_mean, dtype), mean, dtype)
    spread = BinOp("*", weight, BinOp("*", apart, apart, dtype), dtype)
    gather_mean = ir.seq(
        [
            ClusterLoad(m_got, zero, m_slots, zero, mean_rank),
            ir.Store(m_red, zero, BinOp("+", mean, got_part, dtype)),
        ]
    )
    gather_pair = ir.seq(
        [
            ClusterLoad(m_got, zero, m_slots, zero, var_rank),
            ClusterLoad(s_got, zero, s_slots, zero, var_rank),
            ir.Store(s_red, zero, BinOp("+", total, BinOp("+", got_sum, spread, dtype), dtype)),
        ]
    )
    return [
        ir.Store(m_red, zero, plan.reduction(m).identity),
        ir.For(mean_rank, cluster, "unroll", gather_mean),
        ir.Store(s_red, zero, plan.reduction(s).identity),
        ir.For(var_rank, cluster, "unroll", gather_pair),
    ]


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


__all__ = [
    "SOFTMAX",
    "VARIANCE",
    "block_mean_scale",
    "chan_fold",
    "max_read",
    "mean_scale",
    "online_fold",
    "partner_read",
    "variance_read",
]
