"""Loop states: a compute DAG's loop structure after a list of transform steps.

A State is an immutable value: stages (one per op, plus cache stages) and the steps that made
them. Every State method builds a step, applies it and returns the new State, so the search and a
replay from a record run the same code. Iterators are named as in the equivalent Python schedule
(`x_o`, `x_i`, `a_b_fused`), stages by op name.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from autosched.errors import ScheduleError
from autosched.schedule.op_info import OpInfo
from autosched.schedule.stage import TENSORIZE, Stage, stage_from_op
from autosched.schedule.state_printer import state_str
from autosched.schedule.steps import (
    AnnotationStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    ComputeRootStep,
    DoubleBufferStep,
    FollowFusedSplitStep,
    FollowSplitStep,
    FragmentDoubleBufferStep,
    FuseStep,
    ImplicitGemmStep,
    NarrowTileStep,
    OperandCopyStep,
    PipelineStagesStep,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    SplitStep,
    Step,
    StorageAlignStep,
    TensorCoreInstructionStep,
    WarpSpecializeStep,
)
from autosched.te.tensor import Operation, Tensor


class ScheduledDAG(Protocol):
    """What a State and its users read of its compute DAG: a `compute_dag.ComputeDAG`, named by
    this protocol because compute_dag imports this module (the DAG makes initial states)."""

    @property
    def ops(self) -> Sequence[Operation]: ...

    @property
    def outputs(self) -> Sequence[Operation]: ...

    @property
    def tensors(self) -> Sequence[Tensor]: ...

    @property
    def info(self) -> Mapping[int, OpInfo]: ...

    @property
    def workload_key(self) -> str: ...

    @property
    def flop_count(self) -> float: ...

    def get_init_state(self) -> State: ...


@dataclass(frozen=True, slots=True, eq=False)
class State:
    """A DAG's loop structure after `steps`. Compare with `==`; hash with `hash` or
    `fingerprint()`."""

    dag: ScheduledDAG
    stages: tuple[Stage, ...]
    steps: tuple[Step, ...] = ()
    _key: Any = field(default=None, compare=False)

    @staticmethod
    def from_dag(dag: ScheduledDAG) -> State:
        """The DAG's state before any step: one stage per op, loops over its axes."""
        # States are values, so every replay can start from the same initial state.
        state = _INIT_STATES.get(dag)
        if state is None:
            state = _INIT_STATES[dag] = State(dag, tuple(stage_from_op(op) for op in dag.ops))
        return state

    # ---- identity ----------------------------------------------------------------------------
    def key(self) -> tuple:
        if self._key is None:
            object.__setattr__(self, "_key", tuple(s.to_record() for s in self.steps))
        return self._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return (
            self.key() == other.key()
            and len(self.stages) == len(other.stages)
            and all(
                a.summary() == b.summary() for a, b in zip(self.stages, other.stages, strict=True)
            )
        )

    def __hash__(self) -> int:
        return hash(self.key())

    def fingerprint(self) -> str:
        """A hash of the steps that is stable across processes and versions (for dedup)."""
        text = json.dumps([list(r) for r in self.key()], separators=(",", ":"))
        return hashlib.sha1(text.encode()).hexdigest()

    # ---- lookup ------------------------------------------------------------------------------
    def stage_index(self, stage: int | str | Stage | Tensor | Operation) -> int:
        """Index of a stage given by index, op name, Stage, tensor or op."""
        if isinstance(stage, int):
            if not 0 <= stage < len(self.stages):
                raise ScheduleError(
                    f"stage index {stage} is out of range (0..{len(self.stages) - 1})"
                )
            return stage
        if isinstance(stage, Stage):
            stage = stage.op
        if isinstance(stage, Tensor):
            stage = stage.op
        if isinstance(stage, Operation):
            for i, s in enumerate(self.stages):
                if s.op is stage or s.produces is stage:
                    return i
            stage = stage.name
        for i, s in enumerate(self.stages):
            if s.name == stage:
                return i
        raise ScheduleError(f"no stage named {stage!r}; stages are {[s.name for s in self.stages]}")

    def stage_of_producer(self, op: Operation) -> int:
        """The stage whose result a load of `op`'s tensor reads."""
        for i, s in enumerate(self.stages):
            if s.produces is op:
                return i
        raise ScheduleError(f"no stage produces {op.name!r}")

    def __getitem__(self, stage: Any) -> Stage:
        return self.stages[self.stage_index(stage)]

    @property
    def is_complete(self) -> bool:
        """True when no iterator has an unknown extent (a sketch is incomplete)."""
        return all(it.extent is not None for s in self.stages for it in s.iters)

    # ---- applying steps ------------------------------------------------------------------------
    def apply(self, step: Step) -> State:
        """Apply `step` and return the new state (with the step appended)."""
        new = step.apply(self)
        return State(self.dag, new.stages, self.steps + (step,))

    def replace_stage(self, index: int, stage: Stage) -> State:
        stages = list(self.stages)
        stages[index] = stage
        return State(self.dag, tuple(stages), self.steps)

    def with_stages(self, stages: Sequence[Stage]) -> State:
        return State(self.dag, tuple(stages), self.steps)

    # Convenience methods in the TVM State API's shape; each records one step.
    def split(self, stage, it, lengths: Sequence[int | None], inner_to_outer: bool = True) -> State:
        si = self.stage_index(stage)
        ii = self.stages[si].iter_index(it)
        return self.apply(
            SplitStep(si, ii, self.stages[si].iters[ii].extent, tuple(lengths), inner_to_outer)
        )

    def follow_split(self, stage, it, src_step_id: int, n_split: int) -> State:
        si = self.stage_index(stage)
        return self.apply(FollowSplitStep(si, self.stages[si].iter_index(it), src_step_id, n_split))

    def follow_fused_split(
        self, stage, it, src_step_ids: Sequence[int], level: int, factor_or_nparts: bool
    ) -> State:
        si = self.stage_index(stage)
        return self.apply(
            FollowFusedSplitStep(
                si, self.stages[si].iter_index(it), tuple(src_step_ids), level, factor_or_nparts
            )
        )

    def fuse(self, stage, iters: Iterable) -> State:
        si = self.stage_index(stage)
        return self.apply(FuseStep(si, tuple(self.stages[si].iter_index(i) for i in iters)))

    def reorder(self, stage, order: Iterable) -> State:
        si = self.stage_index(stage)
        return self.apply(ReorderStep(si, tuple(self.stages[si].iter_index(i) for i in order)))

    def compute_at(self, stage, target, it) -> State:
        si, ti = self.stage_index(stage), self.stage_index(target)
        return self.apply(ComputeAtStep(si, ti, self.stages[ti].iter_index(it)))

    def compute_root(self, stage) -> State:
        return self.apply(ComputeRootStep(self.stage_index(stage)))

    def compute_inline(self, stage) -> State:
        return self.apply(ComputeInlineStep(self.stage_index(stage)))

    def cache_read(self, stage, scope: str, readers: Iterable) -> State:
        return self.apply(
            CacheReadStep(
                self.stage_index(stage), scope, tuple(self.stage_index(r) for r in readers)
            )
        )

    def cache_write(self, stage, scope: str = "local") -> State:
        return self.apply(CacheWriteStep(self.stage_index(stage), scope))

    def rfactor(self, stage, it, factor_iter_id: int) -> State:
        """Factor the reduce iterator `it` out of `stage`: a new stage `<name>.rf` (inserted
        before it) computes partial reductions with `it` as spatial axis `factor_iter_id`, and
        `stage` then reduces those. Both stages get fresh iterators."""
        si = self.stage_index(stage)
        return self.apply(RfactorStep(si, self.stages[si].iter_index(it), factor_iter_id))

    def implicit_gemm(self, stage) -> State:
        """Rewrite convolution `stage` as a matrix product: a gather `<name>.im2col` and a
        product `<name>.gemm` (inserted before it, in that order) whose rows are the output
        pixels; `stage` then reshapes the product (`schedule.implicit_gemm`)."""
        return self.apply(ImplicitGemmStep(self.stage_index(stage)))

    def annotate(self, stage, it, annotation: str) -> State:
        si = self.stage_index(stage)
        return self.apply(AnnotationStep(si, self.stages[si].iter_index(it), annotation))

    def bind(self, stage, it, thread: str) -> State:
        return self.annotate(stage, it, thread)

    def vectorize(self, stage, it) -> State:
        return self.annotate(stage, it, "vectorize")

    def unroll(self, stage, it) -> State:
        return self.annotate(stage, it, "unroll")

    def parallel(self, stage, it) -> State:
        return self.annotate(stage, it, "parallel")

    def tensorize(self, stage, it) -> State:
        """Mark iterator `it` of `stage` "tensorize": it and the iterators inside it (two
        spatial of extent 16, plus one reduce of extent 16 for a multiply-accumulate) become
        one Tensor Core operation, chosen by the stage's role (see docs/TENSOR_CORES.md)."""
        return self.annotate(stage, it, TENSORIZE)

    def pragma(self, stage, it, name: str, value: int | bool) -> State:
        si = self.stage_index(stage)
        return self.apply(PragmaStep(si, self.stages[si].iter_index(it), f"{name}${int(value)}"))

    def storage_align(self, stage, it, factor: int, offset: int) -> State:
        si = self.stage_index(stage)
        return self.apply(StorageAlignStep(si, self.stages[si].iter_index(it), factor, offset))

    def double_buffer(self, stage) -> State:
        """Fetch shared stage `stage` one iteration of its attach loop ahead, into the other of
        two buffers (see `DoubleBufferStep`)."""
        return self.apply(DoubleBufferStep(self.stage_index(stage)))

    def pipeline_stages(self, stage, stages: int) -> State:
        """Give double-buffered shared stage `stage` `stages` buffers, fetched `stages` - 1
        iterations ahead (see `PipelineStagesStep`)."""
        return self.apply(PipelineStagesStep(self.stage_index(stage), stages))

    def operand_copy(self, stage, copy: str) -> State:
        """How double-buffered shared stage `stage` is filled: "cp.async" or "tma" (see
        `OperandCopyStep`)."""
        return self.apply(OperandCopyStep(self.stage_index(stage), copy))

    def warp_specialize(self, stage) -> State:
        """Give wgmma accumulator stage `stage`'s TMA pipeline a producer warpgroup (see
        `WarpSpecializeStep`)."""
        return self.apply(WarpSpecializeStep(self.stage_index(stage)))

    def narrow_tile(self, stage) -> State:
        """Keep shared stage `stage`, a Tensor Core stage's copy-out tile, in the 16-bit type
        its epilogue casts to (see `NarrowTileStep`)."""
        return self.apply(NarrowTileStep(self.stage_index(stage)))

    def tensor_core_instruction(self, stage, instruction: str) -> State:
        """The Tensor Core instruction family ("wmma" or "mma") of accumulator stage `stage`'s
        multiply-accumulate and the fragments it reads (see `TensorCoreInstructionStep`)."""
        return self.apply(TensorCoreInstructionStep(self.stage_index(stage), instruction))

    def fragment_double_buffer(self, stage) -> State:
        """Hold two k-steps of mma accumulator stage `stage`'s operand fragments in registers,
        loading step s + 1 before the mma of step s (see `FragmentDoubleBufferStep`)."""
        return self.apply(FragmentDoubleBufferStep(self.stage_index(stage)))

    def __str__(self) -> str:
        return state_str(self)

    __repr__ = __str__


_INIT_STATES: weakref.WeakKeyDictionary[ScheduledDAG, State] = weakref.WeakKeyDictionary()
