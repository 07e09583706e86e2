"""Whether a candidate state is valid for a GPU: one check and one set of rejection reasons,
shared by the sampler (fresh states) and the search's evaluation (mutated candidates).

    program, reason = check_candidate(state, hardware, params)   # lowered program, or the reason

The check runs from cheap to expensive: the state's own annotations and root threads
(`check_state`), its lowering plan's shared and local buffers (`check_plan`), emission and the
passes, then the lowered program's launch and resource limits (`check_program`). The first two
count lower bounds of what the third does, so they refuse only what it would refuse, before
most of a lowering's cost. Every reason is a
`Reason` value, or one of the two qualified forms `tile_sizes:<Reason>` (the init rules found no
tile sizes that fit) and `internal_error:<exception class>` (a bug elsewhere, logged: it costs one
candidate, never the search). Reasons are strings, so they count in a `collections.Counter`.
"""

from __future__ import annotations

import enum
import logging
import math

from autosched.codegen.lanes import is_accumulation
from autosched.errors import LoweringError, ScheduleError
from autosched.lower import ir, stmt_walk
from autosched.lower.lowering import lower_plan
from autosched.lower.plan import LoweringPlan
from autosched.lower.planning import make_plan
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ROOT, TENSORIZE, Stage
from autosched.sketch.launch_bounds import row_thread_registers
from autosched.sketch.params import SketchParams
from autosched.te.dtype import BYTES
from autosched.te.expr import Load
from autosched.te.visitor import free_vars, walk
from measure.hardware import HardwareParams

log = logging.getLogger(__name__)


class Reason(str, enum.Enum):
    """Why a candidate is invalid. A string: it prints, formats and counts as its value."""

    SCHEDULE_ERROR = "schedule_error"  # a step does not apply (replay, an init rule)
    LOWERING_ERROR = "lowering_error"  # the state does not lower to a loop nest
    VTHREAD = "vthread"  # virtual threads over the hardware's limit
    THREADS_PER_BLOCK = "threads_per_block"
    TOO_FEW_THREADS = "too_few_threads"  # a tiled stage's block below a warp
    SHARED_MEMORY = "shared_memory"
    LOCAL_MEMORY = "local_memory"  # `local` elements per thread over SketchParams'
    # accumulators over the register estimate, or a thread-private row cache over
    # SketchParams' `max_row_register_elems`
    REGISTERS = "registers"
    VECTOR_BYTES = "vector_bytes"  # a vectorised store wider than SketchParams'
    CODE_SIZE = "code_size"  # statements once unrolled over SketchParams'
    NO_OPTION = "no_option"  # no tile size of some axis fits
    NO_SPATIAL_LOOP = "no_spatial_loop"  # a root stage with nothing to bind to threads
    DUPLICATE = "duplicate"  # a state the sampler drew before
    INTERNAL_ERROR = "internal_error"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


def tile_sizes(reason: Reason) -> str:
    """The reason of a state whose tile sizes, redrawn many times, kept breaking `reason`."""
    return f"tile_sizes:{reason}"


# The exceptions that mean "this candidate is invalid"; any other is a bug (internal_error).
_ERROR_REASONS: tuple[tuple[type[Exception], Reason], ...] = (
    (LoweringError, Reason.LOWERING_ERROR),
    (ScheduleError, Reason.SCHEDULE_ERROR),
)


def reason_for(exc: Exception, doing: str) -> str:
    """The rejection reason of an exception raised while `doing` something to a candidate
    (unexpected ones are logged: they point at a bug)."""
    for cls, reason in _ERROR_REASONS:
        if isinstance(exc, cls):
            return str(reason)
    log.warning("%s failed: %s: %s", doing, type(exc).__name__, exc)
    return f"{Reason.INTERNAL_ERROR}:{type(exc).__name__}"


class Rejected(Exception):
    """A candidate is invalid; `reason` is a rejection reason (see the module docstring)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = str(reason)


def check_state(state: State, hardware: HardwareParams) -> Reason | None:
    """Limits visible on the state itself (cheap), checked before lowering so that a candidate
    lowering would refuse costs no lowering: vthread extents, and the threads a kernel's root
    stage binds (`root_threads`)."""
    for stage in state.stages:
        for it in stage.iters:
            if it.annotation == "vthread" and (it.extent or 0) > hardware.max_vthread_extent:
                return Reason.VTHREAD
        if stage.compute_at == ROOT and not stage.is_placeholder:
            if root_threads(stage) > hardware.max_threads_per_block:
                return Reason.THREADS_PER_BLOCK
    return None


def root_threads(stage: Stage) -> int:
    """The threads a root stage's own threadIdx iterators ask of its kernel's block: the
    product over the thread tags of each tag's largest extent. A root stage's extents are the
    ones lowering gives it (its region is its whole tensor), and the block takes per tag the
    largest extent over the kernel's stages, so a kernel has at least this many threads: over
    the hardware's limit, lowering would refuse the candidate (`check_program`) as well."""
    extents = dict.fromkeys(ir.THREAD_TAGS, 1)
    for it in stage.iters:
        if it.annotation in extents and it.extent is not None:
            extents[it.annotation] = max(extents[it.annotation], it.extent)
    return math.prod(extents.values())


def vector_bytes(s: ir.Stmt) -> int:
    """The widest vectorised access of a statement tree, in bytes: a vector loop's stores, or
    for a loop of reduction steps (its store the same element in every lane) its loads that
    move with the lane."""
    widest = 0
    for node in ir.iter_stmts(s):
        if isinstance(node, ir.For) and node.kind == "vectorize":
            for inner in ir.iter_stmts(node.body):
                if not isinstance(inner, ir.Store):
                    continue
                if not is_accumulation(inner, node.var):
                    widest = max(widest, node.extent * BYTES.get(inner.buffer.dtype, 4))
                    continue
                for ld in walk(inner.value):
                    if isinstance(ld, Load) and any(v is node.var for v in free_vars(ld)):
                        widest = max(widest, node.extent * BYTES.get(ld.buffer.dtype, 4))
    return widest


# what a store to global memory counts for in `unrolled_statements`: an unrolled loop of them
# (a reduction accumulating in global memory, softmax's sums) compiles far slower than one of
# register updates, and such builds were what passed the compile limit
GLOBAL_STORE_STATEMENTS = 2


def _statement_weight(s: ir.Stmt) -> int:
    return GLOBAL_STORE_STATEMENTS if isinstance(s, ir.Store) and s.buffer.scope == "global" else 1


def unrolled_statements(s: ir.Stmt) -> int:
    """How many statements the kernel body has once its unrolled loops are unrolled (the code
    nvcc has to compile and keep in registers), stores to global memory counted
    `GLOBAL_STORE_STATEMENTS` times."""
    return stmt_walk.executed_statements(s, ("unroll",), weight=_statement_weight)


def fits_row_registers(
    kept: int, k: ir.Kernel, hardware: HardwareParams, params: SketchParams
) -> bool:
    """Whether kernel `k`, whose threads keep `kept` elements of their rows in registers
    (thread-private caches), keeps them within `SketchParams.max_row_register_elems` and,
    with the rest of a row kernel's registers (`launch_bounds.row_thread_registers`, counting
    each global input read besides the row), within what ptxas gives a thread at the
    kernel's launch bounds (beyond that, the cache spills to local memory)."""
    threads = k.threads_per_block * max(1, k.min_blocks_per_sm or 1)
    limit = hardware.registers_per_thread_limit(threads)
    written = {id(s.buffer) for s in ir.iter_stmts(k.body) if isinstance(s, ir.Store)}
    inputs = {
        id(ld.buffer)
        for s in ir.iter_stmts(k.body)
        if isinstance(s, ir.Store)
        for ld in walk(s.value)
        if isinstance(ld, Load)
        and getattr(ld.buffer, "scope", None) == "global"
        and id(ld.buffer) not in written
    }
    need = row_thread_registers(kept, max(0, len(inputs) - 1))
    return kept <= params.max_row_register_elems and need <= limit


def check_plan(plan: LoweringPlan, hardware: HardwareParams, params: SketchParams) -> Reason | None:
    """The limits a lowering plan already shows, checked before its code is emitted (a
    candidate refused here costs no emission, passes or features): each kernel's shared bytes
    (`plan_shared_bytes`) over the hardware's opt-in limit, its `local` elements per thread
    (`plan_local_elems`) over `SketchParams.max_local_elems`. Both count at most what the
    lowered kernel holds, so a plan refused here is one `check_program` would refuse."""
    for root in plan.kernel_roots():
        if plan_shared_bytes(plan, root) > hardware.max_shared_memory_per_block_optin:
            return Reason.SHARED_MEMORY
        if plan_local_elems(plan, root) > params.max_local_elems:
            return Reason.LOCAL_MEMORY
    return None


def plan_shared_bytes(plan: LoweringPlan, root: int) -> int:
    """The shared bytes of root stage `root`'s kernel as planned, at most what the lowered
    kernel allocates (`ir.Kernel.shared_bytes`): its stages' shared buffers, which the passes
    keep or make larger, and emission adds to. In a Tensor Core kernel (fragments, or a
    tensorized stage) an epilogue tile may come to lie over its operand tiles
    (`shared_alias`), so there the largest buffer is left out."""
    stages = plan.subtree(root)[1:]
    buffers = [plan.info[j].buf for j in stages]
    sizes = [
        b.size * BYTES[b.dtype]
        for b in buffers
        if b.scope == "shared" and b.fragment_flavour != ir.WGMMA_FLAVOUR
    ]
    tensor_core = any(b.scope not in ("global", "shared", "local") for b in buffers) or any(
        it.annotation == TENSORIZE for j in [root, *stages] for it in plan.stages[j].iters
    )
    return sum(sizes) - (max(sizes) if tensor_core and sizes else 0)


def plan_local_elems(plan: LoweringPlan, root: int) -> int:
    """The `local` elements per thread of root stage `root`'s kernel as planned: its stages'
    local buffers. The lowered kernel holds at least as many (`check_program` counts them):
    the passes keep every such buffer or make it larger (virtual threads and double buffering
    copy it), and emission adds temporaries; only warpgroup fragments, which the wgmma pass
    removes, are left out here."""
    return sum(
        b.size
        for b in (plan.info[j].buf for j in plan.subtree(root)[1:])
        if b.scope == "local" and b.fragment_flavour != ir.WGMMA_FLAVOUR
    )


def check_program(
    program: ir.Program, hardware: HardwareParams, params: SketchParams
) -> Reason | None:
    """The first limit a lowered program breaks, or None: the hardware's launch limits, then
    the sketch parameters' bounds on registers, vector width and code size. Shared memory may
    reach the opt-in limit: above the static limit the printer makes it dynamic."""
    for k in program.kernels:
        if k.threads_per_block > hardware.max_threads_per_block:
            return Reason.THREADS_PER_BLOCK
        if k.shared_bytes > hardware.max_shared_memory_per_block_optin:
            return Reason.SHARED_MEMORY
        if sum(b.size for b in k.allocs if b.scope == "local") > params.max_local_elems:
            return Reason.LOCAL_MEMORY
        kept = sum(b.size for b in k.allocs if b.thread_private)
        if kept and not fits_row_registers(kept, k, hardware, params):
            return Reason.REGISTERS
        if vector_bytes(k.body) > params.max_vector_bytes:
            return Reason.VECTOR_BYTES
        if unrolled_statements(k.body) > params.max_unrolled_statements:
            return Reason.CODE_SIZE
    return None


def check_candidate(
    state: State, hardware: HardwareParams, params: SketchParams
) -> tuple[ir.Program | None, str | None]:
    """(lowered program, None) for a valid state, (None, reason) for an invalid one. Never
    raises for a candidate: an unexpected exception is an `internal_error:<class>` reason."""
    reason = check_state(state, hardware)
    if reason is not None:
        return None, str(reason)
    try:
        plan = make_plan(state)
        reason = check_plan(plan, hardware, params)
        if reason is not None:
            return None, str(reason)
        program = lower_plan(plan)
    except Exception as exc:
        return None, reason_for(exc, "lowering a candidate")
    reason = check_program(program, hardware, params)
    if reason is not None:
        return None, str(reason)
    return program, None


__all__ = [
    "Reason",
    "Rejected",
    "check_candidate",
    "check_plan",
    "check_program",
    "check_state",
    "plan_local_elems",
    "plan_shared_bytes",
    "reason_for",
    "root_threads",
    "tile_sizes",
    "unrolled_statements",
]
