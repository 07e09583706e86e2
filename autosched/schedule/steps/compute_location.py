"""Steps that choose where a stage is computed: inside a consumer's loop (compute_at), at the
root of the kernel (compute_root), or substituted into its consumers (compute_inline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autosched.schedule.dataflow import transitive_consumers
from autosched.schedule.stage import ATTACHED, INLINED, ROOT
from autosched.schedule.steps.base import StateT, Step, StepTarget, check, pyiter, pyname, replace
from autosched.te.expr import Reduce
from autosched.te.tensor import ComputeOp


@dataclass(frozen=True, slots=True)
class ComputeAtStep(Step):
    """Compute a stage inside a loop of one of its (transitive) consumers."""

    TAG: ClassVar[str] = "CA"
    stage_id: int
    target_stage_id: int
    target_iter_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        target = state.stages[self.target_stage_id]
        it = target.iters[target.iter_index(self.target_iter_id)]

        def where() -> str:
            return f"compute_at of {stage.name!r} at {target.name}.{it.name}"

        check(not stage.is_placeholder, lambda: f"{where()}: {stage.name!r} is a placeholder")
        check(
            self.stage_id != self.target_stage_id,
            lambda: f"{where()}: a stage cannot be computed inside itself (a cycle)",
        )
        # The cycle check comes first: its message says more than "not a consumer".
        cur, seen = target, set()
        while cur.attach is not None and cur.attach[0] not in seen:
            seen.add(cur.attach[0])
            check(
                cur.attach[0] != self.stage_id,
                lambda: (
                    f"{where()}: {target.name!r} is itself computed inside {stage.name!r}, "
                    "so this would create a cycle"
                ),
            )
            cur = state.stages[cur.attach[0]]
        check(
            self.target_stage_id in transitive_consumers(state, self.stage_id),
            lambda: (
                f"{where()}: {target.name!r} does not consume {stage.name!r} (directly or "
                "through other stages), so attaching there would not be a consumer chain"
            ),
        )
        check(target.compute_at != INLINED, lambda: f"{where()}: the target is inlined")
        new = replace(stage, compute_at=ATTACHED, attach=(self.target_stage_id, it.name))
        return state.replace_stage(self.stage_id, new)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage, target = before.stages[self.stage_id], before.stages[self.target_stage_id]
        it = target.iters[self.target_iter_id].name
        return [f"s[{pyname(stage)}].compute_at(s[{pyname(target)}], {pyiter(target, it)})"]


@dataclass(frozen=True, slots=True)
class ComputeRootStep(Step):
    """Compute a stage at the root of the kernel (undoes compute_at)."""

    TAG: ClassVar[str] = "CR"
    stage_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check(not stage.is_placeholder, lambda: f"compute_root: {stage.name!r} is a placeholder")
        return state.replace_stage(self.stage_id, replace(stage, compute_at=ROOT, attach=None))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        return [f"s[{pyname(before.stages[self.stage_id])}].compute_root()"]


@dataclass(frozen=True, slots=True)
class ComputeInlineStep(Step):
    """Substitute a stage's expression into its consumers."""

    TAG: ClassVar[str] = "CI"
    stage_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        info = state.dag.info.get(id(stage.produces))
        check(not stage.is_placeholder, lambda: f"compute_inline: {stage.name!r} is a placeholder")
        check(
            not (isinstance(stage.op, ComputeOp) and isinstance(stage.op.body, Reduce)),
            lambda: f"compute_inline: {stage.name!r} is a reduction and cannot be inlined",
        )
        check(
            info is None or not info.is_output,
            lambda: f"compute_inline: {stage.name!r} is an output of the DAG and cannot be inlined",
        )
        check(
            all(s.attach is None or s.attach[0] != self.stage_id for s in state.stages),
            lambda: f"compute_inline: other stages are computed at {stage.name!r}",
        )
        return state.replace_stage(self.stage_id, replace(stage, compute_at=INLINED, attach=None))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        return [f"s[{pyname(before.stages[self.stage_id])}].compute_inline()"]
