"""The lowering plan: what lowering knows about every stage of one State before it emits code.

`planning.make_plan` fills it, step by step (`planning.PLAN_STEPS`); `emission` emits the
kernels from it. Every helper of those two (bound inference, guards, tensorize, cross-thread
reductions, double buffering) takes the plan as its argument, and this module imports none of
them, so nothing imports back.

Besides the per-stage results (`StageInfo`), the plan holds the names and loop variables handed
out so far (a buffer name is unique in the program, a loop variable is one Var per stage
iterator) and the per-kernel context emission sets (`block_extent`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from typing import Any

from autosched.lower import ir
from autosched.lower.cluster_ir import CLUSTER_RANK
from autosched.lower.ir import I32, LAUNCH_TAGS, int32
from autosched.lower.mma_plan import MmaPlan
from autosched.lower.thread_private import PrivateLayout
from autosched.lower.wgmma_operands import canonical_index, tile_dims
from autosched.schedule.loop_state import State
from autosched.schedule.stage import CLUSTER_RANK_TAG, INLINED, ROOT, Stage
from autosched.te.expr import BinOp, Expr, Reduce, Var
from autosched.te.tensor import ComputeOp

# the annotations of iterators that are no loop: launch indices, and the cluster rank (each runs
# once per block, at the block's index)
NO_LOOP_TAGS = (*LAUNCH_TAGS, CLUSTER_RANK_TAG)


@dataclass
class StageInfo:
    """Per-stage results of the planning steps."""

    index: int
    stage: Stage
    body: Expr | None = None  # the expression with cache redirects and inlined stages applied
    reads: set[int] = field(default_factory=set)  # stage ids loaded by the body
    # enclosing loops: (stage id, iterator name)
    context: list[tuple[int, str]] = field(default_factory=list)
    scope: str = "global"
    base: list[Expr] = field(default_factory=list)  # per spatial root axis: Expr of context vars
    region: list[int] = field(default_factory=list)  # per spatial root axis: extent
    ext: dict[str, int] = field(default_factory=dict)  # iterator name -> extent (roots too)
    value: dict[str, Expr] = field(default_factory=dict)  # root name -> offset Expr in leaf vars
    # (value, extent) of split reduce parents
    inner_limits: list[tuple[Expr, int]] = field(default_factory=list)
    # (value, extent) of fused split parts
    fused_limits: list[tuple[Expr, int]] = field(default_factory=list)
    buffer: ir.Buffer | None = None

    @property
    def buf(self) -> ir.Buffer:
        """The stage's buffer, which every stage that is not inlined has once buffers are
        made."""
        assert self.buffer is not None, f"stage {self.stage.name!r} has no buffer yet"
        return self.buffer


@dataclass
class LoweringPlan:
    """Everything lowering derives from one State before and while it emits kernels."""

    state: State
    stages: tuple[Stage, ...]
    info: list[StageInfo]
    producer_stage: dict[int, int]  # id(stage.produces) -> stage index
    # (stage, iterator name) -> its loop variable (var_of), launch indices included
    loop_vars: dict[tuple[int, str], Var] = field(default_factory=dict)
    # (stage, iterator name) -> its annotation (`annotation`: the stages are frozen)
    annotations: dict[tuple[int, str], str] = field(default_factory=dict)
    attached: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    topo_index: dict[int, int] = field(default_factory=dict)  # stage -> place in dataflow order
    taken_names: set[str] = field(default_factory=set)
    params: list[ir.Buffer] = field(default_factory=list)
    outputs: list[ir.Buffer] = field(default_factory=list)
    temps: list[ir.Buffer] = field(default_factory=list)
    extra_allocs: dict[int, list[ir.Buffer]] = field(default_factory=dict)  # cross-thread temps
    block_extent: dict[str, int] = field(default_factory=dict)  # threadIdx tag -> extent, of
    # the kernel being emitted
    fragment_dims: dict[int, tuple[int, int]] = field(default_factory=dict)  # (row, col) dims
    mma_plans: dict[int, MmaPlan] = field(default_factory=dict)  # accumulator stage -> plan
    # shared stages that wgmmas read -> their swizzle: stored in the canonical core-matrix
    # layout, or swizzled, (`wgmma_operands.canonical_index`) instead of row-major
    wgmma_stages: dict[int, str] = field(default_factory=dict)
    # stage -> the ranges its guards test (a `guards.StageRanges`), found on its first guard
    guard_ranges: dict[int, Any] = field(default_factory=dict)
    # thread-private caches (local stages whose iterators bind threadIdx) -> where each thread
    # keeps its elements (`thread_private.py`)
    thread_private: dict[int, PrivateLayout] = field(default_factory=dict)

    @classmethod
    def of(cls, state: State) -> LoweringPlan:
        """An empty plan for `state`: one StageInfo per stage, nothing derived yet."""
        stages = state.stages
        return cls(
            state=state,
            stages=stages,
            info=[StageInfo(i, s) for i, s in enumerate(stages)],
            producer_stage={id(s.produces): i for i, s in enumerate(stages)},
        )

    # ---- queries on the stages ---------------------------------------------------------------
    def compute_op(self, i: int) -> ComputeOp:
        """Stage i's op, a ComputeOp: lowering asks only for the op of a stage that computes
        something (a placeholder computes nothing)."""
        op = self.stages[i].op
        assert isinstance(op, ComputeOp), f"stage {op.name!r} computes nothing"
        return op

    def body(self, i: int) -> Expr:
        """Stage i's resolved body (`planning.resolve_bodies`), which every computed stage has."""
        body = self.info[i].body
        assert body is not None, f"stage {self.stages[i].name!r} has no body"
        return body

    def annotation(self, key: tuple[int, str]) -> str:
        """The annotation of iterator `key` = (stage, iterator name)."""
        got = self.annotations.get(key)
        if got is None:
            st = self.stages[key[0]]
            got = self.annotations[key] = st.iters[st.iter_index(key[1])].annotation
        return got

    def reduction(self, i: int) -> Reduce:
        """Stage i's body, a reduction (asked only of stages known to reduce)."""
        body = self.body(i)
        assert isinstance(body, Reduce), f"stage {self.stages[i].name!r} is no reduction"
        return body

    def attach_point(self, i: int) -> tuple[int, str]:
        """The loop an attached stage i is computed at: (stage, iterator name)."""
        attach = self.stages[i].attach
        assert attach is not None, f"stage {self.stages[i].name!r} is not attached"
        return attach

    def topo_order(self) -> list[int]:
        """The stages that are not inlined, producers before their consumers: read from
        `topo_index` once `planning.order_attached` has set it (the stages' reads are final
        then), sorted from the reads before."""
        if self.topo_index:
            return list(self.topo_index)
        graph = {
            i: set(self.info[i].reads) for i, s in enumerate(self.stages) if s.compute_at != INLINED
        }
        return list(TopologicalSorter(graph).static_order())

    def kernel_roots(self) -> list[int]:
        """The root stages that are not placeholders, one per kernel, in dataflow order."""
        return [
            i
            for i in self.topo_order()
            if not self.stages[i].is_placeholder and self.stages[i].compute_at == ROOT
        ]

    def subtree(self, i: int) -> list[int]:
        """Stage i and every stage computed inside its loops, depth first."""
        out = [i]
        for it in self.stages[i].iters:
            for j in self.attached.get((i, it.name), []):
                out.extend(self.subtree(j))
        return out

    # ---- names and variables -----------------------------------------------------------------
    def var_of(self, i: int, name: str) -> Var:
        """The loop variable of stage i's iterator `name`: a launch index when it is bound to
        one (the cluster rank for `CLUSTER_RANK_TAG`), else one Var per (stage, iterator), made
        on first use."""
        key = (i, name)
        v = self.loop_vars.get(key)
        if v is None:  # the stages are frozen: the answer for a key never changes
            st = self.stages[i]
            ann = self.annotation(key)
            if ann in LAUNCH_TAGS:
                v = ir.THREAD_VARS[ann]
            elif ann == CLUSTER_RANK_TAG:
                v = CLUSTER_RANK
            else:
                v = Var(f"{st.name.replace('.', '_')}_{name}", I32)
            self.loop_vars[key] = v
        return v

    def unique_name(self, name: str) -> str:
        """`name` (dots made underscores), suffixed until no other buffer has it."""
        name = name.replace(".", "_")
        base, k = name, 1
        while name in self.taken_names:
            name, k = f"{base}_{k}", k + 1
        self.taken_names.add(name)
        return name

    # ---- indices and loops -------------------------------------------------------------------
    def flat_index(self, j: int, indices: list[Expr], relative: bool) -> Expr:
        """Flat buffer index of stage j's element at global `indices` (minus its base)."""
        inf = self.info[j]
        shape = inf.buf.shape[len(inf.buf.shape) - len(indices) :]  # past any slots
        if relative and inf.base:
            indices = [BinOp("-", idx, inf.base[d], I32) for d, idx in enumerate(indices)]
        if j in self.thread_private:
            return self.thread_private[j].slot(indices)
        if j in self.wgmma_stages:
            _, col_dim = tile_dims(shape, self.stages[j].name)
            columns = inf.region[col_dim] if len(inf.region) == len(shape) else shape[col_dim]
            swizzle = self.wgmma_stages[j]
            return canonical_index(indices, shape, columns, self.stages[j].name, swizzle)
        flat: Expr | None = None
        for d, idx in enumerate(indices):
            flat = (
                idx
                if flat is None
                else BinOp("+", BinOp("*", flat, int32(shape[d]), I32), idx, I32)
            )
        return flat if flat is not None else int32(0)

    def loop_kind(self, i: int, name: str) -> str:
        """The IR loop kind of stage i's iterator `name` (not bound to a launch index)."""
        kinds = {"unroll": "unroll", "vectorize": "vectorize", "vthread": ir.VTHREAD_KIND}
        return kinds.get(self.annotation((i, name)), "serial")

    def loop(self, i: int, name: str, body: ir.Stmt) -> ir.Stmt:
        """`body` inside the loop of stage i's iterator `name`; no loop for an iterator bound to
        a launch index or the cluster rank, or of extent 1."""
        if self.annotation((i, name)) in NO_LOOP_TAGS:
            return body
        ext = self.info[i].ext[name]
        if ext == 1:
            # No loop: the kernel lists the variable in `unit_vars`, so the simplification
            # pass gives it the range [0, 0] and folds it to 0 everywhere.
            return body
        return ir.For(self.var_of(i, name), ext, self.loop_kind(i, name), body)


def plan_text(plan: LoweringPlan) -> str:
    """A readable dump of what planning derived for every stage that is computed (for tests
    and debugging, as `ir_text.program_text` is for programs): its scope and loop context, the
    stages it reads, its region, its iterator extents and its buffer."""
    out: list[str] = []
    for i in plan.topo_order():
        st, inf = plan.stages[i], plan.info[i]
        if st.is_placeholder:
            continue
        where = "root"
        if inf.context:
            j, name = inf.context[-1]
            where = f"{plan.stages[j].name}.{name}"
        reads = ", ".join(plan.stages[j].name for j in sorted(inf.reads))
        out.append(f"stage {st.name} ({inf.scope}) at {where}; reads {reads or 'nothing'}")
        if inf.context:
            base = ", ".join(repr(b) for b in inf.base)
            out.append(f"  region {inf.region} from [{base}]")
        out.append("  extents " + ", ".join(f"{it.name}={inf.ext[it.name]}" for it in st.iters))
        if inf.buffer is not None:
            b = inf.buffer
            slots = " (async copy)" if b.async_copy else ""
            slots += " (thread-private)" if b.thread_private else ""
            out.append(f"  buffer {b.name}{list(b.shape)} {b.dtype}{slots}")
        if i in plan.fragment_dims:
            out.append(f"  fragment tiled over dimensions {plan.fragment_dims[i]}")
    return "\n".join(out)
