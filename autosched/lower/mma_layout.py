"""Per-lane register layouts of the "mma" fragment flavour (`ir.Buffer.fragment_flavour`): what
the CUDA printer (`codegen/mma.py`) emits and the CPU interpreter (`lower/interpret_mma.py`)
emulates, element for element.

m16n8k8 with TF32 operands (float32 fragments) follows the same pattern with its own element
tables (`SHAPES`); its operand tiles load value by value (`MmaShape.ldmatrix`), rounded to TF32
(`cvt.rna.tf32.f32`).

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
ELEMS_PER_LANE = 8  # values of a 16x16 tile a lane holds (of a 16x8 / 8x16 TF32 one: 4)
OPERAND_REGS = 4  # 32-bit registers (two 16-bit values each) of a 16x16 operand tile
MMA_N = 8  # the n of m16n8k16: a 16x16 accumulator tile takes two mma per k step
LDMATRIX_ROWS = 8  # rows of one ldmatrix matrix (8 x 8 16-bit values, 16 bytes a row)
ROW_ALIGN_BYTES = 16  # ldmatrix row addresses are 16-byte aligned
# the operand dtypes mma takes, by the PTX type it names (float32 operands hold TF32 values)
MMA_TYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}


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
C_ELEMENT = tuple(_c(e) for e in range(4))  # C and D (16 x 8, M x N), c0..c3 (either shape)
# m16n8k8 with .tf32 operands (one 32-bit value a register): A (16 x 8): a_e at row g (+8 for
# a1, a3), col t (+4 for a2, a3); B (8 x 8): b_e at row (k) t (+4 for b1), col (n) g
A_TF32_ELEMENT = tuple(LanePosition(8 * (e & 1), 4 * (e >> 1), row_g=1, col_t=1) for e in range(4))
B_TF32_ELEMENT = tuple(LanePosition(4 * e, 0, row_t=1, col_g=1) for e in range(2))


@dataclass(frozen=True)
class MmaShape:
    """The mma shape of one operand dtype: K, the PTX operand type, the A and B element
    tables, the values a 32-bit register holds, and whether operand tiles load with ldmatrix
    (16-bit values) or each lane's values one by one (TF32: ldmatrix moves 16-bit halves, and
    its .trans would split 32-bit values)."""

    k: int
    ptx_type: str
    a: tuple[LanePosition, ...]
    b: tuple[LanePosition, ...]
    values_per_reg: int
    ldmatrix: bool

    @property
    def instruction(self) -> str:
        t = self.ptx_type
        return f"mma.sync.aligned.m16n8k{self.k}.row.col.f32.{t}.{t}.f32"


SHAPES = {
    "float16": MmaShape(16, "f16", A_ELEMENT, B_ELEMENT, 2, True),
    "bfloat16": MmaShape(16, "bf16", A_ELEMENT, B_ELEMENT, 2, True),
    "float32": MmaShape(8, "tf32", A_TF32_ELEMENT, B_TF32_ELEMENT, 1, False),
}


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
    """The registers of a matrix_b tile that feed the mma over the tile's columns
    8 n_half .. 8 n_half + 7 (b0b1 and b2b3 of m16n8k16; b0 and b1 of m16n8k8 .tf32)."""
    return 2 * n_half, 2 * n_half + 1


def accumulator_elems(n_half: int) -> range:
    """The elements of an accumulator tile that are c0..c3 of the mma over its columns
    8 n_half .. 8 n_half + 7."""
    return range(4 * n_half, 4 * n_half + 4)


def lane_values(scope: str, dtype: str) -> int:
    """The values of one tile of a `scope` fragment of `dtype` that each lane holds."""
    if scope == "wmma.accumulator":
        return ELEMS_PER_LANE
    shape = SHAPES[dtype]
    return len(shape.a) if scope == "wmma.matrix_a" else 2 * len(shape.b)


def tile_position(scope: str, e: int, dtype: str = "float16") -> LanePosition:
    """Where value `e` of a lane's share of a tile of a `scope` fragment of `dtype` (operand
    dtype; an accumulator's is float32 whatever its operands) lies in the tile (rows and
    columns as `ir.tile_shape`: M x K, K x N, M x N)."""
    if scope == "wmma.matrix_a":
        return SHAPES[dtype].a[e]
    table = SHAPES[dtype].b if scope == "wmma.matrix_b" else C_ELEMENT
    n_half, within = divmod(e, len(table))
    pos = table[within]
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


def operand_elem(reg: int, half: int, values_per_reg: int = 2) -> int:
    """The value index of part `half` of 32-bit register `reg` of an operand tile (16-bit
    values: two a register; TF32: one)."""
    return values_per_reg * reg + half


__all__ = [
    "A_ELEMENT",
    "A_TF32_ELEMENT",
    "B_TF32_ELEMENT",
    "SHAPES",
    "MmaShape",
    "lane_values",
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
