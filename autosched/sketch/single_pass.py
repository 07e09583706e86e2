"""The init rule `SinglePass`: for a cross-block reduction (`CrossBlockReduction`: partial sums
of a long reduction with few outputs, then their sum), whether the partial sums and their sum
are two kernels or one, the last block to finish its partials summing them all
(`single_pass` pragma on the partial sums' stage; lower/single_pass.py). Drawn with the odds
`SketchParams.cross_block_single_pass` (0: never; 1: always).

One kernel saves the second launch and its tail: the last block reads P partials per output
from L2 while the GPU would otherwise sit between kernels. The candidates are the partial
sums of a reduction that does not reuse its inputs (not split-K's tiled products), whose sum
is a kernel of as many elements as it has outputs (itself, or computed inside an epilogue of
one element per output: a square root, a cast), so that one block has little to finish: at
most `SinglePass.MAX_ROUNDS` passes of its threads over the sum's launch.
It runs after FastExp, so the other rules' draws are unchanged.

Lowering merges the two kernels where the summing kernel's block has the partials' block's
shape (a block reduction over the parts) or its threads each work alone (a loop over the
parts). Where neither holds (a block reduction over another thread count), the rule gives
the sum the partials' thread count (`aligned`), when both blocks are one-dimensional and the
sum's threads come from one split: the pragma is drawn 1 only for a state that lowers.
"""

from __future__ import annotations

import math
from typing import ClassVar

from autosched.errors import LoweringError
from autosched.lower.lowering import lower
from autosched.schedule.loop_state import State
from autosched.schedule.stage import REDUCE, ROOT, SplitRel
from autosched.schedule.steps import SplitStep, replay
from autosched.sketch.init_base import InitRule
from autosched.sketch.launch_bounds import THREAD_TAGS, kernel_stages, launch_shape
from autosched.sketch.stage_steps import stage_index_history
from autosched.sketch.utils import attach_target, consumers, op_reuses_inputs

PRAGMA = "single_pass"


def elements(state: State, i: int) -> int:
    """The output elements of stage i."""
    n = 1
    for a in state.stages[i].axes:
        n *= a.extent
    return n


def final_stage(state: State, i: int) -> int | None:
    """The one stage that reads partial-sum stage i (through inlined stages), or None."""
    finals = consumers(state, i)
    return finals[0] if len(finals) == 1 else None


def block_shape(state: State, root: int) -> tuple[int, int, int]:
    """The threads along x, y, z of root stage `root`'s kernel (the largest extent bound)."""
    threads = dict.fromkeys(THREAD_TAGS, 1)
    for j in kernel_stages(state, root):
        for it in state.stages[j].iters:
            if it.annotation in threads:
                threads[it.annotation] = max(threads[it.annotation], it.extent or 1)
    x, y, z = threads.values()
    return x, y, z


def merges(state: State, i: int) -> bool:
    """Whether lowering can merge partial-sum stage i's kernel with its sum's: the same block
    shape, or a sum whose threads share nothing (no reduction bound to threads, no shared
    stage)."""
    final = final_stage(state, i)
    assert final is not None
    root = attach_target(state, final)
    if block_shape(state, i) == block_shape(state, root):
        return True
    inside = [state.stages[j] for j in kernel_stages(state, root)]
    return not any(
        st.scope == "shared"
        or any(it.kind == REDUCE and it.annotation in THREAD_TAGS for it in st.iters)
        for st in inside
    )


def aligned(state: State, i: int) -> State | None:
    """`state` with the sum of partial-sum stage i reduced by as many threads as the partial
    sums' blocks have (its one split bound to threadIdx.x given that length), when both
    blocks are one-dimensional; None when that does not make the kernels merge."""
    final = final_stage(state, i)
    assert final is not None
    threads = block_shape(state, i)
    bound = [it.name for it in state.stages[final].iters if it.annotation == "threadIdx.x"]
    rels = [
        r
        for r in state.stages[final].relations
        if isinstance(r, SplitRel) and set(bound) & set(r.children)
    ]
    if len(bound) != 1 or len(rels) != 1 or threads[1:] != (1, 1):
        return None
    rel = rels[0]
    where = stage_index_history(state)
    ids = [
        k
        for k, s in enumerate(state.steps)
        if isinstance(s, SplitStep) and where[k] == final and s.lengths == rel.lengths
    ]
    if not ids:
        return None
    old = state.steps[ids[-1]]
    assert isinstance(old, SplitStep)
    lengths = list(old.lengths)
    at = rel.children.index(bound[0]) - 1
    lengths[at] = threads[0]
    for j in range(at + 1, len(lengths)):  # what lies inside the threads shrinks to fit
        inside = math.prod(lengths[at:j])
        lengths[j] = max(1, min(lengths[j], old.extent // inside))
    if math.prod(lengths[at:]) > old.extent:
        return None
    steps = list(state.steps)
    steps[ids[-1]] = SplitStep(
        old.stage_id, old.iter_id, old.extent, tuple(lengths), old.inner_to_outer
    )
    new = replay(state.dag, steps).pragma(i, 0, PRAGMA, 1)
    try:  # the launch lowering infers may differ from the iterators' lengths (overhangs)
        lower(new, verify=False)
    except LoweringError:
        return None
    return new


def cuts_a_tiled_reduction(state: State, final: int) -> bool:
    """Whether the reduction the parts' sum `final` finishes reuses its inputs (split-K of a
    product, `SplitKReduction`), read from the DAG's op: the partial sums' own op is a
    rewrite of it."""
    name = state.stages[final].name
    ops = [op for op in state.dag.ops if op.name == name]
    return not ops or op_reuses_inputs(ops[0])


def single_pass_candidates(state: State) -> list[int]:
    """The partial-sum stages the rule draws the pragma for (the module's description)."""
    out = []
    for i, st in enumerate(state.stages):
        if st.origin != "rfactor" or st.compute_at != ROOT:
            continue
        final = final_stage(state, i)
        if final is None or cuts_a_tiled_reduction(state, final):
            continue
        root = attach_target(state, final)
        if state.stages[root].compute_at == ROOT and elements(state, root) <= elements(
            state, final
        ):
            out.append(i)
    return out


def rounds(state: State, i: int) -> int:
    """How many times one block of partial-sum stage i's kernel runs through its sum's
    launch: its sum's threads over its own."""
    final = final_stage(state, i)
    assert final is not None
    blocks, threads = launch_shape(state, attach_target(state, final))
    return -(-blocks * threads // launch_shape(state, i)[1])


class SinglePass(InitRule):
    """`single_pass` 1 with the odds `cross_block_single_pass`, else 0, on each candidate
    whose sum its last block finishes in at most `MAX_ROUNDS` rounds (a column sum's
    thousands of outputs, summed by the threads of one block, would take longer than the
    second kernel they save)."""

    MAX_ROUNDS: ClassVar[int] = 8

    def apply(self, ctx, plan, state, rng):
        odds = ctx.params.cross_block_single_pass
        if odds <= 0:
            return state
        for i in single_pass_candidates(state):
            one = rng.random() < odds and rounds(state, i) <= self.MAX_ROUNDS
            if one and not merges(state, i):
                fitted = aligned(state, i)
                if fitted is not None:
                    state = fitted
                    continue
                one = False
            state = state.pragma(i, 0, PRAGMA, int(one))
        return state


__all__ = ["SinglePass", "single_pass_candidates"]
