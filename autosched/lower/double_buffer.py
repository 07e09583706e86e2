"""Double buffering: a shared stage fetched one iteration of its attach loop ahead.

Without it, a shared stage attached at loop `k` (the outer reduction tile of a GEMM) is emitted
inside that loop as `barrier; fetch tile k; barrier; compute on tile k`: two barriers per
iteration, and no thread computes while the block waits for global memory. A stage marked
`double_buffer` gets two buffers, slot `k % 2` holding tile k, and the loop becomes

    fetch tile 0 into slot 0
    for k:
        barrier                                   (tile k is complete; slot (k+1)%2 is free)
        if k + 1 < K: fetch tile k+1 into slot (k+1)%2
        compute on slot k%2
    barrier                                       (the last tile's readers are done)

One barrier per iteration suffices: it orders the fetch of tile k (issued during iteration k-1)
before every read of it, and every read of slot (k+1)%2 (during iteration k-1) before the
fetch that overwrites it. The fetch of tile k+1 is issued before the computation on tile k, so
its global loads are in flight during that computation; the CUDA printer issues such copies
asynchronously (`cp.async`, marked on the buffer as `async_copy`) and waits for them at the
next barrier (see `autosched.codegen.async_copy`), which is exactly where the loop needs them.

Deeper pipelines (`Stage.pipeline_stages` = S > 2, CUTLASS's multistage mainloop): S slots,
the first S - 1 tiles fetched before the loop, each in its own cp.async group, and

    for k:
        wait until at most S - 2 groups are in flight   (tile k has landed: `ir.AsyncWait`)
        barrier                                        (tile k visible; slot (k-1)%S is free)
        if k + S - 1 < K: fetch tile k+S-1 into slot (k+S-1)%S
        commit a group (empty past the end, so that every iteration commits one)
        compute on slot k%S
    wait for every group; barrier

so S - 1 tiles are in flight while the block computes. Group g holds tile g; before iteration
k's wait the thread has committed S - 1 + k groups, so leaving S - 2 in flight completes tile
k. The interpreter makes such a kernel's copies visible only at the wait that covers their group
(`ir.AsyncGroupStmt`), so a missing or short wait computes with stale data. Every pipelined
stage of a loop must have the same S.

A stage whose attach loop is bound to a thread index or runs once has nothing to fetch ahead:
its mark is ignored (one buffer, the plain emission). Other stages attached at the same loop
keep their own barriers inside the computation. One attached at a block loop (a row kept in
shared memory, `sketch/row_in_shared.py`) is fetched once per block; its mark makes that fetch
asynchronous (`fetched_async_once`): one buffer, filled by `cp.async` copies that the barrier
after the fetch waits for, so every copy of the row is in flight at once without a register
each.
"""

from __future__ import annotations

from autosched.errors import LoweringError
from autosched.lower import ir, stmt_walk
from autosched.lower.ir import BLOCK_TAGS, I32, int32
from autosched.lower.plan import NO_LOOP_TAGS, LoweringPlan
from autosched.schedule.stage import CLUSTER_RANK_TAG
from autosched.te.expr import BinOp, Expr, Load, Var
from autosched.te.visitor import loads, rewrite, substitute

SLOTS = 2  # the slots of a plain double-buffered stage


def is_double_buffered(plan: LoweringPlan, j: int) -> bool:
    """Whether stage j is emitted double-buffered: marked, shared, attached at a serial loop
    that runs more than once (after bound inference, which gives the loop's extent)."""
    st = plan.stages[j]
    if not st.double_buffer or plan.info[j].scope != "shared" or st.attach is None:
        return False
    target, name = st.attach
    return plan.annotation((target, name)) not in NO_LOOP_TAGS and plan.info[target].ext[name] > 1


def fetched_async_once(plan: LoweringPlan, j: int) -> bool:
    """Whether stage j is a marked shared stage attached at a block loop (or at the cluster
    rank, which is fixed per block too): one buffer, filled asynchronously (`cp.async`) once
    per block."""
    st = plan.stages[j]
    if not st.double_buffer or plan.info[j].scope != "shared" or st.attach is None:
        return False
    return plan.annotation(st.attach) in (*BLOCK_TAGS, CLUSTER_RANK_TAG)


def slots(plan: LoweringPlan, j: int) -> int:
    """The buffers of double-buffered stage j: two, or its pipeline's stages."""
    return max(SLOTS, plan.stages[j].pipeline_stages)


def slot_shape(plan: LoweringPlan, j: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The allocation of stage j: `shape`, with a leading dimension of its slots when the
    stage is double-buffered."""
    return (slots(plan, j), *shape) if is_double_buffered(plan, j) else shape


def _slot_offset(v: Expr, count: int, size: int) -> Expr:
    return BinOp("*", BinOp("floormod", v, int32(count), I32), int32(size), I32)


def _shift_accesses(s: ir.Stmt, offsets: dict[int, Expr]) -> ir.Stmt:
    """`s` with every access of the buffers in `offsets` (by id) moved by their offset: loads,
    stores and the memory tiles of warp statements."""

    fix = _ShiftLoads(offsets)

    def load(e: Expr) -> Expr:
        # an expression without a load of those buffers is its own rewrite: found by one walk
        # for its loads (the guards and indices of the loop body), cheaper than the rewrite
        if not any(id(node.buffer) in offsets for node in loads(e)):
            return e
        return rewrite(e, fix, fix.memo)

    def target(buffer: ir.Buffer, index: Expr):
        delta = offsets.get(id(buffer))
        return buffer, index if delta is None else BinOp("+", index, delta, I32)

    def warp(w: ir.WarpStmt) -> ir.WarpStmt:
        tile = w.memory_tile()
        if tile is None or id(tile.buffer) not in offsets:
            return w
        exprs = w.exprs()
        at = next(k for k, e in enumerate(exprs) if e is tile.offset)
        exprs[at] = BinOp("+", tile.offset, offsets[id(tile.buffer)], I32)
        return w.with_exprs(exprs)

    return stmt_walk.map_exprs(s, load, target, warp)


class _ShiftLoads:
    """`_shift_accesses`' rewrite of one load. A class, not a closure: a closure that rewrites
    with itself is a reference cycle, which would keep what it holds alive until the cycle
    collector runs (see `search/collector.py`)."""

    def __init__(self, offsets: dict[int, Expr]) -> None:
        self.offsets = offsets
        # one memo for every expression of the statement (alive while it is rewritten): the
        # statements share their guards and index terms, rewritten once
        self.memo: dict[int, Expr] = {}

    def __call__(self, node: Expr) -> Expr | None:
        if isinstance(node, Load) and id(node.buffer) in self.offsets:
            (index,) = node.indices
            index = rewrite(index, self, self.memo)
            return Load(node.buffer, (BinOp("+", index, self.offsets[id(node.buffer)], I32),))
        return None


def _at_iteration(s: ir.Stmt, v: Var, value: Expr) -> ir.Stmt:
    """`s` with loop variable `v` replaced by `value`."""
    return stmt_walk.map_exprs(s, lambda e: substitute(e, {v: value}))


def in_slot(
    plan: LoweringPlan, fetched: list[int], count: int, s: ir.Stmt, iteration: Expr
) -> ir.Stmt:
    """`s` with its accesses of the buffers of stages `fetched` (each `count` slots) moved to
    the slot of `iteration`: slot iteration % count."""
    size = {id(plan.info[j].buf): plan.info[j].buf.size // count for j in fetched}
    offsets = {k: _slot_offset(iteration, count, n) for k, n in size.items()}
    return _shift_accesses(s, offsets)


def emit_double_buffered(
    plan: LoweringPlan,
    loop_var: Var,
    extent: int,
    kind: str,
    fetched: list[int],
    fetch: ir.Stmt,
    rest: list[ir.Stmt],
    body: ir.Stmt,
) -> ir.Stmt:
    """The loop `for loop_var < extent` (of `kind`) whose double-buffered stages `fetched`
    (emitted as `fetch`) are fetched one iteration ahead (or, pipelined over S slots, S - 1
    ahead), around the other attached stages `rest` and the loop's `body`."""
    counts = {slots(plan, j) for j in fetched}
    if len(counts) != 1:
        names = [plan.stages[j].name for j in fetched]
        raise LoweringError(
            f"the stages {names} fetched ahead in one loop have different pipeline stages "
            f"({sorted(counts)}); a loop has one pipeline"
        )
    (count,) = counts

    def into_slot(s: ir.Stmt, iteration: Expr) -> ir.Stmt:
        return in_slot(plan, fetched, count, s, iteration)

    def fetch_at(iteration: Expr) -> ir.Stmt:
        return into_slot(_at_iteration(fetch, loop_var, iteration), iteration)

    ahead_by = count - 1
    following = BinOp("+", loop_var, int32(ahead_by), I32)
    ahead = ir.guarded(fetch_at(following), [BinOp("<", following, int32(extent), "bool")])
    compute = into_slot(ir.seq([*rest, body]), loop_var)
    if count == SLOTS:  # waits for the copies at every barrier (codegen/async_copy.py)
        loop = ir.For(loop_var, extent, kind, ir.seq([ir.Barrier(), ahead, compute]))
        return ir.seq([fetch_at(int32(0)), loop, ir.Barrier()])
    prologue: list[ir.Stmt] = []
    for t in range(ahead_by):  # one group per tile, empty past the end
        prologue += [fetch_at(int32(t))] if t < extent else []
        prologue.append(ir.AsyncCommit())
    step = [ir.AsyncWait(ahead_by - 1), ir.Barrier(), ahead, ir.AsyncCommit(), compute]
    loop = ir.For(loop_var, extent, kind, ir.seq(step))
    return ir.seq([*prologue, loop, ir.AsyncWait(0), ir.Barrier()])


__all__ = [
    "emit_double_buffered",
    "fetched_async_once",
    "in_slot",
    "is_double_buffered",
    "slot_shape",
    "slots",
]
