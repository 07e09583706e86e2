"""Steps that mark a stage without changing its loops: iterator annotations (GPU thread binding,
unroll, vectorize, parallel, tensorize), unroll pragmas, the storage alignment and double
buffering (or deeper pipelining) of a shared cache buffer and how its tiles are copied, the
Tensor Core instructions of an accumulator stage and the double buffering of its operand
fragments in registers, and the element type of a Tensor Core stage's copy-out tile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autosched.errors import ScheduleError
from autosched.schedule.stage import (
    ANNOTATIONS,
    OPERAND_COPIES,
    PIPELINE_STAGES,
    TENSOR_CORE_INSTRUCTIONS,
    TENSORIZE,
    THREAD_ANNOTATIONS,
    Iterator,
    SplitRel,
    Stage,
)
from autosched.schedule.steps.base import StateT, Step, StepTarget, check, pyiter, pyname, replace

# The Tensor Core intrinsic a tensorized stage becomes, by the stage's scope; any other stage
# (the copy-out of an accumulator) stores.
TENSOR_INTRINSICS = {
    "wmma.matrix_a": "wmma.load_matrix_a",
    "wmma.matrix_b": "wmma.load_matrix_b",
    "wmma.accumulator": "wmma.mma_sync",
}
STORE_INTRINSIC = "wmma.store_matrix"


def tensor_intrinsic(scope: str) -> str:
    """The name of the wmma intrinsic a tensorized stage of scope `scope` becomes."""
    return TENSOR_INTRINSICS.get(scope, STORE_INTRINSIC)


@dataclass(frozen=True, slots=True)
class AnnotationStep(Step):
    """Bind an iterator to a GPU thread axis, or mark it unroll / vectorize / parallel /
    tensorize (the nest from it inward becomes one Tensor Core operation)."""

    TAG: ClassVar[str] = "AN"
    stage_id: int
    iter_id: int
    annotation: str

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        ii = stage.iter_index(self.iter_id)
        it = stage.iters[ii]
        check(
            self.annotation in ANNOTATIONS,
            lambda: (
                f"unknown annotation {self.annotation!r} for "
                f"{stage.name}.{it.name}; known: {ANNOTATIONS}"
            ),
        )
        check(
            it.annotation in ("none", self.annotation),
            lambda: f"iterator {stage.name}.{it.name} is already annotated {it.annotation!r}",
        )
        if self.annotation in THREAD_ANNOTATIONS and self.annotation != "vthread":
            for other in stage.iters:
                if (
                    other is not it
                    and other.annotation == self.annotation
                    and other.extent != it.extent
                ):
                    raise ScheduleError(
                        f"stage {stage.name!r} binds {self.annotation} twice with different "
                        f"extents ({other.name}: {other.extent}, {it.name}: {it.extent})"
                    )
        new_it = Iterator(it.name, it.extent, it.kind, self.annotation)
        iters = stage.iters[:ii] + (new_it,) + stage.iters[ii + 1 :]
        return state.replace_stage(self.stage_id, replace(stage, iters=iters))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        it = pyiter(stage, stage.iters[self.iter_id].name)
        S = pyname(stage)
        if self.annotation in THREAD_ANNOTATIONS:
            return [f's[{S}].bind({it}, te.thread_axis("{self.annotation}"))']
        if self.annotation == "none":
            return []
        if self.annotation == TENSORIZE:
            return [f's[{S}].tensorize({it}, "{tensor_intrinsic(stage.scope)}")']
        return [f"s[{S}].{self.annotation}({it})"]


PRAGMAS = (
    "auto_unroll_max_step",
    "unroll_explicit",
    "launch_min_blocks",
    "stream_reads",
    "stream_writes",
    "fast_exp",
    "online_exchange",
    "single_pass",
)


@dataclass(frozen=True, slots=True)
class PragmaStep(Step):
    """`auto_unroll_max_step$N` (unroll inner loops up to N steps), `unroll_explicit$0/1`, or
    `launch_min_blocks$N` (a root stage: its kernel's `__launch_bounds__` asks for N blocks per
    SM, N >= 1), or `stream_reads$0/1` (a root stage: its kernel reads the global buffers it
    never writes with streaming, evict-first loads), or `stream_writes$0/1` (a root stage: its
    kernel stores the global buffers it never reads with streaming stores), or `fast_exp$0/1`
    (a root stage: its kernel's float32 exponentials are fast ones, `__expf`), or
    `online_exchange$0/1` (a sum of
    exp(x - max) over a cluster: one exchange of (max, sum) pairs; Stage.online_exchange), or
    `single_pass$0/1` (a root stage of partial sums: the kernel summing them runs in its last
    block; Stage.single_pass)."""

    TAG: ClassVar[str] = "PR"
    stage_id: int
    iter_id: int
    pragma_type: str

    def parsed(self) -> tuple[str, int]:
        """The pragma's name and value."""
        name, _, value = self.pragma_type.partition("$")
        check(
            name in PRAGMAS and value.lstrip("-").isdigit(),
            lambda: f"unknown pragma {self.pragma_type!r}; use one of {PRAGMAS} as 'name$value'",
        )
        return name, int(value)

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        stage.iter_index(self.iter_id)
        name, value = self.parsed()
        if name == "auto_unroll_max_step":
            new = replace(stage, auto_unroll_max_step=value, unroll_explicit=True)
        elif name == "launch_min_blocks":
            check(value >= 1, lambda: f"launch_min_blocks must be 1 or more, got {value}")
            new = replace(stage, launch_min_blocks=value)
        elif name == "stream_reads":
            check(value in (0, 1), lambda: f"stream_reads must be 0 or 1, got {value}")
            new = replace(stage, stream_reads=bool(value))
        elif name == "stream_writes":
            check(value in (0, 1), lambda: f"stream_writes must be 0 or 1, got {value}")
            new = replace(stage, stream_writes=bool(value))
        elif name == "fast_exp":
            check(value in (0, 1), lambda: f"fast_exp must be 0 or 1, got {value}")
            new = replace(stage, fast_exp=bool(value))
        elif name == "online_exchange":
            check(value in (0, 1), lambda: f"online_exchange must be 0 or 1, got {value}")
            new = replace(stage, online_exchange=bool(value))
        elif name == "single_pass":
            check(value in (0, 1), lambda: f"single_pass must be 0 or 1, got {value}")
            new = replace(stage, single_pass=bool(value))
        else:
            new = replace(stage, unroll_explicit=bool(value))
        return state.replace_stage(self.stage_id, new)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        it = pyiter(stage, stage.iters[self.iter_id].name)
        name, value = self.parsed()
        S = pyname(stage)
        if name == "auto_unroll_max_step":
            return [
                f's[{S}].pragma({it}, "auto_unroll_max_step", {value})',
                f's[{S}].pragma({it}, "unroll_explicit", True)',
            ]
        if name in (
            "launch_min_blocks",
            "stream_reads",
            "stream_writes",
            "fast_exp",
            "online_exchange",
            "single_pass",
        ):
            return [f's[{S}].pragma({it}, "{name}", {value})']
        return [f's[{S}].pragma({it}, "unroll_explicit", {bool(value)})']


def check_accumulator_of(stage: Stage, family: str, annotation: str, what: str) -> None:
    """Refuse `annotation` on `stage` unless it is an accumulator stage of the `family`
    instructions (which alone `what`: the message's words for what the annotation does)."""
    check(
        stage.scope == "wmma.accumulator" and stage.tensor_core_instruction == family,
        lambda: (
            f"{annotation} on {stage.name!r}: only an accumulator stage of the {family} "
            f"instructions {what} (scope {stage.scope!r}, instructions "
            f"{stage.tensor_core_instruction!r}); tensor_core_instruction(stage, '{family}') first"
        ),
    )


def axis_of(stage: Stage, name: str) -> str:
    """The op axis iterator `name` stands for: itself, or (the outermost part of a split, of
    a split...) the axis it was split from; `name` when it is neither (fused, an inner part)."""
    axes = {a.name for a in getattr(stage.op, "axis", ())}
    outer_of = {r.children[0]: r.parent for r in stage.relations if isinstance(r, SplitRel)}
    while name not in axes and name in outer_of:
        name = outer_of[name]
    return name


@dataclass(frozen=True, slots=True)
class StorageAlignStep(Step):
    """Pad the allocation of a shared stage so that the dimension of `iter_id` has
    stride % factor == offset (TVM's `storage_align`; lowering's storage.py). The iterator
    must be one of the op's axes, or the outermost part of its splits (`axis_of`: a stage
    split by its sketch is padded after); the stage records that axis's dimension."""

    TAG: ClassVar[str] = "SA"
    stage_id: int
    iter_id: int
    factor: int
    offset: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check(
            self.factor > 0 and 0 <= self.offset < self.factor,
            lambda: f"storage_align on {stage.name!r}: need factor > 0 and 0 <= offset < factor",
        )
        name = axis_of(stage, stage.iters[stage.iter_index(self.iter_id)].name)
        axes = [a.name for a in getattr(stage.op, "axis", ())]
        check(
            name in axes,
            lambda: f"storage_align on {stage.name}.{name}: align one of the axes {axes}",
        )
        align = (axes.index(name), self.factor, self.offset)
        return state.replace_stage(self.stage_id, replace(stage, storage_align=align))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = before.stages[self.stage_id]
        it = pyiter(stage, axis_of(stage, stage.iters[self.iter_id].name))
        return [f"s[{pyname(stage)}].storage_align({it}, {self.factor}, {self.offset})"]


@dataclass(frozen=True, slots=True)
class DoubleBufferStep(Step):
    """Fetch a shared stage one iteration of its attach loop ahead, into the other of two
    buffers (TVM's `double_buffer`): the loop then needs one barrier per iteration instead of
    two, and the copy of the next tile (asynchronous where the GPU can: `cp.async`) overlaps
    the computation on the current one. Lowering (lower/double_buffer.py) does the rest."""

    TAG: ClassVar[str] = "DB"
    stage_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check(
            stage.scope == "shared",
            lambda: (
                f"double_buffer on {stage.name!r}: only a shared stage can be double-buffered "
                f"(its scope is {stage.scope!r})"
            ),
        )
        return state.replace_stage(self.stage_id, replace(stage, double_buffer=True))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        return [f"s[{pyname(before.stages[self.stage_id])}].double_buffer()"]


@dataclass(frozen=True, slots=True)
class TensorCoreInstructionStep(Step):
    """The instruction family that the tensorized multiply-accumulate of accumulator stage
    `stage_id` and the fragments it reads become: "wmma" (nvcuda::wmma fragments, the default),
    "mma" (per-lane registers, `ldmatrix` from shared memory and `mma.sync` m16n8k16;
    float16 / bfloat16 operands) or "wgmma" (Hopper's warpgroup MMA reading shared memory
    through descriptors, `lower/warpgroup_mma.py`). Lowering gives the choice to the fragment
    buffers (`ir.Buffer.fragment_flavour`)."""

    TAG: ClassVar[str] = "TC"
    stage_id: int
    instruction: str

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check(
            stage.scope == "wmma.accumulator",
            lambda: (
                f"tensor_core_instruction on {stage.name!r}: only an accumulator stage "
                f"(wmma.accumulator) chooses its instructions (its scope is {stage.scope!r})"
            ),
        )
        check(
            self.instruction in TENSOR_CORE_INSTRUCTIONS,
            lambda: (
                f"tensor_core_instruction on {stage.name!r}: unknown instruction family "
                f"{self.instruction!r}; known: {TENSOR_CORE_INSTRUCTIONS}"
            ),
        )
        new = replace(stage, tensor_core_instruction=self.instruction)
        return state.replace_stage(self.stage_id, new)

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        stage = pyname(before.stages[self.stage_id])
        return [f's[{stage}].tensor_core_instruction("{self.instruction}")']


@dataclass(frozen=True, slots=True)
class PipelineStagesStep(Step):
    """Give double-buffered shared stage `stage_id` `stages` buffers (2 to 5) instead of two:
    the tile of iteration k + stages - 1 is fetched (cp.async) while the block computes on
    tile k, each iteration waiting only for the oldest copies in flight. Lowering
    (lower/double_buffer.py) needs the same count for every pipelined stage of a loop."""

    TAG: ClassVar[str] = "PS"
    stage_id: int
    stages: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check(
            stage.double_buffer,
            lambda: f"pipeline_stages on {stage.name!r}: double_buffer the stage first",
        )
        check(
            self.stages in PIPELINE_STAGES,
            lambda: (
                f"pipeline_stages on {stage.name!r}: {self.stages!r} stages; "
                f"one of {PIPELINE_STAGES}"
            ),
        )
        return state.replace_stage(self.stage_id, replace(stage, pipeline_stages=self.stages))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        return [f"s[{pyname(before.stages[self.stage_id])}].pipeline_stages({self.stages})"]


@dataclass(frozen=True, slots=True)
class FragmentDoubleBufferStep(Step):
    """Double-buffer the operand fragments of mma accumulator stage `stage_id` in registers
    across the warp's k-steps (CUTLASS's warp-level mainloop): two register slots per fragment,
    the ldmatrix of k-step s + 1 issued before the mma of step s, so the shared-memory loads of
    the next step are in flight while the Tensor Cores work. Lowering
    (lower/fragment_double_buffer.py) does the rest; a k-step loop that runs once is left as
    it is."""

    TAG: ClassVar[str] = "FB"
    stage_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check_accumulator_of(stage, "mma", "fragment_double_buffer", "double-buffers its fragments")
        return state.replace_stage(self.stage_id, replace(stage, fragment_double_buffer=True))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        return [f"s[{pyname(before.stages[self.stage_id])}].fragment_double_buffer()"]


@dataclass(frozen=True, slots=True)
class OperandCopyStep(Step):
    """How double-buffered shared stage `stage_id` is filled: "cp.async" (every thread copies
    16-byte pieces, the default) or "tma" (Hopper: one thread's TMA box copies complete on an
    mbarrier the block waits on). Lowering (lower/tma_fetch.py) uses TMA where it can prove the
    boxes store what the cooperative copy does (a wgmma operand in the 128B-swizzled layout,
    copied from a param); elsewhere the mark changes nothing."""

    TAG: ClassVar[str] = "OC"
    stage_id: int
    copy: str

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check(
            stage.double_buffer,
            lambda: f"operand_copy on {stage.name!r}: double_buffer the stage first",
        )
        check(
            self.copy in OPERAND_COPIES,
            lambda: (
                f"operand_copy on {stage.name!r}: unknown copy {self.copy!r}; "
                f"one of {OPERAND_COPIES}"
            ),
        )
        return state.replace_stage(self.stage_id, replace(stage, operand_copy=self.copy))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        return [f's[{pyname(before.stages[self.stage_id])}].operand_copy("{self.copy}")']


@dataclass(frozen=True, slots=True)
class WarpSpecializeStep(Step):
    """Warp-specialise the TMA pipeline of wgmma accumulator stage `stage_id` (Hopper): one
    extra producer warpgroup issues the copies, the consumer warpgroups only wait, multiply and
    release each slot through an "empty" mbarrier, with no block barrier in the mainloop
    (lower/warp_specialize.py). Where the kernel holds no TMA pipeline the mark changes
    nothing."""

    TAG: ClassVar[str] = "WS"
    stage_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check_accumulator_of(stage, "wgmma", "warp_specialize", "is warp-specialised")
        return state.replace_stage(self.stage_id, replace(stage, warp_specialized=True))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        return [f"s[{pyname(before.stages[self.stage_id])}].warp_specialize()"]


@dataclass(frozen=True, slots=True)
class NarrowTileStep(Step):
    """Keep stage `stage_id`, the shared tile a Tensor Core stage's accumulators are copied out
    through, in the 16-bit type its epilogue casts every element to, instead of float32: the
    accumulators are rounded as they are stored (what the cast would do after the read), so
    the tile takes half the shared memory and the epilogue reads half the bytes. Lowering
    (lower/narrow_tile.py) narrows the tile where wgmmas store it and every read of it is that
    cast; elsewhere the mark changes nothing."""

    TAG: ClassVar[str] = "NT"
    stage_id: int

    def apply(self, state: StateT) -> StateT:
        stage = state.stages[self.stage_id]
        check(
            not stage.is_placeholder and stage.scope in ("global", "shared"),
            lambda: (
                f"narrow_tile on {stage.name!r}: only a computed stage lowering keeps in "
                f"memory, a Tensor Core stage's copy-out (scope {stage.scope!r})"
            ),
        )
        return state.replace_stage(self.stage_id, replace(stage, narrow_tile=True))

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        return [f"s[{pyname(before.stages[self.stage_id])}].narrow_tile()"]
