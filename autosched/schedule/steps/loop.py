"""Steps that change a stage's loop structure: split, follow split, follow fused split, fuse and
reorder. Stages attached at a split or fused iterator follow it to its new name."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from autosched.errors import ScheduleError
from autosched.schedule.stage import MIXED, FuseRel, Iterator, SplitRel, Stage
from autosched.schedule.steps.base import StateT, Step, StepTarget, check, pyiter, pyname, replace


def _retarget_attach(stages: list[Stage], target: int, rename: dict[str, str]) -> None:
    """Stages attached at a renamed iterator of stage `target` follow it to its new name."""
    for i, s in enumerate(stages):
        if s.attach is not None and s.attach[0] == target and s.attach[1] in rename:
            stages[i] = replace(s, attach=(target, rename[s.attach[1]]))


def _check_unannotated(stage: Stage, its: list[Iterator], what: str) -> None:
    for it in its:
        if it.annotation != "none":
            raise ScheduleError(
                f"cannot {what} iterator {it.name!r} of stage {stage.name!r}: it "
                f"is already annotated {it.annotation!r}"
            )


def _split_names(name: str, n: int, inner_to_outer: bool) -> list[str]:
    """The names of the n+1 parts of a split of `name`, outer to inner."""
    if inner_to_outer:
        return [name + "_o" * n] + [name + "_o" * (n - k) + "_i" for k in range(1, n + 1)]
    return [name + "_i" * k + "_o" for k in range(n)] + [name + "_i" * n]


def _apply_split(state: StateT, si: int, ii: int, lengths: tuple, inner_to_outer: bool) -> StateT:
    stage = state.stages[si]
    it = stage.iters[stage.iter_index(ii)]
    _check_unannotated(stage, [it], "split")
    # Messages are built only on failure: this is the search's hottest path.
    check(len(lengths) >= 1, lambda: f"split of {stage.name}.{it.name} needs at least one length")
    for length in lengths:
        check(
            length is None or (isinstance(length, int) and length > 0),
            lambda: (
                f"split of {stage.name}.{it.name}: lengths must be positive ints or None, "
                f"got {lengths}"
            ),
        )
    rest = None
    if it.extent is not None and None not in lengths:
        rest = -(-it.extent // math.prod(lengths))
    extents = [rest, *lengths] if inner_to_outer else [*lengths, rest]
    names = _split_names(it.name, len(lengths), inner_to_outer)
    existing = {x.name for x in stage.iters}
    check(
        existing.isdisjoint(names),
        lambda: (
            f"split of {stage.name}.{it.name}: the name "
            f"{next(n for n in names if n in existing)!r} is taken"
        ),
    )
    children = tuple(Iterator(n, e, it.kind) for n, e in zip(names, extents, strict=True))
    iters = stage.iters[:ii] + children + stage.iters[ii + 1 :]
    stages = list(state.stages)
    stages[si] = replace(
        stage,
        iters=iters,
        relations=stage.relations
        + (SplitRel(it.name, tuple(names), tuple(lengths), inner_to_outer),),
    )
    _retarget_attach(stages, si, {it.name: names[-1]})
    return state.with_stages(stages)


def _split_python(stage: Stage, name: str, lengths: tuple, inner_to_outer: bool) -> list[str]:
    """TVM's form: every line binds the split's final iterator names (`nn_o_i, nn_i = split(nn)`,
    then `nn_o_o_i, nn_o_i = split(nn_o_i)`), so the Python names end up as the state's."""
    lines, cur = [], name
    S = pyname(stage)
    outs = _split_names(name, len(lengths), inner_to_outer)
    if inner_to_outer:
        for i in range(len(lengths) - 1, -1, -1):
            lines.append(
                f"{S}_{outs[i]}, {S}_{outs[i + 1]} = s[{S}].split({S}_{cur}, factor={lengths[i]})"
            )
            cur = outs[i]
    else:
        for i in range(len(lengths)):
            lines.append(
                f"{S}_{outs[i]}, {S}_{outs[i + 1]} = s[{S}].split({S}_{cur}, nparts={lengths[i]})"
            )
            cur = outs[i + 1]
    return lines


@dataclass(frozen=True, slots=True)
class SplitStep(Step):
    """Split an iterator into len(lengths)+1 parts; `lengths` are the inner parts' extents
    (outer to inner) when inner_to_outer, else the outer parts' (like `nparts=`)."""

    TAG: ClassVar[str] = "SP"
    stage_id: int
    iter_id: int
    extent: int | None
    lengths: tuple
    inner_to_outer: bool = True

    def apply(self, state: StateT) -> StateT:
        return _apply_split(
            state,
            self.stage_id,
            state.stages[self.stage_id].iter_index(self.iter_id),
            tuple(self.lengths),
            self.inner_to_outer,
        )

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        return _split_python(
            stage, stage.iters[self.iter_id].name, self.lengths, self.inner_to_outer
        )


def _follow_lengths(state: StepTarget, src_step_id: int, n_split: int) -> tuple:
    check(0 <= src_step_id < len(state.steps), lambda: f"follow_split: no step {src_step_id}")
    src = state.steps[src_step_id]
    if not isinstance(src, SplitStep):
        raise ScheduleError(f"follow_split: step {src_step_id} is not a split")
    check(
        1 <= n_split <= len(src.lengths) + 1, lambda: f"follow_split: n_split {n_split} too large"
    )
    lengths = list(src.lengths[: n_split - 1])
    tail = src.lengths[n_split - 1 :]
    lengths.append(None if None in tail else math.prod(tail))
    return tuple(lengths)


@dataclass(frozen=True, slots=True)
class FollowSplitStep(Step):
    """Split like an earlier SplitStep: its first n_split-1 lengths and the product of the rest."""

    TAG: ClassVar[str] = "FSP"
    stage_id: int
    iter_id: int
    src_step_id: int
    n_split: int

    def lengths(self, state: StepTarget) -> tuple:
        return _follow_lengths(state, self.src_step_id, self.n_split)

    def apply(self, state: StateT) -> StateT:
        return _apply_split(state, self.stage_id, self.iter_id, self.lengths(state), True)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        return _split_python(stage, stage.iters[self.iter_id].name, self.lengths(before), True)


@dataclass(frozen=True, slots=True)
class FollowFusedSplitStep(Step):
    """Split by the product of the `level`-th lengths of several earlier SplitSteps."""

    TAG: ClassVar[str] = "FFSP"
    stage_id: int
    iter_id: int
    src_step_ids: tuple
    level: int
    factor_or_nparts: bool

    def length(self, state: StepTarget) -> int | None:
        total = 1
        for sid in self.src_step_ids:
            src = state.steps[sid] if 0 <= sid < len(state.steps) else None
            if not isinstance(src, SplitStep):
                raise ScheduleError(f"follow_fused_split: step {sid} is not a split")
            lengths = src.lengths
            check(
                self.level < len(lengths),
                lambda: f"follow_fused_split: level {self.level} too deep",
            )
            if lengths[self.level] is None:
                return None
            total *= lengths[self.level]
        return total

    def apply(self, state: StateT) -> StateT:
        return _apply_split(
            state, self.stage_id, self.iter_id, (self.length(state),), self.factor_or_nparts
        )

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        return _split_python(
            stage, stage.iters[self.iter_id].name, (self.length(before),), self.factor_or_nparts
        )


@dataclass(frozen=True, slots=True)
class FuseStep(Step):
    """Fuse consecutive iterators into one."""

    TAG: ClassVar[str] = "FU"
    stage_id: int
    fused_ids: tuple

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        ids = list(self.fused_ids)
        check(len(ids) >= 1, lambda: f"fuse on stage {stage.name!r} needs at least one iterator")
        for i in ids:
            stage.iter_index(i)
        check(
            all(b == a + 1 for a, b in zip(ids, ids[1:], strict=False)),
            lambda: (
                f"fuse on stage {stage.name!r}: iterators {[stage.iters[i].name for i in ids]} "
                "are not adjacent (outer to inner)"
            ),
        )
        its = [stage.iters[i] for i in ids]
        if len(its) == 1:
            return state
        _check_unannotated(stage, its, "fuse")
        name = its[0].name
        for it in its[1:]:
            name = f"{name}_{it.name}_fused"
        kinds = {it.kind for it in its}
        kind = kinds.pop() if len(kinds) == 1 else MIXED
        extent = (
            None if any(it.extent is None for it in its) else math.prod(it.extent for it in its)
        )
        fused = Iterator(name, extent, kind)
        iters = stage.iters[: ids[0]] + (fused,) + stage.iters[ids[-1] + 1 :]
        rel = FuseRel(tuple(it.name for it in its), name)
        stages = list(state.stages)
        stages[self.stage_id] = replace(stage, iters=iters, relations=stage.relations + (rel,))
        _retarget_attach(stages, self.stage_id, {it.name: name for it in its})
        return state.with_stages(stages)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        its = [stage.iters[i].name for i in self.fused_ids]
        if len(its) == 1:
            return []
        fused = after.stages[self.stage_id].iters[self.fused_ids[0]].name
        S = pyname(stage)
        return [f"{S}_{fused} = s[{S}].fuse({', '.join(f'{S}_{n}' for n in its)})"]


def _reorder_error(stage: Stage, ids: list[int]) -> str:
    n = len(stage.iters)
    missing = [stage.iters[i].name for i in range(n) if i not in ids]
    repeated = [
        stage.iters[i].name if 0 <= i < n else i for i in sorted(set(ids)) if ids.count(i) > 1
    ]
    return (
        f"reorder on stage {stage.name!r} must list each of its {n} iterators once; got {ids} "
        f"(missing {missing}, repeated {repeated})"
    )


@dataclass(frozen=True, slots=True)
class ReorderStep(Step):
    """Put the stage's iterators in the given order (a permutation of all of them)."""

    TAG: ClassVar[str] = "RE"
    stage_id: int
    after_ids: tuple

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        ids = list(self.after_ids)
        check(sorted(ids) == list(range(len(stage.iters))), lambda: _reorder_error(stage, ids))
        return state.replace_stage(
            self.stage_id, replace(stage, iters=tuple(stage.iters[i] for i in ids))
        )

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        names = ", ".join(pyiter(stage, stage.iters[i].name) for i in self.after_ids)
        return [f"s[{pyname(stage)}].reorder({names})"]
