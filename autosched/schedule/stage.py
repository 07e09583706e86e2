"""The data of a loop state: stages, their iterators, and the split/fuse relations between them.

A stage is one op's loop nest (plus cache stages); its iterators are named as in the equivalent
Python schedule (`x_o`, `x_i`, `a_b_fused`), stages by op name. Transform steps and lowering read
and rebuild these values; `loop_state.State` holds a tuple of them and the steps that made them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from autosched.errors import ScheduleError
from autosched.te.expr import IterVar
from autosched.te.tensor import ComputeOp, Operation, PlaceholderOp

SPATIAL, REDUCE, MIXED, SPECIAL = "spatial", "reduce", "mixed", "special"

ANNOTATIONS = (
    "none",
    "unroll",
    "vectorize",
    "parallel",
    "vthread",
    "blockIdx.x",
    "blockIdx.y",
    "blockIdx.z",
    "threadIdx.x",
    "threadIdx.y",
    "threadIdx.z",
    "tensorize",
    "clusterCtaIdx.x",
)
# The block's rank in its thread-block cluster (sm_90; lower/cluster_ir.py): an iterator bound
# to it runs over the cluster's blocks, its extent the cluster size; the kernel's blocks along
# blockIdx.x become clusters of that many blocks (sketch/row_cluster.py).
CLUSTER_RANK_TAG = "clusterCtaIdx.x"
THREAD_ANNOTATIONS = frozenset(a for a in ANNOTATIONS if "Idx" in a or a == "vthread")
# Marks the first iterator of a 16x16(x16) nest that lowering emits as one warp-collective
# Tensor Core operation (docs/TENSOR_CORES.md); not a thread binding.
TENSORIZE = "tensorize"
# The instruction families of a tensorized multiply-accumulate (`Stage.tensor_core_instruction`,
# lowering's `ir.Buffer.fragment_flavour`): nvcuda::wmma, or ldmatrix + mma.sync
TENSOR_CORE_INSTRUCTIONS = ("wmma", "mma", "wgmma")
# The buffers a double-buffered shared stage may cycle through (`Stage.pipeline_stages`)
PIPELINE_STAGES = (2, 3, 4, 5)
# How a pipelined shared operand stage is filled (`Stage.operand_copy`): every thread's cp.async,
# or one thread's TMA box copies completing on an mbarrier (sm_90; lower/tma_fetch.py)
OPERAND_COPIES = ("cp.async", "tma")

ROOT, INLINED, ATTACHED = "root", "inlined", "attached"


@dataclass(frozen=True, slots=True)
class Iterator:
    """One loop of a stage. `extent` is None for a sketch's unknown tile size."""

    name: str
    extent: int | None
    kind: str
    annotation: str = "none"


@dataclass(frozen=True, slots=True)
class SplitRel:
    """`parent` was split into `children` (outer to inner) by `lengths`: the inner parts'
    extents when `inner_to_outer` (like `factor=`), else the outer parts' (like `nparts=`)."""

    parent: str
    children: tuple[str, ...]
    lengths: tuple = ()
    inner_to_outer: bool = True


@dataclass(frozen=True, slots=True)
class FuseRel:
    """`children` (outer to inner) were fused into `fused`."""

    children: tuple[str, ...]
    fused: str


@dataclass(frozen=True, slots=True)
class Stage:
    """One op's loop nest inside a state.

    `op` is what the stage computes. `produces` is the op whose tensor other stages' bodies load
    to read this stage's result (differs from `op` only for a cache_write's original stage).
    `redirects` maps an input op (by identity) to the op this stage reads instead (cache_read).
    """

    op: Operation
    produces: Operation
    iters: tuple[Iterator, ...]
    root_iters: tuple[Iterator, ...]
    relations: tuple[SplitRel | FuseRel, ...] = ()
    compute_at: str = ROOT
    attach: tuple[int, str] | None = None  # (target stage index, target iterator name)
    scope: str = "global"
    redirects: tuple[tuple[Operation, Operation], ...] = ()
    auto_unroll_max_step: int = 0
    unroll_explicit: bool = False
    # a root stage: the blocks per SM its kernel's `__launch_bounds__` asks ptxas to fit
    launch_min_blocks: int = 1
    # a root stage: its kernel reads the global buffers it never writes with streaming loads
    # (`__ldcs`, evict-first: read-once data does not push reused lines out of the caches)
    stream_reads: bool = False
    # a root stage: its kernel stores the global buffers it never reads with streaming stores
    # (`__stcs`, evict-first: an output written once does not push reused lines out of L2)
    stream_writes: bool = False
    # a root stage: its kernel's float32 exponentials are fast ones (`__expf`; lower/fast_exp.py)
    fast_exp: bool = False
    # a cross-thread sum of exp(x - m) over a cluster, m a max reduction over the same cluster:
    # the blocks exchange their (max, sum) pairs once, the sums rescaled to the row's max
    # (online softmax; lower/online_exchange.py), instead of the max and then the sum
    online_exchange: bool = False
    # a root stage of partial sums (rfactor): the kernel that sums them runs in its last block
    # to finish, one kernel for both (lower/single_pass.py)
    single_pass: bool = False
    storage_align: tuple[int, int, int] | None = None  # (axis, factor, offset)
    double_buffer: bool = False  # a shared stage fetched one iteration ahead (two buffers)
    # a double-buffered stage: its buffers (PIPELINE_STAGES), fetched that many - 1 ahead
    pipeline_stages: int = 2
    # an accumulator stage: the Tensor Core instruction family (TENSOR_CORE_INSTRUCTIONS)
    tensor_core_instruction: str = "wmma"
    # an mma accumulator stage: its operand fragments hold two k-steps in registers, the
    # ldmatrix of step s + 1 issued before the mma of step s (`FragmentDoubleBufferStep`)
    fragment_double_buffer: bool = False
    # a pipelined shared stage that wgmmas read: how its tiles are copied (OPERAND_COPIES)
    operand_copy: str = "cp.async"
    # a wgmma accumulator stage: its TMA pipeline has a producer warpgroup (warp_specialize)
    warp_specialized: bool = False
    # the shared copy-out tile of a wgmma stage's accumulators: kept in the 16-bit type its
    # epilogue casts every element to (`NarrowTileStep`; lower/narrow_tile.py)
    narrow_tile: bool = False
    origin: str = "dag"

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def compute_op(self) -> ComputeOp:
        """The op of a stage that computes one (every stage but a placeholder's); a
        ScheduleError for a placeholder."""
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"stage {self.name!r} is a placeholder, not a computation")
        return self.op

    @property
    def axes(self) -> tuple[IterVar, ...]:
        """The spatial axes of the stage's op (none for a placeholder)."""
        return self.op.axis if isinstance(self.op, ComputeOp) else ()

    def iter_index(self, it: int | str | Iterator) -> int:
        """Position of an iterator given by index, name or Iterator, with a clear error."""
        if isinstance(it, Iterator):
            it = it.name
        if isinstance(it, int):
            if not 0 <= it < len(self.iters):
                raise ScheduleError(
                    f"stage {self.name!r} has {len(self.iters)} iterators; "
                    f"index {it} is out of range"
                )
            return it
        for i, x in enumerate(self.iters):
            if x.name == it:
                return i
        raise ScheduleError(
            f"stage {self.name!r} has no iterator named {it!r} (it may have been split or fused "
            f"already); its iterators are {[x.name for x in self.iters]}"
        )

    def summary(self) -> tuple:
        """A structural, process-independent description (used for equality)."""
        return (
            self.name,
            self.iters,
            self.compute_at,
            self.attach,
            self.scope,
            self.auto_unroll_max_step,
            self.unroll_explicit,
            self.launch_min_blocks,
            self.stream_reads,
            self.stream_writes,
            self.fast_exp,
            self.online_exchange,
            self.single_pass,
            self.storage_align,
            self.double_buffer,
            self.pipeline_stages,
            self.tensor_core_instruction,
            self.fragment_double_buffer,
            self.operand_copy,
            self.warp_specialized,
            self.narrow_tile,
            tuple((a.name, b.name) for a, b in self.redirects),
        )


def _root_iters(op: Operation) -> tuple[Iterator, ...]:
    if not isinstance(op, ComputeOp):
        return ()
    its = [Iterator(a.name, a.extent, SPATIAL) for a in op.axis]
    its += [Iterator(a.name, a.extent, REDUCE) for a in op.reduce_axis]
    return tuple(its)


def stage_from_op(op: Operation, **kw: Any) -> Stage:
    roots = _root_iters(op)
    return Stage(op=op, produces=kw.pop("produces", op), iters=roots, root_iters=roots, **kw)


class HasStages(Protocol):
    """Anything holding a loop state's stages (a `loop_state.State`): what the dataflow queries
    and the state printer read, typed here so that those modules need not import loop_state,
    which imports them."""

    @property
    def stages(self) -> tuple[Stage, ...]: ...
