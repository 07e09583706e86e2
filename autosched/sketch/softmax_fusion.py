"""A normalisation fetched by a product: attention's probabilities, for the sketch rule
`rules.KeepFetchedNormalization`.

`find_normalization` recognises an element-wise stage P that only a shared-memory cache of a
product reads and whose value depends on row reductions (a softmax's max and sum) that nothing
but P's own computation reads: P = f(exp(L - M), Z) with M = max_j L and Z = sum_j exp(L - M).
Inlined into the product's fetch (what AlwaysInline does), each such reduction is a kernel of
its own. The rule adds two sketches:

- P kept as a kernel of its own: CrossThreadReduction then computes the reductions at its row
  loop, all threads of a block on one row (the softmax sketch): one kernel for the softmax.
- P computed inside the product's Tensor Core kernel (`compute_in_product`), at its block
  loop: P's rows on the kernel's warps (threadIdx.y, as many as the kernel has: the warp
  levels of its M and N splits), its last axis on the 32 lanes of each warp (threadIdx.x), the
  reductions computed at P's row loop with their reduction axis on the same lanes (each a warp
  reduction), P's block of rows left in shared memory for the product's fetch. The softmax
  then costs no kernel of its own, and each block reads the scores of its rows once.
"""

from __future__ import annotations

from dataclasses import dataclass

from autosched.schedule.loop_state import State
from autosched.schedule.stage import REDUCE, ROOT
from autosched.sketch.tensor_core_plan import TensorCoreGroup, tensor_core_groups
from autosched.sketch.utils import consumers, is_inlined, is_output, stage_op_info
from autosched.te.tensor import ComputeOp, Operation

WARP = 32  # a Tensor Core kernel's threadIdx.x extent: the lanes of one warp


@dataclass(frozen=True)
class Normalization:
    """What `find_normalization` found: the row reductions stage P reads (ops, P's readers
    first) and the cache stage that fetches P."""

    reductions: tuple[ComputeOp, ...]
    cache: int


def _reads_of(state: State) -> dict[int, list[Operation]]:
    """The DAG's consumers of every op, by op id."""
    readers: dict[int, list[Operation]] = {}
    for op in state.dag.ops:
        for t in op.input_tensors:
            readers.setdefault(id(t.op), []).append(op)
    return readers


def _row_reductions(state: State, op: Operation) -> tuple[ComputeOp, ...] | None:
    """The reductions without data reuse (row reductions) that `op` reads directly or through
    element-wise ops, when nothing but `op`'s computation reads them or those element-wise
    ops; None when there is none or another op reads one of them. Products (reductions that
    need multi-level tiling) and placeholders are inputs: the walk stops there."""
    found: list[ComputeOp] = []
    inner: dict[int, Operation] = {}
    todo = [op]
    while todo:
        for t in todo.pop().input_tensors:
            info = state.dag.info.get(id(t.op))
            if info is None or id(t.op) in inner or info.is_placeholder:
                continue
            if info.has_reduction and info.needs_multi_level_tiling:
                continue
            inner[id(t.op)] = t.op
            if info.has_reduction and isinstance(t.op, ComputeOp):
                found.append(t.op)
            todo.append(t.op)
    if not found:
        return None
    readers = _reads_of(state)
    for key, inside in inner.items():
        if any(r is not op and id(r) not in inner for r in readers.get(key, [])):
            return None
        if any(inside is out for out in state.dag.outputs):
            return None
    return tuple(found)


def find_normalization(state: State, i: int) -> Normalization | None:
    """Stage i as a fetched normalisation (the module's description), or None."""
    stage = state.stages[i]
    info = stage_op_info(state, i)
    if (
        info is None
        or stage.origin != "dag"
        or is_inlined(stage)
        or stage.compute_at != ROOT
        or is_output(state, i)
        or info.has_reduction
    ):
        return None
    cons = consumers(state, i)
    if len(cons) != 1:
        return None
    cache = state.stages[cons[0]]
    if cache.origin != "cache_read" or cache.scope != "shared":
        return None
    reductions = _row_reductions(state, stage.op)
    return None if reductions is None else Normalization(reductions, cons[0])


def product_group(state: State, norm: Normalization) -> TensorCoreGroup | None:
    """The Tensor Core kernel whose operand fetch is the normalisation's cache, when its root
    has a block loop."""
    for group in tensor_core_groups(state):
        root = state.stages[group.root]
        if norm.cache in group.shared and root.iters[0].annotation == "blockIdx.x":
            return group
    return None


def _row_shape_matches(state: State, i: int, norm: Normalization) -> bool:
    """Each reduction has P's leading axes (all but the last) and one reduction axis as long as
    P's last axis."""
    axes = state.stages[i].compute_op.axis
    for op in norm.reductions:
        if len(op.reduce_axis) != 1 or op.reduce_axis[0].extent != axes[-1].extent:
            return False
        if [a.extent for a in op.axis] != [a.extent for a in axes[:-1]]:
            return False
    return len(axes) >= 2


def compute_in_product(state: State, i: int, norm: Normalization) -> State | None:
    """Stage i (P) and its row reductions computed at the block loop of the Tensor Core kernel
    that fetches P (the module's description); None when there is no such kernel or the
    reductions do not run along P's last axis."""
    group = product_group(state, norm)
    if group is None or not _row_shape_matches(state, i, norm):
        return None
    iters = state.stages[i].iters
    rows, last = iters[-2].name, iters[-1].name
    lanes = len(state.steps)
    state = state.split(i, last, [WARP]).bind(i, f"{last}_i", "threadIdx.x")
    state = state.follow_fused_split(i, rows, (group.m_split, group.n_split), 0, True)
    state = state.bind(i, f"{rows}_i", "threadIdx.y")
    for op in norm.reductions:
        r = state.stage_index(op)
        k = next(it.name for it in state.stages[r].iters if it.kind == REDUCE)
        state = state.follow_split(r, k, lanes, 1).bind(r, f"{k}_i", "threadIdx.x")
        state = state.compute_at(r, i, f"{rows}_i")
    return state.compute_at(i, group.root, state.stages[group.root].iters[0].name)


__all__ = ["Normalization", "WARP", "compute_in_product", "find_normalization", "product_group"]
