"""Bound inference and leaf extents, lowering's passes 3 and 4.

Consumers first, every stage attached at a loop gets the region it must compute per iteration
of that loop: the union, over the loads of its consumers, of the index intervals when the loops
inside the attach point (and the thread loops a shared or global stage serves) run over their
extents. Then each stage's iterator extents are re-derived from its region through its split
and fuse relations, and each root axis is written as an expression of the leaf loop variables.

The functions take the `LoweringPlan` whose per-stage `info` they fill.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.arith import Bounds, MemoBounds
from autosched.lower.intervals import interval, union
from autosched.lower.ir import I32, int32
from autosched.lower.plan import LoweringPlan
from autosched.schedule.stage import ATTACHED, TENSORIZE, FuseRel, SplitRel
from autosched.te.expr import BinOp, Expr, Load, Var
from autosched.te.tensor import Operation, Tensor
from autosched.te.visitor import loads, substitute

# loops a stage computed at them is shared across, by the scope of its buffer
RELAXED_TAGS = {
    "local": frozenset(),
    "shared": frozenset({*ir.THREAD_TAGS, "vthread"}),
    "global": frozenset({*ir.LAUNCH_TAGS, "vthread"}),
}


def tensor_loads(e: Expr) -> list[Load]:
    """The loads of tensors (not of IR buffers) in a stage body."""
    return [n for n in loads(e) if isinstance(n.buffer, Tensor)]


class ConsumerReads:
    """What bound inference reads of the consumers of a plan's attached stages: each consumer's
    loads of tensors with its root values substituted into their indices, made once per
    consumer (a stage that reads several attached stages, a GEMM's two operand tiles, is
    visited for each), and one affine memo for every interval of the plan. Nothing in it
    depends on the stage whose region is sought; a consumer's entry is made on first use,
    once its own bounds are final (consumers come first). The memo is bound-free (an empty
    MemoBounds: intervals simplify under no variable ranges), so it serves every stage."""

    def __init__(self, plan: LoweringPlan) -> None:
        self.plan = plan
        self.memo = MemoBounds({})
        self._loads: dict[int, list[tuple[Operation, list[Expr]]]] = {}

    def loads(self, j: int) -> list[tuple[Operation, list[Expr]]]:
        """Consumer j's tensor loads as (the op read, its indices in global coordinates)."""
        got = self._loads.get(j)
        if got is None:
            root_map = root_value_map(self.plan, j)
            memo: dict[int, Expr] = {}  # the loads share their root values
            got = self._loads[j] = [
                (node.buffer.op, [substitute(x, root_map, memo) for x in node.indices])
                for node in tensor_loads(self.plan.body(j))
            ]
        return got


def infer_bounds(plan: LoweringPlan) -> None:
    """Every non-placeholder stage's base and region, then its extents and root values."""
    reads = ConsumerReads(plan)
    for i in reversed(plan.topo_order()):
        inf = plan.info[i]
        st = plan.stages[i]
        if st.is_placeholder:
            continue
        if st.compute_at == ATTACHED:
            inf.base, inf.region = attached_region(plan, i, reads)
        else:
            inf.base = [int32(0) for _ in plan.compute_op(i).axis]
            inf.region = [a.extent for a in plan.compute_op(i).axis]
        derive_extents(plan, i)


def _split_extents(rel: SplitRel, ext: dict[str, int]) -> None:
    """The extents of a split's children from its parent's: inner factors are capped by what
    is left, the outermost child takes the remaining quotient (rounded up)."""
    rem = ext[rel.parent]
    n = len(rel.lengths)
    if rel.inner_to_outer:
        for k in range(n, 0, -1):
            f = rel.lengths[k - 1]
            ext[rel.children[k]] = min(rem, f)
            rem = -(-rem // f)
        ext[rel.children[0]] = rem
    else:
        for k in range(n):
            f = rel.lengths[k]
            ext[rel.children[k]] = min(rem, f)
            rem = -(-rem // f)
        ext[rel.children[n]] = rem


def derive_extents(plan: LoweringPlan, i: int) -> None:
    """Stage i's iterator extents, root values in leaf variables and reduce-split limits."""
    inf, st = plan.info[i], plan.stages[i]
    ext: dict[str, int] = {}
    for a, r in zip(plan.compute_op(i).axis, inf.region, strict=True):
        ext[a.name] = r
    for a in plan.compute_op(i).reduce_axis:
        ext[a.name] = a.extent
    for rel in st.relations:
        if isinstance(rel, SplitRel):
            _split_extents(rel, ext)
        else:
            ext[rel.fused] = math.prod(ext[c] for c in rel.children)
    inf.ext = ext
    val = leaf_values(plan, i, ext)
    inf.value = {r.name: val[r.name] for r in st.root_iters}
    # A reduce iterator split again by a length that does not divide it: its recomposed
    # value can pass its extent and reach the next outer iteration's range (counted twice).
    reduce_names = {a.name for a in plan.compute_op(i).reduce_axis}
    for rel in st.relations:
        if isinstance(rel, SplitRel) and rel.parent in reduce_names:
            reduce_names.update(rel.children)
    roots = {r.name for r in st.root_iters}
    inf.inner_limits = [
        (val[rel.parent], ext[rel.parent])
        for rel in st.relations
        if isinstance(rel, SplitRel) and rel.parent in reduce_names and rel.parent not in roots
    ]
    # The outermost part of each fused iterator that is not a root axis (a split's inner part):
    # a split of the fused iterator that does not divide it lets that part pass its extent into
    # the next iteration of the loop outside it (a tile whose inner extents were capped at a
    # small tensor's edge, 16 x 17, fused and split by 64 threads), where no guard on the root
    # axes sees it.
    inf.fused_limits = [
        (val[rel.children[0]], ext[rel.children[0]])
        for rel in st.relations
        if isinstance(rel, FuseRel) and rel.children[0] not in roots
    ]


def leaf_values(plan: LoweringPlan, i: int, ext: dict[str, int]) -> dict[str, Expr]:
    """Every iterator of stage i (roots, leaves and between) as an expression of the leaf loop
    variables: the split and fuse relations walked backwards."""
    st = plan.stages[i]
    val: dict[str, Expr] = {it.name: plan.var_of(i, it.name) for it in st.iters}
    for rel in reversed(st.relations):
        if isinstance(rel, FuseRel):
            f = val[rel.fused]
            stride = 1
            for k in range(len(rel.children) - 1, -1, -1):
                c = rel.children[k]
                part = BinOp("floordiv", f, int32(stride), I32) if stride > 1 else f
                if k > 0:
                    part = BinOp("floormod", part, int32(ext[c]), I32)
                val[c] = part
                stride *= ext[c]
        else:
            total: Expr | None = None
            stride = 1
            for k in range(len(rel.children) - 1, -1, -1):
                c = rel.children[k]
                term = val[c] if stride == 1 else BinOp("*", val[c], int32(stride), I32)
                total = term if total is None else BinOp("+", term, total, I32)
                if rel.inner_to_outer:
                    stride *= rel.lengths[k - 1] if k > 0 else 1
                else:
                    stride *= ext[c]
            assert total is not None  # a split has two or more children
            val[rel.parent] = total
    return val


def loop_bounds(plan: LoweringPlan, keys: Iterable[tuple[int, str]]) -> Bounds:
    """Bounds of the variables of the given loops (0 .. extent-1)."""
    out: Bounds = {}
    for j, name in keys:
        v = plan.var_of(j, name)
        e = plan.info[j].ext[name]
        _, hi = out.get(id(v), (0, 0))
        out[id(v)] = (0, max(hi, e - 1))
    return out


def attached_region(
    plan: LoweringPlan, i: int, reads: ConsumerReads | None = None
) -> tuple[list[Expr], list[int]]:
    """Stage i's base (per axis, an expression of its fixed context loops) and region extents:
    what every consumer reads of it per iteration of its attach loop. `reads`: the plan's
    ConsumerReads, shared by the stages of one bound inference (default: its own)."""
    reads = reads or ConsumerReads(plan)
    inf, st = plan.info[i], plan.stages[i]
    ctx = inf.context
    relax_tags = RELAXED_TAGS.get(inf.scope, frozenset())
    fixed = {k for k in ctx if plan.annotation(k) not in relax_tags}
    fixed_vars = {id(plan.var_of(*k)) for k in fixed}
    consumers = [j for j, other in enumerate(plan.info) if i in other.reads]
    if not consumers:
        raise LoweringError(f"stage {st.name!r} is computed at a loop but nothing reads it")
    tensor_op = st.produces
    per_dim: list[list[tuple[Expr, int] | None]] = [[] for _ in plan.compute_op(i).axis]
    for j in consumers:
        cinf = plan.info[j]
        loops = cinf.context + [(j, it.name) for it in plan.stages[j].iters]
        missing = [k for k in fixed if k not in loops]
        if missing:
            raise LoweringError(
                f"stage {st.name!r} is computed inside {plan.stages[ctx[-1][0]].name!r} but "
                f"{plan.stages[j].name!r} reads it outside that loop"
            )
        relaxed: Bounds = {}
        for k in loops:
            v = plan.var_of(*k)
            if id(v) not in fixed_vars:
                e = plan.info[k[0]].ext[k[1]]
                _, hi = relaxed.get(id(v), (0, 0))
                relaxed[id(v)] = (0, max(hi, e - 1))
        for op, indices in reads.loads(j):
            if op is not tensor_op:
                continue
            for d, idx in enumerate(indices):
                per_dim[d].append(interval(idx, relaxed, reads.memo))
    base: list[Expr] = []
    region: list[int] = []
    tiled = tile_dims(plan, i)
    for d, axis in enumerate(plan.compute_op(i).axis):
        got = union(per_dim[d])
        if got is None or got[1] + 1 >= axis.extent:
            base.append(int32(0))
            region.append(axis.extent)
        else:
            base.append(got[0])
            region.append(got[1] + 1)
        if d in tiled:  # whole tiles, past the tensor's edge where it is not a multiple
            region[-1] = -(-region[-1] // tiled[d]) * tiled[d]
    return base, region


def tile_dims(plan: LoweringPlan, i: int) -> dict[int, int]:
    """The dimensions of stage i that Tensor Core statements walk in tiles, with the tile's
    extent in each (16, or the K of a TF32 operand tile, 8): the root axes of its tensorized
    nest, or, for a shared stage a matrix fragment reads (a cache_read, which indexes it
    dimension for dimension), the fragment's. Their regions are rounded up to whole tiles, so
    a padded extent (1000, 77) still gives every tile its memory."""
    st = plan.stages[i]
    pos = next((k for k, it in enumerate(st.iters) if it.annotation == TENSORIZE), None)
    if pos is not None:
        parent = {
            c: rel.parent for rel in st.relations if isinstance(rel, SplitRel) for c in rel.children
        }
        roots: dict[str, int] = {}
        for it in st.iters[pos:]:
            name = it.name
            while name in parent:
                name = parent[name]
            assert it.extent is not None  # a complete state's tensorized nest has its extents
            roots[name] = it.extent
        return {d: roots[a.name] for d, a in enumerate(plan.compute_op(i).axis) if a.name in roots}
    reader = operand_fragment_reader(plan, i) if plan.info[i].scope == "shared" else None
    return tile_dims(plan, reader) if reader is not None else {}


def operand_fragment_reader(plan: LoweringPlan, i: int) -> int | None:
    """The stage of a matrix_a / matrix_b fragment that reads stage i (a Tensor Core operand's
    shared copy), or None."""
    return next(
        (j for j, o in enumerate(plan.info) if i in o.reads and o.scope in ir.OPERAND_SCOPES), None
    )


def root_value_map(plan: LoweringPlan, j: int) -> dict[Var, Expr]:
    """Root axis var -> global index expression (base + offset) for stage j."""
    inf = plan.info[j]
    out: dict[Var, Expr] = {}
    for d, a in enumerate(plan.compute_op(j).axis):
        out[a] = BinOp("+", inf.base[d], inf.value[a.name], I32)
    for a in plan.compute_op(j).reduce_axis:
        v = inf.value[a.name]
        out[a] = BinOp("+", v, int32(a.lo), I32) if a.lo else v
    return out
