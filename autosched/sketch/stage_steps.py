"""The steps of a stage: which of a state's steps split which stage, and the names and
annotations those splits give its iterators.

Cache and rfactor steps insert stages and shift the indices of the stages after them;
`stage_index_history` undoes that, so that rules can find "the splits of stage i" in a state's
list of steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from autosched.errors import ScheduleError
from autosched.schedule.loop_state import State
from autosched.schedule.stage import SplitRel
from autosched.schedule.steps import (
    AnnotationStep,
    FollowFusedSplitStep,
    FollowSplitStep,
    SplitStep,
    Step,
)


def level_names(root: str, n_levels: int) -> list[str]:
    """Names of the parts of `root` split into `n_levels` (outer to inner), as SplitStep names
    them: x_o_o, x_o_i, x_i for three levels."""
    n = n_levels - 1
    return [root + "_o" * n] + [root + "_o" * (n - k) + "_i" for k in range(1, n + 1)]


def next_annotates(steps: Sequence, k: int, step: SplitStep, annotation: str) -> bool:
    """Does the step after split k (`step`) annotate the split's innermost part `annotation`
    (a split then vectorised, bound to threadIdx.x, ...)? `steps` are Steps or their records."""
    if k + 1 >= len(steps):
        return False
    nxt = steps[k + 1]
    if isinstance(nxt, tuple):  # a record
        if nxt[0] != AnnotationStep.TAG:
            return False
        nxt = AnnotationStep(*nxt[1:])
    elif not isinstance(nxt, AnnotationStep):
        return False
    return (
        nxt.stage_id == step.stage_id
        and nxt.iter_id == step.iter_id + len(step.lengths)
        and nxt.annotation == annotation
    )


def stage_index_history(state: State) -> list[int]:
    """For each step k, the index that step k's stage has in the final state (-1 when the
    stage index is not tracked). Cache steps insert stages and shift later indices; this undoes
    that, so rules can find "the splits of stage i" in a list of steps."""
    # ident[p] = stable id of the stage at position p, after the steps applied so far
    n0 = len(state.dag.ops)
    ident = list(range(n0))
    next_id = n0
    at_step: list[int] = []
    for step in state.steps:
        at_step.append(ident[step.stage_id])
        for offset in step.INSERTS:
            ident.insert(step.stage_id + offset, next_id)
            next_id += 1
    final = {sid: p for p, sid in enumerate(ident)}
    return [final.get(sid, -1) for sid in at_step]


def fetch_vector(state: State, c: int) -> int:
    """The vector width of shared stage c's cooperative fetch (1 before there is one)."""
    steps = state.steps
    for k, s in enumerate(steps):
        if (
            isinstance(s, SplitStep)
            and s.stage_id == c
            and next_annotates(steps, k, s, "vectorize")
        ):
            return s.lengths[0]
    return 1


def split_at(steps: Sequence[Step], k: int) -> SplitStep:
    """Step k of `steps`, which the caller knows for a SplitStep (a split id of a plan or of
    `split_step_ids`); a ScheduleError if it is not."""
    step = steps[k]
    if not isinstance(step, SplitStep):
        raise ScheduleError(f"step {k} is {step.to_record()}, not a split")
    return step


def split_extent(steps: Sequence[Step], k: int) -> int:
    """The extent SplitStep k splits: known for every split a sketch makes of a root iterator
    (a ScheduleError for a split of an unknown extent)."""
    extent = split_at(steps, k).extent
    if extent is None:
        raise ScheduleError(f"step {k} splits an iterator of unknown extent")
    return extent


SPLITTING_STEPS = (SplitStep, FollowSplitStep, FollowFusedSplitStep)


def splitting_steps(state: State, i: int) -> list[tuple[int, SplitRel]]:
    """(step id, relation) of every split of stage i (SplitStep or a follow split), in order."""
    where = stage_index_history(state)
    rels = [r for r in state.stages[i].relations if isinstance(r, SplitRel)]
    mine = [
        k for k, s in enumerate(state.steps) if isinstance(s, SPLITTING_STEPS) and where[k] == i
    ]
    return list(zip(mine, rels, strict=False))


def split_step_ids(state: State, i: int, kind: str | None = None) -> list[int]:
    """Ids of the SplitSteps on stage i, in order; with `kind`, only those that split a root
    iterator of that kind (spatial / reduce)."""
    root_kind = {it.name: it.kind for it in state.stages[i].root_iters}
    return [
        k
        for k, rel in splitting_steps(state, i)
        if isinstance(state.steps[k], SplitStep)
        and (kind is None or root_kind.get(rel.parent) == kind)
    ]


__all__ = [
    "SPLITTING_STEPS",
    "fetch_vector",
    "split_at",
    "split_extent",
    "level_names",
    "next_annotates",
    "split_step_ids",
    "splitting_steps",
    "stage_index_history",
]
