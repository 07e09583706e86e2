"""How the feature walk sees a warp-collective Tensor Core statement (`ir.WarpStmt`): as a
store executed by every lane of the warp, `PER_LANE` times (a pseudo loop of that extent inside
the statement), each lane handling its share of the 16x16 tile.

- A fragment is per warp; each lane holds `PER_LANE` elements of every tile, so the walk sees a
  fragment as a `local` (register) buffer of `size // 32` elements per thread (`lane_view`),
  tile `t` element `j` at `t * PER_LANE + j`.
- A memory tile: lane `x` touches elements `offset + (x // 2) * ldm + (x % 2) * 8 + j` (16 runs
  of 16 contiguous elements, `ldm` apart, whatever the layout: the tile's footprint), so
  bytes, lines, reuse and coalescing come from the usual per-buffer analysis.
- An `FragmentMma` is 16 * 16 * 16 float multiply-adds per warp, counted as float mad, mul and
  add/sub (as `count_ops` counts `a * b + c`) over the lanes and the pseudo loop.
The statement's own expressions (tile numbers, offsets, fill value, guards) count as usual.
"""

from __future__ import annotations

from autosched.features.exprs import OP_KINDS
from autosched.lower import ir
from autosched.te.expr import Expr, Var

PER_LANE = ir.TILE_ELEMS // ir.WARP_SIZE  # elements of a tile per lane
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

    __slots__ = ("write", "reads", "roots", "extra")

    def __init__(self, write, reads, roots, extra=None) -> None:
        self.write: tuple[ir.Buffer, Expr] = write
        self.reads: list[tuple[ir.Buffer, Expr]] = reads
        self.roots: tuple[Expr, ...] = roots
        self.extra: dict[int, int] = extra or {}


def _memory_index(m: ir.MatrixTile) -> Expr:
    return m.offset + (_LANE // 2) * m.ldm + (_LANE % 2) * (ir.WMMA_TILE // 2) + ELEM


def warp_record(s: ir.WarpStmt, view) -> WarpRecord:
    """The record of `s`; `view(fragment)` gives a fragment's per-lane stand-in buffer."""
    if not isinstance(s, ir.WarpStmt):
        raise TypeError(f"no feature record for a {type(s).__name__}")

    def frag(b: ir.Buffer, tile: Expr) -> tuple[ir.Buffer, Expr]:
        return view(b), tile * PER_LANE + ELEM

    frags = [frag(b, tile) for b, tile, _ in s.fragments()]
    m = s.memory_tile()
    memory = None if m is None else (m.buffer, _memory_index(m))
    write = memory if s.writes_memory() else frags[0]
    reads = frags[len(frags) - len(s.read_fragments()) :]  # the read ones are the last ones
    if memory is not None and not s.writes_memory():
        reads.append(memory)
    roots = tuple(s.exprs())
    if isinstance(s, ir.FragmentFill):
        roots = roots[::-1]  # the fill value first, as a store's value
    # multiply-adds per lane and pseudo-loop step
    mads = dict.fromkeys(_MAD_KINDS, s.MACS // (ir.WARP_SIZE * PER_LANE)) if s.MACS else None
    return WarpRecord(write, reads, roots, mads)


__all__ = ["ELEM", "PER_LANE", "WarpRecord", "lane_view", "warp_record"]
