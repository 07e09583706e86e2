"""How lowering stores a shared operand tile that wgmmas read, and how it describes it.

The choice: the canonical layout without swizzle, made from the stage's row-major tile by cutting
its contiguous (last) dimension into groups of 8 elements (16 bytes) and putting the groups
outermost: element (r, c) of an R x C tile is at `(c / 8) * G + 8r + c % 8`
(`canonical_index`), with G = 8R elements between column groups, or 8R + 8 where the stage's
rows are padded (`group_stride`: the padding the sketch draws against bank conflicts is spent
here instead, so the 16-byte pieces of one row fall in distinct banks). Rows r are then 16
bytes apart, 8-row groups 128 bytes apart, column groups 2G bytes apart: 8 x 16-byte core
matrices, as wgmma's descriptors describe them (`wgmma_layout`). A cooperative fetch of 8
consecutive elements of a row still writes 16 contiguous bytes, so 16-byte vectors and cp.async
copies stay whole.

`operand_fields` gives the descriptor of such a tile: its major-ness (the contiguous dimension is
K: "k"; M or N: "mn"), and the leading / stride byte offsets: K steps of 8 are column groups
(2G bytes) when K is contiguous, row groups (128 bytes) otherwise.

The 128-byte swizzle (`swizzle_of`): a K-major tile (or a B tile with N contiguous) whose rows
are whole 128-byte lines (a multiple of 64 halfs, rows not padded, a multiple of 8 of them) is
stored as wgmma's 128B-swizzled atoms instead: the contiguous dimension cut into 64-element
atoms of R rows each, atom after atom; in an atom row r holds 128 bytes whose 16-byte chunk j
lies at chunk j XOR (r % 8) (`swizzled_index`). A K-major descriptor reads 64-row slabs of an
atom (SBO 1024 bytes between 8-row groups), an N-major one a 16-row K slice across atoms (LBO
the atom's size). A 16-byte fetch of 8 consecutive elements of a row still writes 16
contiguous bytes, the 8 chunks of a row cover the 32 banks, and 8 consecutive rows put a
given chunk in 8 distinct bank groups, so neither the fetch nor the wgmma's reads conflict, and
no padding is spent. Every atom is R * 128 bytes, a multiple of 1024: with the buffer aligned to
1024 bytes (the printer does it), every tile, slot and atom starts on the swizzle pattern.
The sketch's row padding draw chooses between the two: a padded stage keeps the canonical
layout (its rows are no longer 128-byte lines).
"""

from __future__ import annotations

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import wgmma_layout as wl
from autosched.te.expr import BinOp, Expr

GROUP = 8  # elements of a core matrix row (16 bytes of a 16-bit type)
SWIZZLE_COLUMNS = wl.SWIZZLE_ROW_BYTES // wl.ELEMENT_BYTES  # elements of a swizzled row (64)
SWIZZLE_BITS = 3  # the chunk index bits the 128-byte swizzle XORs with the row's


def tile_dims(shape: tuple[int, ...], name: str) -> tuple[int, int]:
    """The (row, column) dimensions of a stage's storage that its canonical tiles span: its last
    two dimensions of extent above 1 (an implicit GEMM's gather keeps unit window dimensions
    between its pixels and its channels)."""
    wide = [d for d, n in enumerate(shape) if n > 1]
    if len(wide) < 2:
        raise LoweringError(f"wgmma: the shared operand {name} {list(shape)} is not a matrix")
    return wide[-2], wide[-1]


def group_stride(rows: int, cols: int, columns: int) -> int:
    """Elements between the column groups of a canonical tile of `rows` x `cols` storage
    whose rows hold `columns` elements: 8R, or 8R + 8 where the storage's rows are padded by at
    least 8 and the groups still fit in it."""
    dense = GROUP * rows
    padded = dense + GROUP
    fits = -(-columns // GROUP) * padded <= rows * cols
    return padded if cols >= columns + GROUP and fits else dense


def swizzle_of(rows: int, cols: int, columns: int, contiguous_is_k: bool, is_b: bool) -> str:
    """The layout of a wgmma operand tile of `rows` x `cols` storage whose rows hold `columns`
    elements: "128B" where its rows are whole, unpadded 128-byte lines, K-major or (B only:
    `is_b`) N-major, else "none". An M-major A keeps the canonical layout: its warps' 16-row
    slabs must lie a constant step apart, which atoms of 64 rows break."""
    lines = cols == columns and cols % SWIZZLE_COLUMNS == 0 and rows % GROUP == 0
    return "128B" if lines and (contiguous_is_k or is_b) else "none"


def _xor(a: Expr, b: Expr) -> Expr:
    """`a ^ b` of two values in [0, 8), from the index arithmetic's operations: bit i is the
    parity of `a / 2^i + b / 2^i`."""
    out: Expr | None = None
    for i in range(SWIZZLE_BITS):
        step = ir.int32(1 << i)
        bit = BinOp(
            "floormod", BinOp("floordiv", a, step, ir.I32) + (b // step), ir.int32(2), ir.I32
        )
        term = bit * ir.int32(1 << i)
        out = term if out is None else out + term
    assert out is not None
    return out


def swizzled_index(r: Expr, c: Expr, rows: int) -> Expr:
    """The flat index of element (r, c) of a K-major 128B-swizzled tile of `rows` rows."""
    atom, in_row = c // SWIZZLE_COLUMNS, c % SWIZZLE_COLUMNS
    chunk = _xor(in_row // GROUP, r % GROUP)
    return (
        atom * ir.int32(rows * SWIZZLE_COLUMNS)
        + r * ir.int32(SWIZZLE_COLUMNS)
        + chunk * ir.int32(GROUP)
        + c % GROUP
    )


def canonical_index(
    indices: list[Expr], shape: tuple[int, ...], columns: int, name: str, swizzle: str = "none"
) -> Expr:
    """The flat index of element `indices` of a wgmma operand stage of storage `shape` whose
    rows hold `columns` elements: the tile dimensions (`tile_dims`) in the canonical layout
    (or, `swizzle` "128B", the swizzled one), the others row-major over whole tiles."""
    rd, cd = tile_dims(shape, name)
    rows, cols = shape[rd], shape[cd]
    if rows % GROUP or cols % GROUP:
        raise LoweringError(
            f"wgmma: the shared operand {name} is {rows} x {cols}; its canonical layout needs "
            f"both multiples of {GROUP}"
        )
    r, c = indices[rd], indices[cd]
    if swizzle == "128B":
        flat = swizzled_index(r, c, rows)
    else:
        stride = group_stride(rows, cols, columns)
        flat = c // GROUP * ir.int32(stride) + r * ir.int32(GROUP) + c % GROUP
    outer: Expr | None = None
    for d, idx in enumerate(indices):
        if d not in (rd, cd):
            outer = idx if outer is None else outer * ir.int32(shape[d]) + idx
    if outer is None:
        return flat
    return BinOp("+", outer * ir.int32(rows * cols), flat, ir.I32)


def operand_fields(
    contiguous_is_k: bool, stride: int, swizzle: str = "none", rows: int = 0
) -> tuple[str, int, int]:
    """(major, LBO, SBO) of a canonical tile whose column groups are `stride` elements apart
    (`group_stride`), or of a swizzled one of `rows` rows (`swizzle` "128B": 8-row groups of
    128-byte lines 1024 bytes apart; K-major: LBO unused, 16 by convention; N-major: LBO the
    distance between 64-column atoms)."""
    if swizzle == "128B":
        line_groups = GROUP * wl.SWIZZLE_ROW_BYTES
        if contiguous_is_k:
            return "k", wl.UNIT_BYTES, line_groups
        return "mn", rows * wl.SWIZZLE_ROW_BYTES, line_groups
    groups = stride * wl.ELEMENT_BYTES  # bytes between column groups
    core = GROUP * wl.UNIT_BYTES  # bytes between row groups
    if contiguous_is_k:
        return "k", groups, core
    return "mn", core, groups


__all__ = [
    "GROUP",
    "SWIZZLE_COLUMNS",
    "canonical_index",
    "group_stride",
    "operand_fields",
    "swizzle_of",
    "swizzled_index",
    "tile_dims",
]
