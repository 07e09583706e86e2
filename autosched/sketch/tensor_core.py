"""The Tensor Core sketch rule: a half-precision matrix product reaches the wmma intrinsics.

`match_tensor_core` finds a reduction stage `C = sum(cast?(A[..]) * cast?(B[..]))` whose
operands are float16 or bfloat16 (or float32, as TF32 m16n16k8 fragments, when the task allows
TF32: `SketchParams.allow_tf32`) and whose sum is float32; `build_tensor_core_sketch` builds
TVM's hand-written Tensor Core schedule (seeds/004) for it as a sketch:

    C.wmma.accumulator        cache_write: the per-warp 16x16 accumulator tiles
    A.shared, B.shared        cache_read: a block's operand tiles, fetched by all threads
    A.shared.wmma.matrix_a    cache_read: a warp's 16x16 operand fragments
    B.shared.wmma.matrix_b

The axes: M (spatial, read by A only), N (spatial, read by B only) and K (reduction, read by
both), the innermost of each whose extent is a multiple of 16 and that indexes its operands
directly, else the innermost at least 16 long: a padded axis, tiled as its next multiple of 16
(whole tiles run past the tensor's edge; lowering zero-fills the shared operand tiles there and
guards the output per element). The copy-out stage C splits M and N into [block, warps,
repeats, 16]; its warp loops are threadIdx.y, its 16x16 nest the store. An element-wise output
consumer of C (the cast, bias or relu epilogue) becomes the kernel's root: C is computed at its
block loop, so the accumulators go through shared memory, and the consumer's threads
(threadIdx.y warps of threadIdx.x = 32 lanes) write the output. A padded M or N without such a
consumer gets one: the accumulator tiles are stored to a shared copy of them (a cache_read)
that C, now an element-wise copy-out, reads as its epilogue (a warp's tile store cannot stop at
the edge). The init rules (tensor_core_init.py) draw the
unknown lengths: warps and repeats of M and N, the K chunk. The sketch rule itself,
`rules.MultiLevelTilingTensorCore`, is these two functions in the rules' interface.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autosched.errors import ScheduleError
from autosched.lower import ir
from autosched.schedule.implicit_gemm import implicit_gemm_ops, product_loads, row_axes
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ROOT
from autosched.sketch.stage_steps import level_names
from autosched.sketch.utils import elementwise_matched_consumer, is_inlined, is_output, is_tiled
from autosched.te.dtype import HALF_DTYPES
from autosched.te.expr import BinOp, Cast, IterVar, Load, Reduce
from autosched.te.reduce import sum_reducer
from autosched.te.tensor import ComputeOp, Operation, Tensor
from autosched.te.visitor import walk

MMA = ir.WMMA_TILE  # the wmma tile: 16x16 operands, 16x16x16 multiply-accumulate
# operand dtypes the rule takes: half precision always, float32 (as TF32) when allowed
TF32_DTYPES = frozenset({ir.TF32_OPERAND_DTYPE})
# The shortest M, N and K an implicit GEMM takes: any number of pixels (a 2x2 output is one
# padded row tile), output channels from 8 (half a tile, padded), input channels from 16 (the
# K loop's inner split is one whole tile; a stem conv of 3 input channels stays on CUDA cores).
IMPLICIT_GEMM_LEAST = (1, 8, 16)


@dataclass(frozen=True)
class Operand:
    """One factor of the product: the op it loads, and which tensor dimension holds each of
    the matrix axes (rows, cols): (M, K) for matrix_a, (K, N) for matrix_b."""

    op: Operation
    dims: tuple[int, int]
    ndim: int
    tile: tuple[int, int] = (MMA, MMA)  # the fragment tile's (rows, cols): K is 8 for TF32


@dataclass(frozen=True)
class TensorCoreMatch:
    """What the rule found in a stage: its M, N and K axes (names) and its two operands."""

    m: str
    n: str
    k: str
    a: Operand
    b: Operand
    k_tile: int = MMA  # the wmma shape's K (`ir.operand_k` of the operand dtype)


def _operand_load(e, dtypes=HALF_DTYPES) -> Load | None:
    """The load under an optional cast, when it reads a tensor of one of `dtypes`."""
    if isinstance(e, Cast):
        e = e.value
    if isinstance(e, Load) and isinstance(e.buffer, Tensor) and e.buffer.dtype in dtypes:
        return e
    return None


def _axes_of(load: Load) -> set[int]:
    return {id(n) for idx in load.indices for n in walk(idx) if isinstance(n, IterVar)}


def _direct_dim(load: Load, axis: IterVar, offsets: frozenset[int] = frozenset()) -> int | None:
    """The one dimension of `load` indexed by exactly `axis`, if it is the only dimension that
    uses the axis; with `offsets` (ids of axes), also one indexed `axis + e` where `e` reads
    only those axes (a split-K part's `k_o*c + k_i`: the tile's origin moves with `k_o`)."""
    uses = [d for d, idx in enumerate(load.indices) if any(n is axis for n in walk(idx))]
    if len(uses) != 1:
        return None
    idx = load.indices[uses[0]]
    if idx is axis:
        return uses[0]
    if offsets and isinstance(idx, BinOp) and idx.op == "+" and idx.b is axis:
        rest = [n for n in walk(idx.a) if isinstance(n, IterVar)]
        if rest and all(id(n) in offsets for n in rest):
            return uses[0]
    return None


def _innermost(axes, pred, least: int = MMA) -> IterVar | None:
    """The innermost of `axes` satisfying `pred` whose extent is a multiple of 16, else the
    innermost at least `least` long (tiled as its next multiple of 16: a padded axis)."""
    found = [a for a in axes if a.extent >= least and pred(a)]
    whole = [a for a in found if a.extent % MMA == 0]
    return (whole or found)[-1] if found else None


def _stage_is_fresh(state: State, i: int, origins: tuple[str, ...] = ("dag",)) -> bool:
    """Stage i is an untransformed computation at root, of one of `origins`."""
    stage = state.stages[i]
    return (
        isinstance(stage.op, ComputeOp)
        and stage.origin in origins
        and not is_inlined(stage)
        and stage.compute_at == ROOT
        and not is_tiled(stage)
    )


# the stages the rule takes: the DAG's, and the partial sums of a split-K sketch
MATCHED_ORIGINS = ("dag", "rfactor")


def match_tensor_core(state: State, i: int, allow_tf32: bool = False) -> TensorCoreMatch | None:
    """The Tensor Core view of stage i, or None when it is not a half-precision matrix
    product with float32 sums and M, N and K axes at least 16 long. With `allow_tf32`, a
    float32 product matches too (its operands rounded to TF32 on the Tensor Cores)."""
    if not _stage_is_fresh(state, i, MATCHED_ORIGINS):
        return None
    op = state.stages[i].op
    assert isinstance(op, ComputeOp)
    return match_product(op, allow_tf32)


def match_product(
    op: ComputeOp, allow_tf32: bool = False, least: tuple[int, int, int] = (MMA, MMA, MMA)
) -> TensorCoreMatch | None:
    """The Tensor Core view of a computation `op` (see `match_tensor_core`); `least` are the
    shortest M, N and K axes it takes (shorter ones than 16 are padded)."""
    if (
        op.dtype != "float32"
        or not isinstance(op.body, Reduce)
        or op.body.reducer is not sum_reducer
        or op.body.condition is not None
    ):
        return None
    src = op.body.source
    if not (isinstance(src, BinOp) and src.op == "*"):
        return None
    dtypes = HALF_DTYPES | TF32_DTYPES if allow_tf32 else HALF_DTYPES
    la, lb = _operand_load(src.a, dtypes), _operand_load(src.b, dtypes)
    if la is None or lb is None or la.buffer.op is lb.buffer.op:
        return None
    if la.buffer.dtype != lb.buffer.dtype:
        return None
    in_a, in_b = _axes_of(la), _axes_of(lb)
    m = _innermost(
        op.axis,
        lambda x: id(x) in in_a and id(x) not in in_b and _direct_dim(la, x) is not None,
        least[0],
    )
    n = _innermost(
        op.axis,
        lambda x: id(x) in in_b and id(x) not in in_a and _direct_dim(lb, x) is not None,
        least[1],
    )
    # K may be offset by the spatial axes both operands read (split-K's parts)
    shared = frozenset(id(a) for a in op.axis if id(a) in in_a and id(a) in in_b)
    k = _innermost(
        op.reduce_axis,
        lambda x: _direct_dim(la, x, shared) is not None and _direct_dim(lb, x, shared) is not None,
        least[2],
    )
    if m is None or n is None or k is None:
        return None
    a_m, a_k, b_k, b_n = (
        _direct_dim(la, m),
        _direct_dim(la, k, shared),
        _direct_dim(lb, k, shared),
        _direct_dim(lb, n),
    )
    if a_m is None or a_k is None or b_k is None or b_n is None:  # the predicates found them
        return None
    kt = ir.operand_k(la.buffer.dtype)
    a = Operand(la.buffer.op, (a_m, a_k), len(la.indices), (MMA, kt))
    b = Operand(lb.buffer.op, (b_k, b_n), len(lb.indices), (kt, MMA))
    return TensorCoreMatch(m.name, n.name, k.name, a, b, kt)


def match_implicit_gemm(state: State, i: int, allow_tf32: bool = False) -> TensorCoreMatch | None:
    """The Tensor Core view of stage i rewritten as an implicit GEMM (a convolution: its output
    pixels, two or more axes, as M; `schedule.implicit_gemm`), or None when the stage has fewer
    than two row axes or its product does not match."""
    if not _stage_is_fresh(state, i, MATCHED_ORIGINS):
        return None
    op = state.stages[i].op
    assert isinstance(op, ComputeOp)
    if len(row_axes(op)) < 2 or product_loads(op) is None:
        return None
    return match_product(implicit_gemm_ops(op).gemm, allow_tf32, IMPLICIT_GEMM_LEAST)


def epilogue_root(state: State, i: int) -> int | None:
    """Stage i's element-wise consumer when it is an untiled output computed at root (the
    cast / bias / relu that becomes the kernel's root), else None."""
    j = elementwise_matched_consumer(state, i)
    if j is None or not is_output(state, j):
        return None
    e = state.stages[j]
    if is_tiled(e) or e.compute_at != ROOT:
        return None
    return j


# ---- building the sketch --------------------------------------------------------------------


def _tile_fragment(state: State, name: str, operand: Operand) -> State:
    """Split the fragment stage's two matrix dimensions by the fragment tile (16, or K) and put
    the two tile loops innermost (rows, then cols), tensorized."""
    rows, cols = operand.dims
    for d, size in zip((rows, cols), operand.tile, strict=True):
        state = state.split(name, f"ax{d}", [size])
    outer = [f"ax{d}_o" if d in (rows, cols) else f"ax{d}" for d in range(operand.ndim)]
    state = state.reorder(name, outer + [f"ax{rows}_i", f"ax{cols}_i"])
    return state.tensorize(name, f"ax{rows}_i")


def _tile_store(state: State, c: str, mt: TensorCoreMatch, bind_blocks: bool):
    """C's M and N split [block, warps, repeats, 16]; returns (state, the two split step ids,
    the block loop names, the fused warp loop's name)."""
    axes = [it.name for it in state[c].root_iters]
    ids = []
    for ax in (mt.m, mt.n):
        ids.append(len(state.steps))
        state = state.split(c, ax, [None, None, MMA])
    lm, ln = level_names(mt.m, 4), level_names(mt.n, 4)
    block = [level_names(a, 4)[0] if a in (mt.m, mt.n) else a for a in axes]
    state = state.reorder(c, block + [lm[1], ln[1], lm[2], ln[2], lm[3], ln[3]])
    state = state.fuse(c, [lm[1], ln[1]])
    warp = f"{lm[1]}_{ln[1]}_fused"
    state = state.bind(c, warp, "threadIdx.y")
    if bind_blocks:
        state = state.fuse(c, block)
        state = state.bind(c, state[c].iters[0].name, "blockIdx.x")
    return state.tensorize(c, lm[3]), ids, warp


def _tile_epilogue(
    state: State,
    e: int,
    c: str,
    mt: TensorCoreMatch,
    ids: list[int],
    rows: tuple[int, ...] = (),
):
    """The epilogue E follows C's block tiles; its inner part is fused and split into warps
    (threadIdx.y, as many as C's) of 32 lanes (threadIdx.x). `rows`: E's axes (positions) that
    C's M axis holds fused (an implicit GEMM's pixels), fused first so that E's axes line up
    with C's (reordered next to each other first: an NCHW output's pixels). Returns (state,
    block loop)."""
    if rows:
        roots = [it.name for it in state.stages[e].root_iters]
        names = [roots[p] for p in rows]
        kept = [a for p, a in enumerate(roots) if p not in rows]
        order = kept[: rows[0]] + names + kept[rows[0] :]  # C's order: M where the first row is
        if order != roots:
            state = state.reorder(e, order)
        state = state.fuse(e, names)
    e_axes = [it.name for it in state.stages[e].iters]
    c_axes = [it.name for it in state[c].root_iters]
    tiled = {c_axes.index(mt.m): ids[0], c_axes.index(mt.n): ids[1]}
    for pos, src in tiled.items():
        state = state.follow_split(e, e_axes[pos], src, 1)
    block = [f"{a}_o" if p in tiled else a for p, a in enumerate(e_axes)]
    inner = [f"{e_axes[p]}_i" for p in sorted(tiled)]
    if rows and rows[-1] == len(state.stages[e].root_iters) - 1:
        # the pixels are the output's innermost axes (NCHW): the lanes run along them, so
        # that a warp's stores are contiguous
        if c_axes.index(mt.m) < c_axes.index(mt.n):
            inner.reverse()
    state = state.reorder(e, block + inner)
    state = state.fuse(e, block).fuse(e, inner)
    outer, lanes = state.stages[e].iters
    state = state.bind(e, outer.name, "blockIdx.x")
    state = state.split(e, lanes.name, [32])
    state = state.bind(e, f"{lanes.name}_i", "threadIdx.x")
    state = state.follow_fused_split(e, f"{lanes.name}_o", ids, 0, True)
    state = state.bind(e, f"{lanes.name}_o_i", "threadIdx.y")
    return state, outer.name


def _tile_accumulator(
    state: State, acc: str, mt: TensorCoreMatch, fuse_window: bool = False
) -> tuple[State, str, str]:
    """M, N split [repeats, 16], K [outer, chunk, 16], the other reductions between the two
    outer K levels: [spatial..., K outer, reductions..., K chunk, M reps, N reps, M16, N16,
    K16]. Returns (state, the loop the shared tiles attach at, the K chunk loop): the last
    outer reduction loop that runs more than once, so that a 1x1 conv's tiles (its window
    loops run once) are fetched per K tile and can be pipelined over it. With `fuse_window`
    (a conv's window that runs more than once), the window loops go first and are fused with
    K's outer loop into one, [window..., K outer] fused: the tiles attach there, so one
    pipeline runs over every (tap, K tile) step (`window_fused`)."""
    m, n = f"{mt.m}_c", f"{mt.n}_c"
    state = state.split(acc, m, [MMA]).split(acc, n, [MMA]).split(acc, mt.k, [None, mt.k_tile])
    roots = state[acc].root_iters
    spatial = [it.name for it in roots if it.kind == "spatial" and it.name not in (m, n)]
    reduces = [it.name for it in roots if it.kind == "reduce" and it.name != mt.k]
    ks = level_names(mt.k, 3)
    repeated = [it.name for it in roots if it.name in reduces and it.extent != 1]
    outer = [*repeated, ks[0]] if fuse_window and repeated else [ks[0], *reduces]
    once = [r for r in reduces if r not in outer]
    inner = [ks[1], f"{m}_o", f"{n}_o", f"{m}_i", f"{n}_i", ks[2]]
    state = state.reorder(acc, spatial + once + outer + inner).tensorize(acc, f"{m}_i")
    if fuse_window and repeated:
        state = state.fuse(acc, outer)
        fused = next(it.name for it in state[acc].iters if it.name.startswith(f"{outer[0]}_"))
        return state, fused, ks[1]
    return state, ([ks[0], *repeated])[-1], ks[1]


def _padded_output(state: State, i: int, mt: TensorCoreMatch) -> bool:
    """Whether stage i's M or N extent is not a multiple of 16: its whole output tiles run past
    the tensor's edge, so they cannot be stored to it by the warp (`_stage_output`)."""
    return any(a.extent % MMA for a in state.stages[i].axes if a.name in (mt.m, mt.n))


def _stage_output(state: State, c: str, acc: str, mt: TensorCoreMatch):
    """The accumulator `acc` of stage `c` stored to a shared copy (a cache_read of it) that
    `c`, the copy-out, reads: `c` then stores element by element, guarded at the tensor's edge,
    like an epilogue. Returns (state, the shared copy's name, the match in its axis names)."""
    state = state.cache_read(acc, "shared", [c])
    dims = {a.name: f"ax{d}" for d, a in enumerate(state[c].axes)}
    return state, f"{acc}.shared", replace(mt, m=dims[mt.m], n=dims[mt.n])


@dataclass(frozen=True)
class Epilogue:
    """An output stage that reads the product's tiles through shared memory: its index, and
    its axes (positions) that the product's M axis holds fused (none: it indexes as C)."""

    stage: int
    rows: tuple[int, ...] = ()


def build_tensor_core_sketch(
    state: State,
    i: int,
    mt: TensorCoreMatch,
    epilogue: Epilogue | None = None,
    fuse_window: bool = False,
) -> tuple[State, int]:
    """Apply the Tensor Core sketch to stage i; returns the state and the index of the stage
    before the accumulator (where the rules go on). The epilogue is `epilogue`, else the
    stage's element-wise output consumer (`epilogue_root`). A padded M or N
    (`_padded_output`) with no epilogue stores its tiles to a shared copy (`_stage_output`):
    the stage's own copy-out then is the epilogue."""
    if epilogue is None:
        e = epilogue_root(state, i)
        epilogue = Epilogue(e) if e is not None else None
    staged = epilogue is None and _padded_output(state, i, mt)
    e_op = state.stages[epilogue.stage].op if epilogue is not None else None
    rows = epilogue.rows if epilogue is not None else ()
    c = state.stages[i].name
    state = state.cache_write(i, ir.ACCUMULATOR_SCOPE)
    acc = f"{c}.{ir.ACCUMULATOR_SCOPE}"
    store_mt = mt  # the match in the store stage's axis names
    if staged:
        e_op = state[c].op
        state, c, store_mt = _stage_output(state, c, acc, mt)
    caches = []
    for operand, scope in zip((mt.a, mt.b), ir.OPERAND_SCOPES, strict=True):
        name = state.stages[state.stage_index(operand.op)].name
        state = state.cache_read(operand.op, "shared", [acc])
        state = state.cache_read(f"{name}.shared", scope, [acc])
        caches.append((f"{name}.shared", f"{name}.shared.{scope}", operand))
    state, ids, warp = _tile_store(state, c, store_mt, bind_blocks=e_op is None)
    state, shared_at, frag_at = _tile_accumulator(state, acc, mt, fuse_window)
    state = state.compute_at(acc, c, warp)
    for shared, frag, operand in caches:
        state = state.compute_at(shared, acc, shared_at)
        state = _tile_fragment(state, frag, operand).compute_at(frag, acc, frag_at)
    if e_op is not None:
        e = state.stage_index(e_op)
        state, block = _tile_epilogue(state, e, c, store_mt, ids, rows)
        state = state.compute_at(c, e_op, block)
    return state, state.stage_index(acc) - 1


def _reshape_epilogue(state: State, reshape: int) -> tuple[State, Epilogue | None]:
    """The epilogue of an implicit GEMM whose reshape is stage `reshape`: the reshape itself
    when it is the DAG's output, else its element-wise output consumer (a cast, bias or relu)
    with the reshape inlined into it; (state, None) when it has neither."""
    op = state.stages[reshape].op
    assert isinstance(op, ComputeOp) and isinstance(op.body, Load)  # the step made it
    flat = next(x for x in op.body.indices if not isinstance(x, IterVar))
    used = {id(v) for v in walk(flat)}
    rows = tuple(p for p, a in enumerate(op.axis) if id(a) in used)
    if is_output(state, reshape):
        return state, Epilogue(reshape, rows)
    e = epilogue_root(state, reshape)
    if e is None:
        return state, None
    return state.compute_inline(reshape), Epilogue(e, rows)


def build_implicit_gemm_sketch(
    state: State, i: int, allow_tf32: bool = False, fuse_window: bool = False
) -> tuple[State, int]:
    """Rewrite stage i as an implicit GEMM and apply the Tensor Core sketch to its product.
    The gather is inlined into its shared copy (the tile fetch gathers the window's pixels,
    and a padding stage inlined into it later reads the input guarded). The reshape is the
    epilogue, or is inlined into the element-wise epilogue that reads it (`_reshape_epilogue`):
    the epilogue fuses its pixel axes and follows the product's tiles, reading them from shared
    memory. A reshape with other readers stays a kernel of its own, after the product's.
    Returns the state and the index of the stage before the accumulator."""
    reshape_op = state.stages[i].produces
    state = state.implicit_gemm(i)
    gather, gemm = state.stages[i].op, state.stages[i + 1].op
    assert isinstance(gemm, ComputeOp)  # the step made it
    mt = match_product(gemm, allow_tf32, IMPLICIT_GEMM_LEAST)
    if mt is None:
        raise ScheduleError(f"stage {state.stages[i + 2].name!r} is not a Tensor Core product")
    state, epilogue = _reshape_epilogue(state, state.stage_index(reshape_op))
    state, nxt = build_tensor_core_sketch(state, i + 1, mt, epilogue, fuse_window)
    state = state.compute_inline(gather)
    reshape = state.stage_index(reshape_op)
    if epilogue is None and not is_output(state, reshape):
        state = state.compute_inline(reshape)
    return state, nxt


__all__ = [
    "MMA",
    "Epilogue",
    "Operand",
    "TensorCoreMatch",
    "build_implicit_gemm_sketch",
    "build_tensor_core_sketch",
    "epilogue_root",
    "match_implicit_gemm",
    "match_product",
    "match_tensor_core",
]
