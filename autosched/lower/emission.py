"""Emission: the kernels of a `LoweringPlan` as loop nests, before any program pass runs.

One root stage becomes one kernel; kernels come in dataflow order. Each stage is emitted as its
loops, the stages attached at each loop emitted at its top (shared ones between barriers, or
fetched one iteration ahead when double-buffered: double_buffer.py), the init of a reduction
before its first reduction loop, and its innermost statement (guards.py) at the bottom. A
reduction bound to threadIdx accumulates per thread, then AllReduces (cross_thread.py); a nest
annotated "tensorize" is one warp-collective Tensor Core statement (tensorize.py).
`auto_unroll_max_step` marks small loop nests `unroll` (unrolling.py).

Nothing is simplified here: an iterator of extent 1 gets no loop, its variable is listed in
`Kernel.unit_vars` and the simplification pass folds it to 0.
"""

from __future__ import annotations

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.bound_inference import root_value_map
from autosched.lower.cluster_launch import cluster_size, clustered
from autosched.lower.cross_thread import cross_thread_tag, emit_cross_thread, partial_of
from autosched.lower.double_buffer import emit_double_buffered, is_double_buffered
from autosched.lower.guards import guards, zero_fills
from autosched.lower.ir import BLOCK_TAGS, THREAD_TAGS
from autosched.lower.plan import NO_LOOP_TAGS, LoweringPlan
from autosched.lower.tensorize import emit_fill, emit_tensorized, tensorize_position
from autosched.lower.tma_fetch import emit_tma_pipeline
from autosched.lower.unrolling import auto_unroll
from autosched.te.expr import Const, Expr, Load, Reduce, Select, Var
from autosched.te.tensor import Tensor
from autosched.te.visitor import rewrite


def value_expr(plan: LoweringPlan, e: Expr, root_map: dict[Var, Expr]) -> Expr:
    """`e` (a stage body) with root vars substituted and loads mapped to IR buffers, in one
    rewrite (a root var is a leaf: it is replaced where it is met, in a load's indices too)."""
    fix = _ValueRewrite(plan, root_map)
    return rewrite(e, fix, fix.memo)


class _ValueRewrite:
    """`value_expr`'s rewrite of one node. A class, not a closure: a closure that rewrites with
    itself is a reference cycle, which would keep the plan alive until the cycle collector
    runs (see `search/collector.py`)."""

    def __init__(self, plan: LoweringPlan, root_map: dict[Var, Expr]) -> None:
        self.plan = plan
        self.by_id = {id(v): value for v, value in root_map.items()}
        # one memo for the body and the indices of its loads, which share the root values
        self.memo: dict[int, Expr] = {}

    def __call__(self, node: Expr) -> Expr | None:
        if isinstance(node, Load) and isinstance(node.buffer, Tensor):
            plan = self.plan
            j = plan.producer_stage[id(node.buffer.op)]
            idx = [rewrite(x, self, self.memo) for x in node.indices]
            is_placeholder = plan.stages[j].is_placeholder
            return Load(plan.info[j].buf, (plan.flat_index(j, idx, not is_placeholder),))
        return self.by_id.get(id(node))


def store_stmt(
    plan: LoweringPlan, i: int, init: bool, into: tuple[ir.Buffer, Expr] | None = None
) -> ir.Stmt:
    """Stage i's innermost statement: its value (a reduction's init or update), guarded;
    `into` (buffer, index) redirects a reduction's accumulator (cross-thread partials)."""
    inf, st = plan.info[i], plan.stages[i]
    root_map = root_value_map(plan, i)
    buffer, idx = into or (
        inf.buf,
        plan.flat_index(i, [inf.value[a.name] for a in plan.compute_op(i).axis], relative=False),
    )
    body = inf.body
    assert body is not None, f"stage {st.name!r} is emitted but computes nothing"
    edges: list[Expr] | None = [] if zero_fills(plan, i) else None
    conds = guards(plan, i, spatial_only=init, edges=edges)
    if isinstance(body, Reduce):
        if init:
            value: Expr = body.identity
        else:
            cur = Load(buffer, (idx,))
            src = value_expr(plan, body.source, root_map)
            value = body.reducer.combine(cur, src)
            if body.condition is not None:
                conds.append(value_expr(plan, body.condition, root_map))
    else:
        value = value_expr(plan, body, root_map)
    if edges:  # past the tensor's edge: 0 (guards.zero_fills)
        value = Select(ir.conjunction(edges), value, Const(0, value.dtype))
    return ir.guarded(ir.Store(buffer, idx, value), conds)


def emit_stage(plan: LoweringPlan, i: int) -> ir.Stmt:
    """Stage i's loop nest, with the stages attached at its loops inside it."""
    st = plan.stages[i]
    stmt = _StageNest(plan, i).nest(0)
    if st.auto_unroll_max_step > 0:
        stmt = auto_unroll(stmt, st.auto_unroll_max_step)
    return stmt


class _StageNest:
    """The loop nest of one stage, emitted from its outermost loop in (`nest(0)`). A class,
    not closures: a closure that calls itself is a reference cycle, which would keep the plan
    alive until the cycle collector runs (see `search/collector.py`)."""

    def __init__(self, plan: LoweringPlan, i: int) -> None:
        st = plan.stages[i]
        self.plan, self.i, self.iters = plan, i, st.iters
        self.is_reduce = isinstance(plan.info[i].body, Reduce)
        self.first_reduce = next(
            (k for k, it in enumerate(self.iters) if it.kind != "spatial"), len(self.iters)
        )
        self.tag = cross_thread_tag(plan, i)
        self.tz = tensorize_position(plan, i)  # the tensorized nest: one warp statement
        if self.tz is not None and self.tag is not None:
            raise LoweringError(f"stage {st.name!r} is tensorized and reduced across threads")

    def init_nest(self, k: int) -> ir.Stmt:
        """A reduction's init from loop k in: its spatial loops around the identity store."""
        plan, i, tz = self.plan, self.i, self.tz
        if tz is not None:
            body, outer = emit_fill(plan, i, tz), self.iters[k:tz]
        else:
            body, outer = store_stmt(plan, i, init=True), self.iters[k:]
        for it in reversed(outer):
            if it.kind == "spatial":
                body = plan.loop(i, it.name, body)
        return body

    def nest(self, k: int) -> ir.Stmt:
        """The nest from loop k in, the stages attached at its loops emitted at their tops."""
        plan, i, iters, tz, tag = self.plan, self.i, self.iters, self.tz, self.tag
        is_reduce, first_reduce = self.is_reduce, self.first_reduce
        if k == tz:
            inner = emit_tensorized(plan, i, tz)
            return ir.seq([self.init_nest(k), inner]) if is_reduce and first_reduce >= k else inner
        if k == len(iters):
            into = partial_of(plan, i) if tag else None
            inner = store_stmt(plan, i, init=False, into=into)
            return ir.seq([self.init_nest(k), inner]) if is_reduce and first_reduce == k else inner
        it = iters[k]
        attached = plan.attached.get((i, it.name), [])
        fetched = [j for j in attached if is_double_buffered(plan, j)]
        parts = [emit_attached(plan, j) for j in attached if j not in fetched]
        loop: ir.Stmt
        if fetched:
            var, ext = plan.var_of(i, it.name), plan.info[i].ext[it.name]
            kind = plan.loop_kind(i, it.name)
            fetch = ir.seq([emit_stage(plan, j) for j in fetched])
            inner = self.nest(k + 1)
            # filled by TMA box copies where the stages ask for it and qualify (tma_fetch.py)
            tma = emit_tma_pipeline(plan, var, ext, kind, fetched, parts, inner)
            loop = tma or emit_double_buffered(plan, var, ext, kind, fetched, fetch, parts, inner)
        else:
            loop = plan.loop(i, it.name, ir.seq(parts + [self.nest(k + 1)]))
        if is_reduce and k == first_reduce:
            if tag is not None:
                return emit_cross_thread(plan, i, k, tag, loop)
            return ir.seq([self.init_nest(k), loop])
        return loop


def emit_attached(plan: LoweringPlan, j: int) -> ir.Stmt:
    """Stage j where it is attached: a shared stage between barriers."""
    stmt = emit_stage(plan, j)
    if plan.info[j].scope == "shared":
        return ir.seq([ir.Barrier(), stmt, ir.Barrier()])
    return stmt


def launch_dims(plan: LoweringPlan, root: int) -> tuple[tuple[int, int, int], dict[str, int]]:
    """The grid of root stage `root`'s kernel and its block extent per threadIdx tag (the
    largest of the stages computed inside it)."""
    grid = dict.fromkeys(BLOCK_TAGS, 1)
    block = dict.fromkeys(THREAD_TAGS, 1)
    for j in plan.subtree(root):
        for it in plan.stages[j].iters:
            e = plan.info[j].ext[it.name]
            if it.annotation in BLOCK_TAGS:
                if j != root:
                    raise LoweringError(
                        f"stage {plan.stages[j].name!r} binds {it.annotation} "
                        "but is not a root stage"
                    )
                grid[it.annotation] = e
            elif it.annotation in THREAD_TAGS:
                block[it.annotation] = max(block[it.annotation], e)
    x, y, z = (grid[tag] for tag in BLOCK_TAGS)
    return (x, y, z), block


def unit_vars(plan: LoweringPlan, root: int) -> tuple[Var, ...]:
    """The variables of the iterators of extent 1 in root stage `root`'s kernel (no loop)."""
    return tuple(
        plan.var_of(j, it.name)
        for j in plan.subtree(root)
        for it in plan.stages[j].iters
        if it.annotation not in NO_LOOP_TAGS and plan.info[j].ext[it.name] == 1
    )


def emit_kernel(plan: LoweringPlan, root: int, name: str) -> ir.Kernel:
    """The kernel of root stage `root`: its launch, the buffers of the stages inside it and
    their loop nests."""
    grid, block = launch_dims(plan, root)
    plan.block_extent = block
    body = emit_stage(plan, root)
    cluster = cluster_size(plan, root)
    if cluster > 1:
        body, grid = clustered(body, grid, cluster)
    inside = plan.subtree(root)
    allocs = [plan.info[j].buf for j in inside[1:]]
    allocs += [b for j in inside for b in plan.extra_allocs.get(j, [])]
    x, y, z = (block[tag] for tag in THREAD_TAGS)
    return ir.Kernel(
        name,
        grid,
        (x, y, z),
        [b for b in allocs if b.scope != "global"],
        body,
        unit_vars=unit_vars(plan, root),
        min_blocks_per_sm=plan.stages[root].launch_min_blocks,
        cluster=cluster,
        stream_reads=plan.stages[root].stream_reads,
        stream_writes=plan.stages[root].stream_writes,
        fast_exp=plan.stages[root].fast_exp,
        warp_specialized=any(plan.stages[j].warp_specialized for j in inside),
        single_pass=plan.stages[root].single_pass,
        narrow_tiles=tuple(plan.info[j].buf.name for j in inside if plan.stages[j].narrow_tile),
    )


def emit_program(plan: LoweringPlan) -> ir.Program:
    """Every root stage's kernel, in dataflow order."""
    kernels: list[ir.Kernel] = []
    for i in plan.kernel_roots():
        kernels.append(emit_kernel(plan, i, f"default_function_kernel{len(kernels) or ''}"))
    return ir.Program(kernels, plan.params + plan.temps, plan.outputs, plan.temps)
