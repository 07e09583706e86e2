"""Steps that add a stage: cache_read and cache_write (a copy through `shared` or `local`
memory, or through Tensor Core fragments), rfactor (partial reductions in a stage of their
own) and implicit_gemm (a convolution as a gather and a matrix product)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autosched.errors import ScheduleError
from autosched.schedule.dataflow import reads_of
from autosched.schedule.implicit_gemm import IMPLICIT_GEMM_ORIGIN, implicit_gemm_ops
from autosched.schedule.rfactor import rfactor_ops
from autosched.schedule.stage import INLINED, Stage, stage_from_op
from autosched.schedule.steps.base import (
    StateT,
    Step,
    StepTarget,
    axes_line,
    check,
    pyiter,
    pyname,
    replace,
)
from autosched.te.expr import IterVar, Load, Reduce
from autosched.te.tensor import ComputeOp
from autosched.te.visitor import substitute

# The scopes a cache stage may have: Tensor Core operands are read into matrix_a / matrix_b
# fragments, results written through an accumulator fragment (see docs/TENSOR_CORES.md).
CACHE_READ_SCOPES = ("shared", "local", "wmma.matrix_a", "wmma.matrix_b")
CACHE_WRITE_SCOPES = ("local", "shared", "wmma.accumulator")


def _insert_stage(stages: list[Stage], pos: int, stage: Stage) -> None:
    """Insert `stage` at `pos`; attachments to the stages after it follow their new index."""
    for i, s in enumerate(stages):
        if s.attach is not None and s.attach[0] >= pos:
            stages[i] = replace(s, attach=(s.attach[0] + 1, s.attach[1]))
    stages.insert(pos, stage)


@dataclass(frozen=True, slots=True)
class CacheReadStep(Step):
    """Add a stage that copies a tensor into `scope` for the given reader stages."""

    TAG: ClassVar[str] = "CHR"
    INSERTS: ClassVar[tuple[int, ...]] = (1,)
    stage_id: int
    scope_name: str
    reader_stage_ids: tuple

    def apply(self, state: StateT) -> StateT:
        check(
            self.scope_name in CACHE_READ_SCOPES,
            lambda: (
                f"cache_read: scope must be one of {CACHE_READ_SCOPES}, not {self.scope_name!r}"
            ),
        )
        src = state.stages[self.stage_id]
        check(src.compute_at != INLINED, lambda: f"cache_read: {src.name!r} is inlined")
        check(len(self.reader_stage_ids) > 0, "cache_read needs at least one reader stage")
        for r in self.reader_stage_ids:
            if self.stage_id not in reads_of(state, r):
                raise ScheduleError(
                    f"cache_read: stage {state.stages[r].name!r} does not read {src.name!r}"
                )
        tensor = src.produces.output(0)
        axes = tuple(IterVar(f"ax{i}", 0, d, IterVar.SPATIAL) for i, d in enumerate(tensor.shape))
        new_op = ComputeOp(f"{src.name}.{self.scope_name}", "", axes, Load(tensor, axes), {})
        stages = list(state.stages)
        for r in self.reader_stage_ids:
            reader = stages[r]
            stages[r] = replace(reader, redirects=reader.redirects + ((src.produces, new_op),))
        _insert_stage(
            stages,
            self.stage_id + 1,
            stage_from_op(new_op, scope=self.scope_name, origin="cache_read"),
        )
        return state.with_stages(stages)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        src = before.stages[self.stage_id]
        new = after.stages[self.stage_id + 1]
        readers = ", ".join(pyname(before.stages[r]) for r in self.reader_stage_ids)
        return [
            f'{pyname(new)} = s.cache_read({pyname(src)}, "{self.scope_name}", [{readers}])',
            axes_line(new, with_reduce=False),
        ]


@dataclass(frozen=True, slots=True)
class CacheWriteStep(Step):
    """Compute a stage into a `local` (or `shared`, or accumulator fragment) buffer first; the
    stage then copies it out."""

    TAG: ClassVar[str] = "CHW"
    INSERTS: ClassVar[tuple[int, ...]] = (0,)  # the new local stage takes the old position
    stage_id: int
    scope_name: str

    def apply(self, state: StateT) -> StateT:
        check(
            self.scope_name in CACHE_WRITE_SCOPES,
            lambda: (
                f"cache_write: scope must be one of {CACHE_WRITE_SCOPES}, not {self.scope_name!r}"
            ),
        )
        stage = state.stages[self.stage_id]
        op = stage.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"cache_write: {stage.name!r} is not a compute")
        check(stage.compute_at != INLINED, lambda: f"cache_write: {stage.name!r} is inlined")
        check(
            stage.iters == stage.root_iters,
            lambda: f"cache_write: {stage.name!r} was already transformed; cache_write it first",
        )
        check(
            all(s.attach is None or s.attach[0] != self.stage_id for s in state.stages),
            lambda: f"cache_write: other stages are computed at {stage.name!r}",
        )
        axis = tuple(IterVar(f"{a.name}_c", 0, a.extent, IterVar.SPATIAL) for a in op.axis)
        raxis = tuple(IterVar(a.name, a.lo, a.extent, IterVar.REDUCE) for a in op.reduce_axis)
        mapping = {
            **dict(zip(op.axis, axis, strict=True)),
            **dict(zip(op.reduce_axis, raxis, strict=True)),
        }
        body = op.body
        if isinstance(body, Reduce):
            cond = substitute(body.condition, mapping) if body.condition is not None else None
            body = Reduce(body.reducer, substitute(body.source, mapping), raxis, cond)
        else:
            body = substitute(body, mapping)
        local_op = ComputeOp(f"{op.name}.{self.scope_name}", op.tag, axis, body, dict(op.attrs))
        out_axis = tuple(IterVar(a.name, 0, a.extent, IterVar.SPATIAL) for a in op.axis)
        copy_op = ComputeOp(
            op.name, op.tag, out_axis, Load(local_op.output(0), out_axis), dict(op.attrs)
        )
        stages = list(state.stages)
        stages[self.stage_id] = replace(
            stage_from_op(copy_op, produces=stage.produces),
            compute_at=stage.compute_at,
            attach=stage.attach,
            origin=stage.origin,
        )
        local = stage_from_op(
            local_op, scope=self.scope_name, redirects=stage.redirects, origin="cache_write"
        )
        _insert_stage(stages, self.stage_id, local)
        return state.with_stages(stages)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        local, new = after.stages[self.stage_id], after.stages[self.stage_id + 1]
        return [
            f'{pyname(local)}, = s.cache_write([{pyname(stage)}], "{self.scope_name}")',
            axes_line(local, with_reduce=True),
            axes_line(new, with_reduce=True),
        ]


@dataclass(frozen=True, slots=True)
class RfactorStep(Step):
    """Factor the reduce iterator `iter_id` out of a reduction: a new stage `<name>.rf`, inserted
    before it, computes partial reductions with that iterator as its spatial axis number
    `factor_iter_id`; the stage then reduces the rf tensor over it (TVM's `s.rfactor`). Both
    stages get fresh iterators from their ops, as in Ansor."""

    TAG: ClassVar[str] = "RF"
    INSERTS: ClassVar[tuple[int, ...]] = (0,)
    stage_id: int
    iter_id: int
    factor_iter_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check(not stage.is_placeholder, lambda: f"rfactor: {stage.name!r} is a placeholder")
        it = stage.iters[stage.iter_index(self.iter_id)]
        where = f"rfactor of {stage.name}.{it.name}"
        check(stage.compute_at != INLINED, lambda: f"{where}: stage {stage.name!r} is inlined")
        check(
            all(s.attach is None or s.attach[0] != self.stage_id for s in state.stages),
            lambda: (
                f"{where}: other stages are computed at {stage.name!r} "
                f"({[s.name for s in state.stages if s.attach and s.attach[0] == self.stage_id]}); "
                "rfactor it before compute_at"
            ),
        )
        annotated = [x.name for x in stage.iters if x.annotation != "none"]
        check(
            not annotated,
            lambda: (
                f"{where}: iterators {annotated} of {stage.name!r} are "
                "annotated; rfactor gives the stage fresh loops, so annotate after it"
            ),
        )
        ops = rfactor_ops(stage, stage.iter_index(self.iter_id), self.factor_iter_id)
        final = replace(
            stage_from_op(ops.final_op, produces=stage.produces),
            compute_at=stage.compute_at,
            attach=stage.attach,
            scope=stage.scope,
            origin=stage.origin,
        )
        rf = stage_from_op(ops.rf_op, redirects=stage.redirects, origin="rfactor")
        stages = list(state.stages)
        stages[self.stage_id] = final
        _insert_stage(stages, self.stage_id, rf)
        return state.with_stages(stages)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        rf, final = after.stages[self.stage_id], after.stages[self.stage_id + 1]
        it = pyiter(stage, stage.iters[self.iter_id].name)
        return [
            f"{pyname(rf)} = s.rfactor({pyname(stage)}, {it}, factor_axis={self.factor_iter_id})",
            axes_line(rf, with_reduce=True),
            axes_line(final, with_reduce=True, via_schedule=True),
        ]


@dataclass(frozen=True, slots=True)
class ImplicitGemmStep(Step):
    """Rewrite a convolution as a matrix product (`schedule.implicit_gemm`): three stages
    replace it, the gather `<name>.im2col` and the product `<name>.gemm` inserted before it,
    and the stage itself, now a reshape of the product into the output's axes (it keeps
    producing the original tensor, so its readers are unchanged). Both new stages and the
    reshape get fresh iterators; the stage must not have been transformed yet."""

    TAG: ClassVar[str] = "IG"
    INSERTS: ClassVar[tuple[int, ...]] = (0, 0)  # the product, then the gather before it
    stage_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        op = stage.op
        where = f"implicit_gemm of {stage.name!r}"
        check(isinstance(op, ComputeOp), lambda: f"{where}: not a compute")
        check(stage.compute_at != INLINED, lambda: f"{where}: the stage is inlined")
        check(
            stage.iters == stage.root_iters and stage.attach is None,
            lambda: f"{where}: the stage was already transformed",
        )
        check(
            all(s.attach is None or s.attach[0] != self.stage_id for s in state.stages),
            lambda: f"{where}: other stages are computed at it",
        )
        assert isinstance(op, ComputeOp)
        ops = implicit_gemm_ops(op)
        reshape = replace(
            stage_from_op(ops.reshape, produces=stage.produces),
            compute_at=stage.compute_at,
            origin=stage.origin,
        )
        stages = list(state.stages)
        stages[self.stage_id] = reshape
        gemm = stage_from_op(ops.gemm, origin=IMPLICIT_GEMM_ORIGIN)
        gather = stage_from_op(ops.gather, redirects=stage.redirects, origin=IMPLICIT_GEMM_ORIGIN)
        _insert_stage(stages, self.stage_id, gemm)
        _insert_stage(stages, self.stage_id, gather)
        return state.with_stages(stages)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        gather, gemm = after.stages[self.stage_id], after.stages[self.stage_id + 1]
        reshape = after.stages[self.stage_id + 2]
        return [
            f"{pyname(gather)}, {pyname(gemm)} = s.implicit_gemm({pyname(stage)})",
            axes_line(gather, with_reduce=False),
            axes_line(gemm, with_reduce=True),
            axes_line(reshape, with_reduce=False, via_schedule=True),
        ]
