"""The conditions under which a stage's innermost statement runs (lowering's guards), and which
stages store 0 past their tensor's edge instead of skipping it."""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower.arith import Bounds, MemoBounds, affine_bounds, expr_bounds, to_affine
from autosched.lower.bound_inference import loop_bounds, operand_fragment_reader
from autosched.lower.ir import I32, THREAD_TAGS, int32
from autosched.lower.plan import LoweringPlan
from autosched.te.expr import BinOp, Expr, Reduce


def guards(
    plan: LoweringPlan,
    i: int,
    spatial_only: bool,
    skip_tag: str | None = None,
    edges: list | None = None,
) -> list[Expr]:
    """Conditions under which stage i's innermost statement is in range: its root values
    inside the region and the tensor (reductions too unless `spatial_only`), and its
    thread indices inside their iterators' extents (but `skip_tag`'s). Given `edges`, the
    spatial tests against the tensor's extent go there instead (a zero-filled stage)."""
    inf, st = plan.info[i], plan.stages[i]
    conds: list[Expr] = []
    edge = conds if edges is None else edges
    ranges = stage_ranges(plan, i)
    for d, a in enumerate(plan.compute_op(i).axis):
        off = inf.value[a.name]
        hi, glo, ghi = ranges.axis(d)
        if hi >= inf.region[d]:
            conds.append(BinOp("<", off, int32(inf.region[d]), "bool"))
        g = BinOp("+", inf.base[d], off, I32)
        if glo < 0:
            edge.append(BinOp(">=", g, int32(0), "bool"))
        if ghi >= a.extent:
            edge.append(BinOp("<", g, int32(a.extent), "bool"))
    # (value, extent) pairs whose value may pass the extent: the reduction axes and split reduce
    # parents (unless `spatial_only`), then the fused parts
    limits = inf.fused_limits
    if not spatial_only:
        reduce_axes = [(inf.value[a.name], a.extent) for a in plan.compute_op(i).reduce_axis]
        limits = reduce_axes + inf.inner_limits + limits
    for value, extent in limits:
        if ranges.upper(value) >= extent:
            conds.append(BinOp("<", value, int32(extent), "bool"))
    own = {it.annotation for it in st.iters}
    bound = [(it.annotation, inf.ext[it.name]) for it in st.iters]
    if inf.scope != "shared":
        # A stage computed inside a consumer's thread loop runs only on the threads that
        # loop covers: when the loop is shorter than the block (a tile that overhangs its
        # extent), the threads past it must not compute (their indices map elsewhere).
        bound += [
            (plan.annotation(key), plan.info[key[0]].ext[key[1]])
            for key in inf.context
            if plan.annotation(key) not in own
        ]
    for tag, extent in bound:
        if tag == skip_tag or tag not in THREAD_TAGS:
            continue
        if extent < plan.block_extent[tag]:  # repeats are dropped by ir.guarded
            conds.append(BinOp("<", ir.THREAD_VARS[tag], int32(extent), "bool"))
    return conds


class StageRanges:
    """The ranges guards test, of one stage's root offsets and limit values while its own and
    its enclosing loops run: found once per stage and read by each of its guards (the init and
    the update of a reduction test the same spatial offsets and fused limits). The keys are the
    plan's own expressions, which live as long as the plan."""

    def __init__(self, bounds: Bounds, offsets: list[Expr], bases: list[Expr]) -> None:
        self.bounds = bounds
        self.offsets, self.bases = offsets, bases  # per axis: the root offset, the region base
        self.axes: dict[int, tuple[float, float, float]] = {}  # axis -> (offset hi, global lo, hi)
        self.uppers: dict[int, tuple[Expr, float]] = {}  # id(value) -> (value, its upper bound)

    def axis(self, d: int) -> tuple[float, float, float]:
        """(upper bound of axis d's offset, lower and upper bound of its base + offset)."""
        got = self.axes.get(d)
        if got is None:
            bounds = self.bounds
            off_affine = to_affine(self.offsets[d], bounds)  # once for both: offset, base + it
            _, hi = affine_bounds(off_affine, bounds)
            glo, ghi = affine_bounds(to_affine(self.bases[d], bounds).add(off_affine), bounds)
            got = self.axes[d] = (hi, glo, ghi)
        return got

    def upper(self, value: Expr) -> float:
        """The upper bound of `value`."""
        got = self.uppers.get(id(value))
        if got is None:
            got = self.uppers[id(value)] = (value, expr_bounds(value, self.bounds)[1])
        return got[1]


def make_stage_ranges(plan: LoweringPlan, i: int) -> StageRanges:
    """Fresh StageRanges of stage i, under the bounds of its enclosing and own loops."""
    inf = plan.info[i]
    keys = inf.context + [(i, it.name) for it in plan.stages[i].iters]
    offsets = [inf.value[a.name] for a in plan.compute_op(i).axis]
    return StageRanges(MemoBounds(loop_bounds(plan, keys)), offsets, list(inf.base))


def stage_ranges(plan: LoweringPlan, i: int) -> StageRanges:
    """Stage i's StageRanges, made on its first guard (emission: its extents are final)."""
    got = plan.guard_ranges.get(i)
    if got is None:
        got = plan.guard_ranges[i] = make_stage_ranges(plan, i)
    return got


def zero_fills(plan: LoweringPlan, i: int) -> bool:
    """Whether stage i stores 0 where its element is past its tensor's edge, rather than
    skipping it: a shared copy that a Tensor Core matrix fragment reads. Its padded tiles
    (rounded up to whole 16x16 tiles, bound_inference.tile_dims) are multiplied whole, so
    an element past the K extent must be 0 where it meets valid outputs; the global read
    past the edge is not made (the Select's untaken side)."""
    if plan.info[i].scope != "shared" or isinstance(plan.info[i].body, Reduce):
        return False
    return operand_fragment_reader(plan, i) is not None


__all__ = ["StageRanges", "guards", "make_stage_ranges", "stage_ranges", "zero_fills"]
