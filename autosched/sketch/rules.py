"""Sketch rules: from a compute DAG's initial state to a few loop-structure skeletons.

Rules are visited for each stage from the last one back to the first (Ansor's order). For a
(state, stage index) pair every rule of `GPU_RULES`, in order, answers `condition`:

  SKIP                 the rule does not apply; try the next one
  APPLY                apply it (its results go on), and also try the next rules on the input
  APPLY_AND_SKIP_REST  apply it and try no other rule for this stage

`apply` returns (new state, next stage index) pairs; a state whose index falls below 0 is a
finished sketch. A sketch's split lengths are unknown (None): the init rules fill them.
Adding a rule is one class (here, or in `reduction_rules` for reductions) plus its place in
`GPU_RULES`; the base class and context are in `rule_base`.
"""

from __future__ import annotations

from typing import ClassVar

from autosched.errors import ScheduleError
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ROOT
from autosched.sketch.cross_block import CrossBlockReduction
from autosched.sketch.reduction_rules import CrossThreadReduction, SplitKReduction
from autosched.sketch.row_cluster import RowOverCluster
from autosched.sketch.row_in_shared import RowInSharedMemory
from autosched.sketch.rule_base import (
    Cond,
    SketchContext,
    SketchRule,
    multi_level_tile,
    outermost_reduce_tile_iter,
)
from autosched.sketch.softmax_fusion import compute_in_product, find_normalization
from autosched.sketch.stage_steps import level_names
from autosched.sketch.tensor_core import (
    build_implicit_gemm_sketch,
    build_tensor_core_sketch,
    match_implicit_gemm,
    match_tensor_core,
)
from autosched.sketch.tensor_core_instruction import WGMMA_ARCHS
from autosched.sketch.utils import (
    consumers,
    direct_producers,
    elementwise_matched_consumer,
    has_cache_write_stage,
    has_cross_thread_reduction,
    has_reduce_iter,
    is_inlined,
    is_output,
    is_tiled,
    needs_multi_level_tiling,
)
from autosched.te.tensor import ComputeOp

__all__ = [
    "Cond",
    "CrossBlockReduction",
    "CrossThreadReduction",
    "SketchContext",
    "SketchRule",
    "SplitKReduction",
    "GPU_RULES",
    "generate",
]


class AlwaysInline(SketchRule):
    """On GPU every element-wise stage that is not an output is inlined (pads, bias adds)."""

    def condition(self, ctx, state, i):
        stage = state.stages[i]
        if (
            stage.is_placeholder
            or is_inlined(stage)
            or is_output(state, i)
            or has_reduce_iter(stage)
            or not isinstance(stage.op, ComputeOp)
            or stage.origin != "dag"
        ):
            return Cond.SKIP
        return Cond.APPLY_AND_SKIP_REST

    def apply(self, ctx, state, i):
        return [(state.compute_inline(i), i - 1)]


class KeepFetchedNormalization(SketchRule):
    """An element-wise stage that only a shared-memory cache of a product reads and that
    depends on row reductions nothing else reads (attention's probabilities, from a softmax's
    max and sum; softmax_fusion.py) is, besides being inlined into the fetch by the next rule:
    kept as its own kernel, whose row loop CrossThreadReduction then computes the reductions
    at (one kernel for the softmax instead of one per reduction); and, when the product is a
    Tensor Core kernel, computed with its reductions at that kernel's block loop, rows on the
    warps and the reductions on each warp's lanes (no kernel for the softmax). APPLY."""

    def condition(self, ctx, state, i):
        return Cond.APPLY if find_normalization(state, i) is not None else Cond.SKIP

    def apply(self, ctx, state, i):
        norm = find_normalization(state, i)
        if norm is None:
            raise ScheduleError(f"stage {state.stages[i].name!r} is not a fetched normalisation")
        fused = compute_in_product(state, i, norm)
        return [(state, i - 1)] + ([(fused, i - 1)] if fused is not None else [])


class AddCacheRead(SketchRule):
    """Copy an input of a multi-level tiled stage into shared memory, attached at the
    outermost reduction tile (the copy is re-done per reduction step)."""

    def condition(self, ctx, state, i):
        stage = state.stages[i]
        if is_inlined(stage) or stage.origin != "dag":
            return Cond.SKIP
        cons = consumers(state, i)
        if len(cons) != 1:
            return Cond.SKIP
        t = cons[0]
        target = state.stages[t]
        if not (needs_multi_level_tiling(state, t) and is_tiled(target)):
            return Cond.SKIP
        if has_cross_thread_reduction(state, t):  # split for threads, not tiled
            return Cond.SKIP
        if i not in direct_producers(state, t):
            return Cond.SKIP
        if outermost_reduce_tile_iter(state, t, ctx.params.n_reduce_levels) is None:
            return Cond.SKIP
        return Cond.APPLY_AND_SKIP_REST

    def apply(self, ctx, state, i):
        t = consumers(state, i)[0]
        state = state.cache_read(i, "shared", [t])
        cache, t = i + 1, t + 1
        at = outermost_reduce_tile_iter(state, t, ctx.params.n_reduce_levels)
        return [(state.compute_at(cache, t, at), i)]


class MultiLevelTilingTensorCore(SketchRule):
    """A float16 / bfloat16 matrix product summed in float32 (matmul, batch_matmul, NHWC conv)
    on the Tensor Cores: accumulator, shared and fragment caches, warp tiles and tensorized
    16x16x16 nests (tensor_core.py); a float32 one too, as TF32 16x16x8 nests, when
    `SketchParams.allow_tf32`. M, N and K need not be multiples of 16 (at least 16 long): they
    are tiled as their next multiple, whole tiles past the edge. No other tiling rule runs on
    a stage it matches. A convolution (two or more output axes read by its input only: its
    pixels) also gets an implicit GEMM sketch, its pixels fused as M (`ImplicitGemmStep`),
    which needs neither a batch of 16 nor an output row of 16."""

    def condition(self, ctx, state, i):
        tf32 = ctx.params.allow_tf32
        found = match_tensor_core(state, i, tf32) or match_implicit_gemm(state, i, tf32)
        return Cond.APPLY_AND_SKIP_REST if found else Cond.SKIP

    def apply(self, ctx, state, i):
        tf32 = ctx.params.allow_tf32
        out = []
        found = match_tensor_core(state, i, tf32)
        if found is not None:
            out.append(build_tensor_core_sketch(state, i, found))
        if match_implicit_gemm(state, i, tf32) is not None:
            out.append(build_implicit_gemm_sketch(state, i, tf32))
            if _pipelines_windows(ctx, state, i):
                out.append(build_implicit_gemm_sketch(state, i, tf32, fuse_window=True))
        if not out:
            raise ScheduleError(f"stage {state.stages[i].name!r} is not a Tensor Core product")
        return out


def _pipelines_windows(ctx, state, i) -> bool:
    """Whether stage i, a convolution, also gets the window-fused implicit GEMM sketch
    (`SketchParams.tma_im2col`): on sm_90, where its window loops run more than once."""
    if not ctx.params.tma_im2col or ctx.hardware.arch not in WGMMA_ARCHS:
        return False
    window = [a for a in state.stages[i].op.reduce_axis if a.extent > 1]
    return len(window) > 1


class AddCacheWrite(SketchRule):
    """A stage to tile with no element-wise consumer to fuse computes into a `local` buffer
    first; its copy-out stage is then the consumer it fuses with."""

    def condition(self, ctx, state, i):
        if (
            needs_multi_level_tiling(state, i)
            and not is_tiled(state.stages[i])
            and not has_cache_write_stage(state, i)
            and elementwise_matched_consumer(state, i) is None
        ):
            return Cond.APPLY_AND_SKIP_REST
        return Cond.SKIP

    def apply(self, ctx, state, i):
        return [(state.cache_write(i, "local"), i)]


class MultiLevelTilingWithFusion(SketchRule):
    """Tile the stage (`SSSRRSRS`), tile its element-wise consumer alike at the first three
    spatial levels (block, vthread, thread) and compute the stage inside the consumer's
    thread-level tile."""

    follow_levels: ClassVar[int] = 3

    def condition(self, ctx, state, i):
        if not needs_multi_level_tiling(state, i) or is_tiled(state.stages[i]):
            return Cond.SKIP
        j = elementwise_matched_consumer(state, i)
        if j is None or is_tiled(state.stages[j]) or state.stages[j].compute_at != ROOT:
            return Cond.SKIP
        return Cond.APPLY_AND_SKIP_REST

    def apply(self, ctx, state, i):
        j = elementwise_matched_consumer(state, i)
        state, spatial_ids = multi_level_tile(state, i, ctx.params.gpu_structure)
        n = self.follow_levels
        axes = [it.name for it in state.stages[j].root_iters]
        for name, src in zip(axes, spatial_ids, strict=False):
            state = state.follow_split(j, name, src, n)
        order = [level_names(a, n + 1)[level] for level in range(n + 1) for a in axes]
        state = state.reorder(j, order)
        at = state.stages[j].iters[n * len(axes) - 1].name
        return [(state.compute_at(i, j, at), i - 1)]


class MultiLevelTiling(SketchRule):
    """Tile a stage that needs it (`SSSRRSRS`), with nothing fused."""

    def condition(self, ctx, state, i):
        if needs_multi_level_tiling(state, i) and not is_tiled(state.stages[i]):
            return Cond.APPLY_AND_SKIP_REST
        return Cond.SKIP

    def apply(self, ctx, state, i):
        state, _ = multi_level_tile(state, i, ctx.params.gpu_structure)
        return [(state, i - 1)]


class SkipStage(SketchRule):
    """The last rule: leave the stage as it is and go on to the previous one."""

    def condition(self, ctx, state, i):
        return Cond.APPLY

    def apply(self, ctx, state, i):
        return [(state, i - 1)]


# The GPU rule order (Ansor's, less the rules for attributes this DAG language lacks:
# SpecialComputeLocationGPU and SimplifyComputeWithConstTensor; plus keeping a fetched
# normalisation, split-K, and the Tensor Core rule, which takes a half-precision product before
# the fp32 tiling rules would; and, on a normalisation's input, its rows split over clusters and
# kept in shared memory).
GPU_RULES: tuple[SketchRule, ...] = (
    AddCacheRead(),
    KeepFetchedNormalization(),
    AlwaysInline(),
    SplitKReduction(),
    CrossBlockReduction(),
    CrossThreadReduction(),
    MultiLevelTilingTensorCore(),
    AddCacheWrite(),
    MultiLevelTilingWithFusion(),
    MultiLevelTiling(),
    RowOverCluster(),
    RowInSharedMemory(),
    SkipStage(),
)


def generate(
    state: State, ctx: SketchContext, rules: tuple[SketchRule, ...] = GPU_RULES
) -> list[State]:
    """Run the rules from the last stage back; return the distinct finished sketches."""
    todo: list[tuple[State, int]] = [(state, len(state.stages) - 1)]
    out: list[State] = []
    while todo:
        nxt: list[tuple[State, int]] = []
        for st, i in todo:
            if i < 0:
                if st not in out:
                    out.append(st)
                continue
            for rule in rules:
                cond = rule.condition(ctx, st, i)
                if cond is Cond.SKIP:
                    continue
                nxt.extend(rule.apply(ctx, st, i))
                if cond is Cond.APPLY_AND_SKIP_REST:
                    break
        todo = nxt
    return out


__all__ = [
    "Cond",
    "SketchContext",
    "SketchRule",
    "GPU_RULES",
    "generate",
    "multi_level_tile",
    "outermost_reduce_tile_iter",
]
