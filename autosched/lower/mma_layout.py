"""Per-lane register layouts of the "mma" fragment flavour (`ir.Buffer.fragment_flavour`): what
the CUDA printer (`codegen/mma.py`) emits and the CPU interpreter (`lower/interpret_mma.py`)
emulates, element for element.

Two kinds of fact live here, kept apart:

- The PTX ISA's definitions ("Matrix fragments for mma.m16n8k16" and "ldmatrix" in the PTX ISA):
  which element of an 8x8 matrix each lane receives from `ldmatrix` (`ldmatrix_element`), and
  which element of the m16n8k16 A (16x16), B (16x8) and C (16x8) matrices each register of a
  lane holds (`A_ELEMENT`, `B_ELEMENT`, `C_ELEMENT`), all functions of the lane's group
  `g = lane / 4` and thread-in-group `t = lane % 4`.
- Our choices for a 16x16 tile of a fragment buffer: a lane holds `ELEMS_PER_LANE` values of each
  tile (matrix_a: the A registers a0..a7; matrix_b: b0..b3 of the mma over columns 0-7, then
  those over columns 8-15; accumulator: c0..c3 of columns 0-7, then of 8-15), an operand tile is
  loaded by one `ldmatrix.x4` whose matrix i covers `MATRIX_ORIGINS[i]` of the tile (register i),
  transposed when the memory layout's rows are not the fragment's rows (`ldmatrix_trans`), and
  lane l gives the address of row l % 8 of matrix l / 8 (`lane_row_offset`).

The interpreter applies the ISA definitions to the addresses and registers our choices give, so
a wrong choice computes a wrong product there (tests/lower/test_mma_flavour.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autosched.lower import ir

LANES = ir.WARP_SIZE
ELEMS_PER_LANE = 8  # values of one 16x16 tile a lane holds, whatever the fragment's role
OPERAND_REGS = 4  # 32-bit registers (two 16-bit values each) of a 16x16 operand tile
MMA_N = 8  # the n of m16n8k16: a 16x16 accumulator tile takes two mma per k step
LDMATRIX_ROWS = 8  # rows of one ldmatrix matrix (8 x 8 16-bit values, 16 bytes a row)
ROW_ALIGN_BYTES = 16  # ldmatrix row addresses are 16-byte aligned
# the operand dtypes m16n8k16 takes, by the PTX type it names
MMA_TYPES = {"float16": "f16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class LanePosition:
    """Element (row, col) of a matrix as an affine function of the lane's group g = lane // 4
    and thread-in-group t = lane % 4: row = row0 + row_g * g + row_t * t, col likewise."""

    row0: int
    col0: int
    row_g: int = 0
    row_t: int = 0
    col_g: int = 0
    col_t: int = 0

    def at(self, lane: Any) -> tuple[Any, Any]:
        """(row, col) for `lane`: an int, or an index expression (the printer's threadIdx.x)."""
        g, t = lane // 4, lane % 4
        return (
            self.row0 + self.row_g * g + self.row_t * t,
            self.col0 + self.col_g * g + self.col_t * t,
        )


# ---- the PTX ISA's definitions -----------------------------------------------------------------


def _a(e: int) -> LanePosition:  # a_e: row g (+8 for a2, a3, a6, a7), col 2t + e%2 (+8 from a4)
    return LanePosition(8 * ((e >> 1) & 1), (e & 1) + 8 * (e >> 2), row_g=1, col_t=2)


def _b(e: int) -> LanePosition:  # b_e: row (k) 2t + e%2 (+8 for b2, b3), col (n) g
    return LanePosition((e & 1) + 8 * (e >> 1), 0, row_t=2, col_g=1)


def _c(e: int) -> LanePosition:  # c_e: row g (+8 for c2, c3), col 2t + e%2
    return LanePosition(8 * (e >> 1), e & 1, row_g=1, col_t=2)


A_ELEMENT = tuple(_a(e) for e in range(8))  # m16n8k16 A (16 x 16, M x K), a0..a7
B_ELEMENT = tuple(_b(e) for e in range(4))  # B (16 x 8, K x N), b0..b3
C_ELEMENT = tuple(_c(e) for e in range(4))  # C and D (16 x 8, M x N), c0..c3


def ldmatrix_element(lane: int, half: int, trans: bool) -> tuple[int, int]:
    """(row, col) of the 8x8 matrix (rows as the addresses gave them) whose value lands in
    half `half` of `lane`'s register: row lane / 4, columns 2 (lane % 4) + half; `.trans`
    swaps row and column."""
    row, col = lane >> 2, 2 * (lane & 3) + half
    return (col, row) if trans else (row, col)


# ---- our choices for a 16x16 tile ---------------------------------------------------------------

# the tile (row, col) where matrix i of an x4 ldmatrix (register i of the lane) starts: the four
# registers of an A tile are a0a1, a2a3, a4a5, a6a7; those of a B tile b0b1, b2b3 of columns
# 0-7, then of columns 8-15
MATRIX_ORIGINS = ((0, 0), (8, 0), (0, 8), (8, 8))


def operand_b_regs(n_half: int) -> tuple[int, int]:
    """The registers of a matrix_b tile that are b0b1 and b2b3 of the mma over the tile's
    columns 8 n_half .. 8 n_half + 7."""
    return 2 * n_half, 2 * n_half + 1


def accumulator_elems(n_half: int) -> range:
    """The elements of an accumulator tile that are c0..c3 of the mma over its columns
    8 n_half .. 8 n_half + 7."""
    return range(4 * n_half, 4 * n_half + 4)


def tile_position(scope: str, e: int) -> LanePosition:
    """Where element `e` (0..7) of a lane's share of a 16x16 tile of a `scope` fragment lies
    in the tile (rows and columns as `ir.tile_shape`: M x K, K x N, M x N)."""
    n_half, within = divmod(e, 4)
    if scope == "wmma.matrix_a":
        return A_ELEMENT[e]
    pos = B_ELEMENT[within] if scope == "wmma.matrix_b" else C_ELEMENT[within]
    return LanePosition(
        pos.row0, pos.col0 + MMA_N * n_half, pos.row_g, pos.row_t, pos.col_g, pos.col_t
    )


def accumulator_position(lane: Any, e: Any) -> tuple[Any, Any]:
    """`tile_position(accumulator, e).at(lane)` as one formula of the lane and the element,
    for index expressions in which `e` is a variable too (the feature walk's)."""
    within = e % 4
    row = lane // 4 + (within // 2) * 8
    return row, (e // 4) * MMA_N + (lane % 4) * 2 + within % 2


def ldmatrix_trans(scope: str, layout: str) -> bool:
    """Whether an operand tile in memory layout `layout` loads with `.trans`: ldmatrix hands a
    lane two neighbours of a memory row, and matrix_a registers hold neighbours along K (a tile
    row), matrix_b registers neighbours along K (a tile column)."""
    rows_are_tile_rows = layout == "row_major"
    return rows_are_tile_rows != (scope == "wmma.matrix_a")


def element_offset(row: Any, col: Any, layout: str, ldm: int) -> Any:
    """The offset of tile element (row, col) from the tile's first element."""
    return row * ldm + col if layout == "row_major" else row + col * ldm


def matrix_steps(layout: str, ldm: int) -> tuple[int, int]:
    """The offsets of matrices 1 and 2 of an x4 load from matrix 0 (matrix 3 is at their sum)."""
    return element_offset(*MATRIX_ORIGINS[1], layout, ldm), element_offset(
        *MATRIX_ORIGINS[2], layout, ldm
    )


def lane_row_offset(lane: Any, layout: str, ldm: int) -> Any:
    """The offset from the tile's first element of the row address that `lane` gives an x4
    ldmatrix: row lane % 8 of matrix lane / 8. A matrix's rows are memory rows, `ldm` apart in
    either layout."""
    step1, step2 = matrix_steps(layout, ldm)
    matrix = lane // LDMATRIX_ROWS
    return (lane % LDMATRIX_ROWS) * ldm + (matrix % 2) * step1 + (matrix // 2) * step2


def ldmatrix_conflict_ways(layout: str, ldm: int, elem_bytes: int) -> int:
    """How many ways the rows of one ldmatrix phase (8 rows of 16 bytes: one matrix) collide
    in shared memory's 8 groups of 4 banks, at worst over the four matrices of an x4 load of a
    tile at offset 0 (1: conflict-free)."""
    banks = 32 * 4 // ROW_ALIGN_BYTES  # 16-byte groups of banks
    worst = 1
    for matrix in range(OPERAND_REGS):
        lanes = range(matrix * LDMATRIX_ROWS, (matrix + 1) * LDMATRIX_ROWS)
        groups = [
            lane_row_offset(lane, layout, ldm) * elem_bytes // ROW_ALIGN_BYTES % banks
            for lane in lanes
        ]
        worst = max(worst, max(groups.count(g) for g in groups))
    return worst


def operand_elem(reg: int, half: int) -> int:
    """The element index (0..7) of half `half` of 32-bit register `reg` of an operand tile."""
    return 2 * reg + half


__all__ = [
    "A_ELEMENT",
    "B_ELEMENT",
    "C_ELEMENT",
    "ELEMS_PER_LANE",
    "LANES",
    "LDMATRIX_ROWS",
    "MATRIX_ORIGINS",
    "MMA_N",
    "MMA_TYPES",
    "OPERAND_REGS",
    "ROW_ALIGN_BYTES",
    "LanePosition",
    "accumulator_elems",
    "accumulator_position",
    "element_offset",
    "lane_row_offset",
    "ldmatrix_conflict_ways",
    "ldmatrix_element",
    "ldmatrix_trans",
    "matrix_steps",
    "operand_b_regs",
    "operand_elem",
    "tile_position",
]
