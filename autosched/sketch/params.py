"""The settings of sketch generation and random annotation: `SketchParams`, one frozen dataclass
with defaults (no environment variables)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from autosched.lower.cluster_ir import CLUSTER_SIZES
from autosched.schedule.stage import OPERAND_COPIES, TENSOR_CORE_INSTRUCTIONS


class TaskOptions(Protocol):
    """What of a search task reaches the sketch rules (a SearchTask is one)."""

    @property
    def allow_tf32(self) -> bool: ...


@dataclass(frozen=True)
class SketchParams:
    """Knobs of sketch generation and random annotation.

    `gpu_structure`: the multi-level tiling structure; `S` levels split spatial iterators, `R`
    levels reduction iterators (Ansor's GPU default `SSSRRSRS`). The first three `S` levels are
    bound to blockIdx.x, vthread and threadIdx.x by the init rules.
    """

    gpu_structure: str = "SSSRRSRS"
    max_innermost_split_factor: int = 64
    # auto_unroll_max_step depths of CUDA-core stages (fresh draws and the unroll mutation).
    # Ansor's GPU menu also has 0 and 16: the float32 workloads' fastest kernels do not need
    # them, and they make a random state much slower than its tiling can be, so that a search
    # judging a tiling by its first states would leave good ones
    auto_unroll_configs: tuple[int, ...] = (64, 512, 1024)
    # the depths of Tensor Core stages, whose fastest kernels use every depth, 0 included
    tensor_core_unroll_configs: tuple[int, ...] = (0, 16, 64, 512, 1024)
    thread_counts: tuple[int, ...] = (32, 64, 128, 256, 512)
    # threads of a cross-thread reduction (multiples of the warp size; the init rules use
    # those up to the first that covers the reduction and the block limit)
    cross_thread_counts: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    vector_lengths: tuple[int, ...] = (1, 2, 4)
    # the elements (or vectors) a thread of a large fuse-split-bind stage may take, a block's
    # width apart, unrolled (sketch/thread_work.py); 1 is always among the draws
    thread_repeats: tuple[int, ...] = (1, 2, 4)
    # whether such a stage's innermost short reduction along memory (a pooling window's row)
    # may be read as one vector (sketch/thread_work.py)
    window_vectors: bool = True
    max_vector_bytes: int = 16
    # whether a row sum's warp-per-row sketches, and the rows kept in registers, also come with
    # their input read by streaming (evict-first) loads, the rows kept in registers with their
    # output written by streaming stores too (`CrossThreadReduction.rows_on_warps`,
    # `row_in_shared.with_streaming_twin`)
    stream_reads: bool = True
    # whether a kernel keeping its rows in registers may be drawn with fast float32
    # exponentials (`__expf`; init rule sketch/fast_exp.py)
    fast_exp: bool = True
    # elements of `local` buffers per thread: states with more spill registers far more often,
    # and none is among the fastest
    max_local_elems: int = 128
    # the fewest threads per SM a fresh sample's tiled stage launches: its accumulators per thread
    # are kept to at most the stage's outputs / (SMs x this) (at least one), since threads in all
    # = outputs / accumulators. Random tile sizes would put most samples of small-output stages
    # in launches of a few thousand threads, where the fastest kernels never lie. 0 leaves the
    # accumulators to `max_local_elems`.
    min_threads_per_sm: int = 64
    # statements once unrolled: larger kernels mostly spill, take many seconds to compile, and
    # none is among the fastest
    max_unrolled_statements: int = 1536
    tile_retries: int = 64  # resamples of one stage's tile sizes before the state is dropped
    # float32 matrix products may use TF32 Tensor Cores (the task's `allow_tf32`; off: exact
    # float32 arithmetic)
    allow_tf32: bool = False
    # the chance that the shared caches of one attach loop are double-buffered (fetched one
    # iteration ahead, asynchronously where the GPU can)
    double_buffer_probability: float = 0.5
    # the chance that a shared cache of a multi-level tiled (non-Tensor-Core) sketch whose rows
    # line up on the same banks gets its rows padded (SharedPadding): even odds, as whether the
    # conflicts cost more than the padding's shared memory depends on how the warp walks the tile
    shared_padding_probability: float = 0.5
    # the instruction families a float16 / bfloat16 Tensor Core stage is drawn from, uniformly
    # (TensorCoreInstruction): "wmma" (nvcuda::wmma), "mma" (ldmatrix + mma.sync m16n8k16) and
    # "wgmma" (Hopper's warpgroup MMA), the last drawn only on sm_90 and only for stages whose
    # drawn block tile warpgroups can compute (`tensor_core_instruction.py`); elsewhere the
    # draws are those of ("wmma", "mma")
    tensor_core_instructions: tuple[str, ...] = ("wmma", "mma", "wgmma")
    # how a stage drawn as wgmma (sm_90) is tiled (sketch/warpgroup_tile.py): its block tile is
    # drawn afresh for warpgroups (False: the block tile drawn for wmma / mma warps is kept,
    # where it is warpgroup-shaped), weighted toward the fast Hopper shapes, which a draw for
    # warps of 16 x 16 tiles makes rare (128 x 256 as two warpgroups: about one in a hundred):
    redraw_wgmma_tiles: bool = True
    # (warpgroups along M, weight): 1, 2 or 4 warpgroups of 64 rows each
    wgmma_warpgroup_weights: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (4, 1))
    # a block width (wgmma's N) of c 16-column tiles weighs c ** this: wider blocks read each
    # fetched byte of A more often (0: uniform)
    wgmma_width_exponent: float = 1.0
    # the weight of a K chunk of whole 128-byte rows (64 halves: the 128B swizzle's row, a TMA
    # box's line) against 1 for the others
    wgmma_swizzled_chunk_weight: int = 4
    # the chance that a wgmma stage whose K spans more than one chunk is pipelined (its shared
    # operands double-buffered, then deepened by PipelineStages) where DoubleBuffer did not
    wgmma_pipeline_probability: float = 0.9
    # the slot counts a pipelined wgmma stage is drawn from (those of `pipeline_stages`; all of
    # them where none of these fits): a pipeline of 3 or more keeps one group of wgmmas in
    # flight across the next step's barrier (lower/wgmma_mainloop.py)
    wgmma_pipeline_stages: tuple[int, ...] = (3, 4, 5)
    # an implicit GEMM conv's Tensor Core stage of at least this many multiply-adds per SM
    # (sm_90) is drawn as wgmma wherever wgmma fits it, its operands copied by TMA and its
    # epilogue in 16-byte vectors wherever they apply, instead of uniformly among the families
    # and with even odds (`tensor_core_instruction.hopper_sized`): a conv that large has work
    # enough per SM for the TMA-fed wgmma kernels the vendor libraries run on it, and uniform
    # draws would spend most of a search's samples on wmma and mma. Smaller convs (ResNet-50's
    # at batch 1: under 1 M per SM; at batch 32: 3 to 100 M) and matrix products keep the
    # uniform draws. 0: never
    wgmma_conv_macs_per_sm: int = 1 << 21
    # the slot counts a double-buffered Tensor Core stage's pipeline is drawn from, uniformly
    # among those that fit the shared memory (PipelineStages): 2 is plain double buffering
    pipeline_stages: tuple[int, ...] = (2, 3, 4, 5)
    # whether an mma stage whose fragments would cross double-buffered shared tiles holds them
    # in two register slots (FragmentDoubleBuffer), drawn uniformly where the registers fit
    fragment_double_buffers: tuple[bool, ...] = (False, True)
    # how a pipelined wgmma stage's shared operand tiles are copied, drawn uniformly where TMA
    # fits the drawn tiles (OperandCopy, sm_90 only): "cp.async" (every thread) or "tma" (one
    # thread's box copies on mbarriers, lower/tma_fetch.py). Both by default: where TMA does
    # not fit (not sm_90, not wgmma, a single K tile, tiles not of 128-byte lines) the rule
    # draws nothing and the search is that of cp.async alone
    operand_copies: tuple[str, ...] = ("cp.async", "tma")
    # whether a wgmma stage whose operand tiles TMA copies is warp-specialised (WarpSpecialize,
    # sketch/warp_specialize.py; lower/warp_specialize.py): a producer warpgroup issues the
    # copies and the consumers release each slot through an mbarrier, no block barrier in the
    # mainloop; drawn uniformly where TMA was drawn. (False,): never, the draws those before
    warp_specializations: tuple[bool, ...] = (False, True)
    # TMA im2col copies of a convolution's gathered input (lower/tma_im2col.py): OperandCopy
    # may draw them for a conv whose tiles no box holds (strided, padded or windowed), and on
    # sm_90 a conv whose window runs more than once (a 3x3) also gets an implicit GEMM sketch
    # whose window and K loops are fused into one loop its shared tiles are pipelined over
    # (tensor_core.py). On by default (checked against numpy on an H100); False: convs keep
    # cp.async wherever no box holds their gather
    tma_im2col: bool = True
    # whether the epilogue of a wgmma or mma stage (sm_90) copies its shared accumulator tile
    # out in 16-byte vectors a thread, 8 bf16 / fp16 or 4 fp32 (EpilogueVector,
    # sketch/epilogue_vector.py), else one element a thread; drawn uniformly where the output
    # rows hold whole vectors. (False,): never, and the draws are those before the rule
    epilogue_vectors: tuple[bool, ...] = (False, True)
    # whether such a vector epilogue of an mma or wgmma stage that only casts to a 16-bit
    # output keeps its shared tile in that type (EpilogueVector; lower/narrow_tile.py): half
    # the shared memory and the epilogue's reads, the same values. (False,): never
    narrow_epilogue_tiles: tuple[bool, ...] = (False, True)
    # split-K: a reduction with fewer outputs than `split_k_max_outputs` is also sketched with
    # its reduction cut into each of `split_k_parts` parts (where every part keeps at least
    # `split_k_min_chunk` elements), summed by a second kernel: fewer outputs, at one or two
    # accumulators a thread, keep too few threads resident to fill an H100 or H200
    split_k_parts: tuple[int, ...] = (4, 16)
    split_k_max_outputs: int = 65536
    # a Tensor Core product, whose blocks compute thousands of outputs each, is split below
    # this many times `split_k_max_outputs` outputs, with the parts whole 16-wide K tiles fill
    # (a batch-1 conv of 28x28 pixels and 128 channels fills 13 blocks of 64 x 128); 1: no more
    # than any reduction
    split_k_tensor_core_output_factor: int = 4
    split_k_min_chunk: int = 256
    # cut only the outermost reduction axis (where the parts divide it) instead of all of them
    # fused: the partial sums of a convolution then keep its window axes, so their tiles stay
    # aligned with the window and their indices free of divisions by it (faster kernels, built
    # faster)
    split_k_outer_axis: bool = True
    # cross-block reductions (CrossBlockReduction), for the reductions not tiled: a stage
    # whose outputs fill fewer than `cross_block_blocks_per_sm` blocks per SM (each output a
    # block's cross-thread reduction), or for a column reduction fewer than
    # `cross_block_threads_per_sm` threads per SM, is also sketched with its reduction cut
    # into parts of at least `cross_block_min_chunk` elements (0 per SM: never)
    cross_block_blocks_per_sm: int = 2
    cross_block_threads_per_sm: int = 512
    cross_block_min_chunk: int = 64
    # the blocks per SM wanted instead of `cross_block_blocks_per_sm` for a normalisation's
    # statistics (a reduction along rows that an element-wise consumer reads back along them:
    # RMSNorm, a layer norm's moments). At 2, RMSNorm's 16 rows on 132 SMs are cut in 32
    # parts and a layer norm's 128 rows are not cut; at 3 or more those are cut too (4 parts
    # at 3), into two kernels that read x twice, which for rows that many is slower than a
    # block per row
    cross_block_norm_blocks_per_sm: int = 2
    # also sketch the parts' sum computed inside an element-wise consumer along rows, a warp
    # per chunk of a row (sketch/parts_in_consumer.py)
    cross_block_parts_in_consumer: bool = True
    # a row reduction's cross-block sketch also comes with its parts interleaved (block b reads
    # chunks b, b + P, b + 2P, ... of this many bytes: a grid-stride loop), where P chunks
    # divide the reduction (`CrossBlockReduction.interleaved`); 0: never
    cross_block_interleave_bytes: int = 16384
    # a row reduction cut so (no normalisation's statistics) whose outputs are at most an
    # eighth of the SMs and each read at least this many bytes gets no uncut sketch, a block
    # per output (`CrossBlockReduction.cut_only`); 0: the uncut sketches always
    cross_block_cut_only_bytes: int = 1 << 20
    # the odds that a cross-block reduction's parts are summed in the same kernel, by its
    # last block to finish, rather than by a second kernel (init rule sketch/single_pass.py;
    # 0: never, 1: always)
    cross_block_single_pass: float = 0.5
    # a cross-thread reduction's kernel whose grid fills the SMs more than once but could be
    # resident at once is given `__launch_bounds__` of 1 or of ceil(blocks / SMs) blocks per
    # SM, with even odds (sketch/launch_bounds.py)
    one_wave_launch_bounds: bool = True
    # the cluster sizes a block-per-row normalisation's rows are also sketched split over, a
    # block of a thread-block cluster per part (sm_90; sketch/row_cluster.py; 16, above the
    # portable size, only for rows too few to fill the SMs twice with 8); empty: never
    row_cluster_sizes: tuple[int, ...] = (2, 4, 8, 16)
    # the most elements of a normalisation's row (or a cluster block's part of it) one thread
    # keeps in registers when its row is sketched held there (sketch/row_in_shared.py); 0: never
    max_row_register_elems: int = 32

    def __post_init__(self) -> None:
        for name in (
            "double_buffer_probability",
            "shared_padding_probability",
            "cross_block_single_pass",
            "wgmma_pipeline_probability",
        ):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"SketchParams: {name} must be in [0, 1], got {value}")
        for name in ("auto_unroll_configs", "tensor_core_unroll_configs"):
            configs = getattr(self, name)
            if not configs or min(configs) < 0:
                raise ValueError(
                    f"SketchParams: {name} must be one or more depths >= 0, got {configs}"
                )
        known = TENSOR_CORE_INSTRUCTIONS
        if not self.tensor_core_instructions or not set(self.tensor_core_instructions) <= set(
            known
        ):
            raise ValueError(
                f"SketchParams: tensor_core_instructions must be one or more of {known}, got "
                f"{self.tensor_core_instructions}"
            )
        if not self.pipeline_stages or not set(self.pipeline_stages) <= {2, 3, 4, 5}:
            raise ValueError(
                f"SketchParams: pipeline_stages must be one or more of 2..5, got "
                f"{self.pipeline_stages}"
            )
        if not set(self.wgmma_pipeline_stages) <= {2, 3, 4, 5}:
            raise ValueError(
                f"SketchParams: wgmma_pipeline_stages must be among 2..5, got "
                f"{self.wgmma_pipeline_stages}"
            )
        if not self.wgmma_warpgroup_weights or not all(
            n in (1, 2, 4) and w > 0 for n, w in self.wgmma_warpgroup_weights
        ):
            raise ValueError(
                "SketchParams: wgmma_warpgroup_weights must be one or more (warpgroups, weight) "
                f"pairs of 1, 2 or 4 warpgroups and positive weights, got "
                f"{self.wgmma_warpgroup_weights}"
            )
        if self.wgmma_width_exponent < 0 or self.wgmma_swizzled_chunk_weight < 1:
            raise ValueError(
                "SketchParams: wgmma_width_exponent must be >= 0 and "
                "wgmma_swizzled_chunk_weight >= 1, got "
                f"{self.wgmma_width_exponent} and {self.wgmma_swizzled_chunk_weight}"
            )
        for name in (
            "fragment_double_buffers",
            "epilogue_vectors",
            "narrow_epilogue_tiles",
            "warp_specializations",
        ):
            choices = getattr(self, name)
            if not choices or not all(isinstance(x, bool) for x in choices):
                raise ValueError(
                    f"SketchParams: {name} must be one or more of False, True, got {choices}"
                )
        if not self.operand_copies or not set(self.operand_copies) <= set(OPERAND_COPIES):
            raise ValueError(
                f"SketchParams: operand_copies must be one or more of {OPERAND_COPIES}, got "
                f"{self.operand_copies}"
            )
        if not set(self.row_cluster_sizes) <= set(CLUSTER_SIZES):
            raise ValueError(
                f"SketchParams: row_cluster_sizes must be among {CLUSTER_SIZES}, got "
                f"{self.row_cluster_sizes}"
            )
        if self.split_k_tensor_core_output_factor < 1:
            raise ValueError(
                "SketchParams: split_k_tensor_core_output_factor must be >= 1, got "
                f"{self.split_k_tensor_core_output_factor}"
            )
        if self.wgmma_conv_macs_per_sm < 0:
            raise ValueError(
                "SketchParams: wgmma_conv_macs_per_sm must be >= 0, got "
                f"{self.wgmma_conv_macs_per_sm}"
            )
        for name in ("cross_block_interleave_bytes", "cross_block_cut_only_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"SketchParams: {name} must be >= 0, got {getattr(self, name)}")
        if self.min_threads_per_sm < 0:
            raise ValueError(
                f"SketchParams: min_threads_per_sm must be >= 0, got {self.min_threads_per_sm}"
            )

    @classmethod
    def for_task(cls, task: TaskOptions) -> SketchParams:
        """The defaults, with a task's options that reach the sketch rules (its `allow_tf32`)."""
        return cls(allow_tf32=task.allow_tf32)

    @property
    def n_spatial_levels(self) -> int:
        return self.gpu_structure.count("S")

    @property
    def n_reduce_levels(self) -> int:
        return self.gpu_structure.count("R")


__all__ = ["SketchParams"]
