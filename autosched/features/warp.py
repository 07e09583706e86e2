"""How the feature walk sees a warp-collective Tensor Core statement (`ir.WarpStmt`): as a
store executed by every lane of the warp, `per_lane` times (a pseudo loop of that extent inside
the statement), each lane handling its share of the tile (`per_lane_elems`: 8 of a 16x16 tile,
4 of a 16x8 / 8x16 TF32 operand tile).

- A fragment is per warp; each lane holds `per_lane` elements of every tile, so the walk sees a
  fragment as a `local` (register) buffer of `size // 32` elements per thread (`lane_view`),
  tile `t` element `j` at `t * per_lane + j`.
- A memory tile of R x C: lane `x` touches elements `offset + (x // L) * ldm + (x % L) * P + j`
  with P = `per_lane` and L = C / P lanes per row (R runs of C contiguous elements, `ldm`
  apart, whatever the layout: the tile's footprint), so bytes, lines, reuse and coalescing
  come from the usual per-buffer analysis. Statements of the "mma" flavour touch what their
  instructions do (`lower/mma_layout.py`): a load, lane `x`'s ldmatrix row
  (`offset + lane_row_offset(x) + j`), a store, the C layout's element `j` of lane `x`; so the
  walk sees the flavours' different access patterns with the same features.
- An `FragmentMma` is 16 * 16 * K float multiply-adds per warp, counted as float mad, mul and
  add/sub (as `count_ops` counts `a * b + c`) over the lanes and the pseudo loop.
The statement's own expressions (tile numbers, offsets, fill value, guards) count as usual.
"""

from __future__ import annotations

from collections.abc import Callable

from autosched.features.exprs import OP_KINDS
from autosched.lower import ir
from autosched.lower import mma_layout as ml
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.te.expr import Expr, Var

PER_LANE = ir.TILE_ELEMS // ir.WARP_SIZE  # elements of a 16x16 tile per lane
ELEM = Var("wmma_lane_elem", "int32")  # the pseudo loop over a lane's elements
_LANE = ir.THREAD_VARS["threadIdx.x"]
# the OP_KINDS a multiply-add counts under (as `count_ops` counts `a * b + c`)
_MAD_KINDS = tuple(OP_KINDS.index(k) for k in ("float_mad", "float_addsub", "float_mul"))


def lane_view(b: ir.Buffer) -> ir.Buffer:
    """The per-thread `local` stand-in of a fragment buffer (its lane's share)."""
    return ir.Buffer(b.name, (max(1, b.size // ir.WARP_SIZE),), b.dtype, "local")


class WarpRecord:
    """What the walk records for one warp statement: the written (buffer, index), the read
    ones, the expressions whose operations count, and extra float operation counts per step
    (OP_KINDS index -> count)."""

    __slots__ = ("write", "reads", "roots", "extra", "per_lane")

    def __init__(
        self,
        write: tuple[ir.Buffer, Expr],
        reads: list[tuple[ir.Buffer, Expr]],
        roots: tuple[Expr, ...],
        extra: dict[int, int] | None = None,
        per_lane: int = PER_LANE,
    ) -> None:
        self.write: tuple[ir.Buffer, Expr] = write
        self.reads: list[tuple[ir.Buffer, Expr]] = reads
        self.roots: tuple[Expr, ...] = roots
        self.extra: dict[int, int] = extra or {}
        self.per_lane = per_lane  # the extent of the pseudo loop


def per_lane_elems(frag: ir.Buffer) -> int:
    """Elements of one tile of `frag` that each lane holds."""
    return ir.tile_elems(frag) // ir.WARP_SIZE


def _memory_index(m: ir.MatrixTile, frag: ir.Buffer, writes: bool) -> Expr:
    if frag.fragment_flavour == "mma":
        if writes:
            row, col = ml.accumulator_position(_LANE, ELEM)
            return m.offset + ml.element_offset(row, col, m.layout, m.ldm)
        return m.offset + ml.lane_row_offset(_LANE, m.layout, m.ldm) + ELEM
    per_lane = per_lane_elems(frag)
    lanes_per_row = ir.tile_shape(frag)[1] // per_lane
    return m.offset + (_LANE // lanes_per_row) * m.ldm + (_LANE % lanes_per_row) * per_lane + ELEM


def warp_record(s: ir.WarpStmt, view: Callable[[ir.Buffer], ir.Buffer]) -> WarpRecord:
    """The record of `s`; `view(fragment)` gives a fragment's per-lane stand-in buffer."""
    if not isinstance(s, ir.WarpStmt):
        raise TypeError(f"no feature record for a {type(s).__name__}")

    def frag(b: ir.Buffer, tile: Expr) -> tuple[ir.Buffer, Expr]:
        return view(b), tile * per_lane_elems(b) + ELEM

    first = s.fragments()[0][0]  # the written fragment, or the stored one
    per_lane = per_lane_elems(first)
    frags = [frag(b, tile) for b, tile, _ in s.fragments()]
    m = s.memory_tile()
    memory = None if m is None else (m.buffer, _memory_index(m, first, s.writes_memory()))
    write = memory if memory is not None and s.writes_memory() else frags[0]
    reads = frags[len(frags) - len(s.read_fragments()) :]  # the read ones are the last ones
    if memory is not None and not s.writes_memory():
        reads.append(memory)
    roots = tuple(s.exprs())
    if isinstance(s, ir.FragmentFill):
        roots = roots[::-1]  # the fill value first, as a store's value
    # multiply-adds per lane and pseudo-loop step
    macs = s.macs()
    mads = dict.fromkeys(_MAD_KINDS, macs // (ir.WARP_SIZE * per_lane)) if macs else None
    return WarpRecord(write, reads, roots, mads, per_lane)


def wgmma_record(s: wi.WgmmaMma, view: Callable[[ir.Buffer], ir.Buffer]) -> WarpRecord:
    """The record of a wgmma, as each thread of the warpgroup sees it: its N / 2 accumulator
    values (the pseudo loop), each taking 16 multiply-adds, read from and written to its
    registers; its share of A's and B's shared tiles (64 x 16 and N x 16 elements over 128
    threads: 8 and N / 8 contiguous elements a thread, read again over the loop)."""
    values = s.n // 2
    per_tile = PER_LANE if s.acc.fragment_flavour == "mma" else values
    acc = (view(s.acc), s.acc_tile * per_tile + ELEM)
    thread = _LANE + ir.WARP_SIZE * (ir.THREAD_VARS["threadIdx.y"] % wl.WARPGROUP_WARPS)
    a_share = wl.M * wl.K // wl.WARPGROUP_THREADS
    b_share = s.n * wl.K // wl.WARPGROUP_THREADS
    reads = [
        acc,
        (s.a.buffer, s.a.offset + thread * a_share + ELEM % a_share),
        (s.b.buffer, s.b.offset + thread * b_share + ELEM % b_share),
    ]
    return WarpRecord(acc, reads, tuple(s.exprs()), dict.fromkeys(_MAD_KINDS, wl.K), values)


__all__ = [
    "ELEM",
    "PER_LANE",
    "WarpRecord",
    "lane_view",
    "per_lane_elems",
    "warp_record",
    "wgmma_record",
]
