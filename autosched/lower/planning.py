"""Planning: the steps that fill a `LoweringPlan` from a State, before any code is emitted.

  resolve_bodies      each stage's expression with cache redirects and inlined stages applied
  build_attach_tree   which stages are computed inside which loop (their loop context), and
                      the scope of each stage's buffer
  order_attached      the stages attached at one loop, in dataflow order
  infer_bounds        consumers first: the region each attached stage must compute per
                      iteration of its attach loop, then its iterator extents
                      (bound_inference.py)
  plan_thread_private the layout of each thread-private cache, and the check that its readers
                      read only their own thread's elements (thread_private.py)
  check_online_exchanges  every stage asking for one (max, sum) exchange can make it
                      (cross_thread.online_partner; online_exchange.py)
  make_buffers        the program's parameters and temporaries, every stage's buffer
  plan_fragments      the tiled dimensions of Tensor Core fragments (tensorize.py)

PLAN_STEPS lists them in order; each reads what the ones before it filled.
"""

from __future__ import annotations

from collections.abc import Callable

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.arith import simplify
from autosched.lower.bound_inference import (
    infer_bounds,
    loop_bounds,
    root_value_map,
    tensor_loads,
)
from autosched.lower.cross_thread import online_partner
from autosched.lower.double_buffer import fetched_async_once, is_double_buffered, slot_shape
from autosched.lower.ir import BLOCK_TAGS, THREAD_TAGS
from autosched.lower.plan import LoweringPlan
from autosched.lower.storage import storage_shape
from autosched.lower.tensorize import plan_fragments
from autosched.lower.thread_private import is_thread_private, private_layout
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, INLINED, ROOT
from autosched.te.expr import BinOp, Const, Expr, Load
from autosched.te.tensor import ComputeOp, Tensor
from autosched.te.visitor import rewrite, substitute


def resolve_bodies(plan: LoweringPlan) -> None:
    """Every computed stage's body, with loads redirected to the stage that produces what they
    read (following cache redirects) and inlined stages substituted; and the stages it reads."""
    bodies = _Bodies(plan)
    for i, st in enumerate(plan.stages):
        if isinstance(st.op, ComputeOp) and st.compute_at != INLINED:
            b = bodies.body(i)
            plan.info[i].body = b
            for node in tensor_loads(b):
                plan.info[i].reads.add(plan.producer_stage[id(node.buffer.op)])


class _Bodies:
    """`resolve_bodies`' resolved body of each stage, made once (an inlined stage's is
    substituted into each reader). Classes, not closures: a closure that rewrites with itself
    is a reference cycle, which would keep the plan alive until the cycle collector runs (see
    `search/collector.py`)."""

    def __init__(self, plan: LoweringPlan) -> None:
        self.plan = plan
        self.memo: dict[int, Expr] = {}

    def body(self, i: int) -> Expr:
        """Stage i's body with its loads redirected and inlined stages substituted."""
        got = self.memo.get(i)
        if got is None:
            got = self.memo[i] = rewrite(self.plan.compute_op(i).body, _RedirectLoads(self, i))
        return got


class _RedirectLoads:
    """The rewrite of one stage's loads: to the stage that produces what they read."""

    def __init__(self, bodies: _Bodies, i: int) -> None:
        self.bodies, self.i = bodies, i
        self.redirect = {id(a): b for a, b in bodies.plan.stages[i].redirects}

    def __call__(self, node: Expr) -> Expr | None:
        if not (isinstance(node, Load) and isinstance(node.buffer, Tensor)):
            return None
        plan = self.bodies.plan
        op = node.buffer.op
        while id(op) in self.redirect:  # a cache of a cache: follow the chain
            op = self.redirect[id(op)]
        j = plan.producer_stage.get(id(op))
        if j is None:
            raise LoweringError(
                f"stage {plan.stages[self.i].name!r} reads {op.name!r}, which no stage produces"
            )
        idx = tuple(rewrite(x, self) for x in node.indices)
        src = plan.stages[j]
        if src.compute_at == INLINED:
            inner = self.bodies.body(j)
            return substitute(inner, dict(zip(plan.compute_op(j).axis, idx, strict=True)))
        return Load(src.produces.output(0), idx)


def build_attach_tree(plan: LoweringPlan) -> None:
    """`plan.attached` (the stages computed at each loop) and every stage's loop context and
    scope."""
    stages = plan.stages
    for i, st in enumerate(stages):
        if st.compute_at == ATTACHED:
            t, name = plan.attach_point(i)
            if stages[t].compute_at == INLINED:
                raise LoweringError(
                    f"stage {st.name!r} is computed at inlined stage {stages[t].name!r}"
                )
            plan.attached.setdefault((t, name), []).append(i)
    for i in plan.topo_order():
        plan.info[i].context = context_of(plan, i)
        plan.info[i].scope = scope_of(plan, i)


def context_of(plan: LoweringPlan, i: int, depth: int = 0) -> list[tuple[int, str]]:
    """The loops stage i is computed inside, outermost first: (stage, iterator name)."""
    st = plan.stages[i]
    if st.compute_at != ATTACHED:
        return []
    if depth > len(plan.stages):
        raise LoweringError("compute_at chain forms a cycle")
    t, name = plan.attach_point(i)
    target = plan.stages[t]
    pos = target.iter_index(name)
    return context_of(plan, t, depth + 1) + [(t, it.name) for it in target.iters[: pos + 1]]


def scope_of(plan: LoweringPlan, i: int) -> str:
    """Stage i's memory scope: a cache stage's own, else by the loops it is computed inside
    (in a thread loop: local, in a block loop: shared, else global)."""
    st = plan.stages[i]
    if st.origin in ("cache_read", "cache_write"):
        scope = st.scope
    else:
        anns = {plan.annotation(k) for k in plan.info[i].context}
        if anns.intersection(THREAD_TAGS):
            scope = "local"
        else:
            scope = "shared" if anns.intersection(BLOCK_TAGS) else "global"
    if st.compute_at == ROOT and scope != "global":
        raise LoweringError(
            f"stage {st.name!r} has scope {scope!r} but is computed at root; compute it at a "
            "loop inside the thread block (compute_at)"
        )
    return scope


def order_attached(plan: LoweringPlan) -> None:
    """`plan.topo_index`, and the stages attached at each loop sorted by it (producers are
    emitted before their consumers)."""
    plan.topo_index = {i: k for k, i in enumerate(plan.topo_order())}
    for key in plan.attached:
        plan.attached[key].sort(key=lambda j: plan.topo_index[j])


def plan_thread_private(plan: LoweringPlan) -> None:
    """Each thread-private cache's layout (`plan.thread_private`); raises LoweringError where
    a stage reads such a cache at an element its own thread does not hold: the thread index
    that holds it, in the reader's loop variables, must simplify to the reader's own."""
    for i, st in enumerate(plan.stages):
        if st.compute_at == INLINED or not is_thread_private(st, plan.info[i].scope):
            continue
        plan.thread_private[i] = layout = private_layout(st, plan.info[i].ext)
        base = plan.info[i].base
        for j in (j for j, other in enumerate(plan.info) if i in other.reads):
            loops = plan.info[j].context + [(j, it.name) for it in plan.stages[j].iters]
            bounds = loop_bounds(plan, loops)
            root_map = root_value_map(plan, j)
            for node in tensor_loads(plan.body(j)):
                if node.buffer.op is not st.produces:
                    continue
                coords: list[Expr] = [
                    BinOp("-", substitute(x, root_map), b, ir.I32)
                    for x, b in zip(node.indices, base, strict=True)
                ]
                for tag, holder in layout.owners(coords).items():
                    off = simplify(BinOp("-", holder, ir.THREAD_VARS[tag], ir.I32), bounds)
                    if not (isinstance(off, Const) and off.value == 0):
                        got = simplify(holder, bounds)
                        raise LoweringError(
                            f"stage {plan.stages[j].name!r} reads thread-private cache "
                            f"{st.name!r} at elements that {tag} {got!r} holds, not its own "
                            f"{tag}: cut its loops as the cache's are"
                        )


def check_online_exchanges(plan: LoweringPlan) -> None:
    """Raise LoweringError where a stage asks for `online_exchange` but cannot make it (before
    emission, which would otherwise emit its two-round form where it is no cross-thread
    reduction)."""
    for i, st in enumerate(plan.stages):
        if st.online_exchange:
            online_partner(plan, i)


def make_buffers(plan: LoweringPlan) -> None:
    """The program's buffers: a parameter per DAG tensor (the outputs among them), a global
    temporary per other root stage, and every attached stage's buffer of its scope and region
    (padded rows for shared stages, two slots for double-buffered ones)."""
    dag = plan.state.dag
    by_op: dict[int, ir.Buffer] = {}
    unique = plan.unique_name
    for t in dag.tensors:
        b = ir.Buffer(unique(t.name), tuple(t.shape), t.dtype, "global")
        by_op[id(t.op)] = b
        plan.params.append(b)
        if id(t.op) in {id(o) for o in dag.outputs}:
            plan.outputs.append(b)
    for i, st in enumerate(plan.stages):
        if st.compute_at == INLINED:
            continue
        inf = plan.info[i]
        got = by_op.get(id(st.produces))
        if got is not None:
            inf.buffer = got
            if st.compute_at != ROOT:
                raise LoweringError(f"output/input stage {st.name!r} must be computed at root")
            continue
        if inf.scope == "global":
            b = ir.Buffer(
                unique(st.name),
                tuple(a.extent for a in plan.compute_op(i).axis),
                st.op.dtype,
                "global",
            )
            plan.temps.append(b)
            if st.compute_at != ROOT:
                raise LoweringError(f"stage {st.name!r} is attached outside any thread binding")
        elif i in plan.thread_private:  # each thread's own elements (thread_private.py)
            size = plan.thread_private[i].size
            b = ir.Buffer(unique(st.name), (size,), st.op.dtype, "local", thread_private=True)
        else:
            shape = tuple(inf.region)
            if inf.scope == "shared":  # padded rows (storage.py); guards stay on the region
                # a TMA-fed stage is stored in the copy engine's swizzled lines, which the
                # padding would break and whose swizzle already spreads the banks
                align = None if st.operand_copy == "tma" else st.storage_align
                shape = slot_shape(plan, i, storage_shape(shape, align))
            # two slots, or one fetched once per block: filled by asynchronous copies
            # (double_buffer.py)
            copies = is_double_buffered(plan, i) or fetched_async_once(plan, i)
            b = ir.Buffer(unique(st.name), shape, st.op.dtype, inf.scope, async_copy=copies)
        inf.buffer = b


# The planning steps, in the order they run.
PLAN_STEPS: tuple[Callable[[LoweringPlan], None], ...] = (
    resolve_bodies,
    build_attach_tree,
    order_attached,
    infer_bounds,
    plan_thread_private,
    check_online_exchanges,
    make_buffers,
    plan_fragments,
)


def make_plan(state: State) -> LoweringPlan:
    """The lowering plan of a complete State: PLAN_STEPS run in order on an empty plan."""
    if not state.is_complete:
        raise LoweringError("cannot lower a sketch: some tile sizes are still unknown")
    plan = LoweringPlan.of(state)
    for step in PLAN_STEPS:
        step(plan)
    return plan
