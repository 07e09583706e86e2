"""The PTX ISA's definitions for the warpgroup MMA `wgmma.mma_async.sync.aligned.m64nNk16.f32`
with float16 / bfloat16 operands in shared memory, kept apart from how autosched uses them.

- A warpgroup is 4 consecutive warps (128 threads) whose first warp index is a multiple of 4;
  it multiplies a 64x16 A by a 16xN B into a 64xN float32 accumulator (N a multiple of 8 up to
  256), issued by all 128 threads together.
- Operands are read from shared memory through 64-bit matrix descriptors (`encode`, `decode`):
  bits 0-13 the start address, 16-29 the leading dimension byte offset (LBO), 32-45 the stride
  dimension byte offset (SBO), each `(x & 0x3FFFF) >> 4`; bits 49-51 the base offset (0 here:
  swizzled tiles start on their pattern's boundary); bits 62-63 the swizzle mode.
- Where element (row, k) of an operand lies (`element_address`; rows are A's M or B's N): the
  canonical layouts, in 16-byte units of T = 16 / element-bytes elements:
  K-major, no swizzle   ((8, m), (T, 2k)) : ((1T, SBO), (1, LBO))
  K-major, 128B swizzle ((8, m), (T, 2k)) : ((8T, SBO), (1, T))
  MN-major, no swizzle  ((T, 1, m), (8, k)) : ((1, T, SBO), (1T, LBO))
  MN-major, 128B swizzle ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))
  and the 128-byte swizzle (Swizzle<3,4,3> on byte addresses) XORs address bits 4-6 with bits
  7-9. Without swizzle an 8-row x 16-byte "core matrix" is 128 contiguous bytes.
- The accumulator (`accumulator_position`): thread t of the warpgroup holds N/2 values; value i
  is at row 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2), column 8 * (i / 4) + 2 * (t % 4)
  + i % 2 (each warp owns 16 rows, laid out as mma.sync's m16n8 C fragment repeated along N).
- Ordering: `wgmma.fence` before the first wgmma and whenever the accumulator registers were
  written by other instructions; `commit_group` closes the wgmmas issued since the last one into
  a group; `wait_group n` waits until at most n groups are pending, and only then are their
  results in the registers. Shared memory written by ordinary stores needs
  `fence.proxy.async.shared::cta` by the writer (then a barrier) before a wgmma reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WARPGROUP_WARPS = 4
WARPGROUP_THREADS = 128
M = 64  # rows of A and of the accumulator
K = 16  # the K of one instruction for 16-bit operands
N_STEP, N_MAX = 8, 256
VALID_N = tuple(range(N_STEP, N_MAX + 1, N_STEP))
# operand dtype -> the PTX type name
TYPES = {"float16": "f16", "bfloat16": "bf16"}
ELEMENT_BYTES = 2
MAJORS = ("k", "mn")  # K-major: K contiguous (imm-trans 0); MN-major: M or N contiguous (1)
# swizzle mode -> the descriptor's bits 62-63 (autosched prints no 64B / 32B layouts)
SWIZZLE_BITS = {"none": 0, "128B": 1}
SWIZZLE_ALIGN = {"none": 16, "128B": 1024}  # where a tile's layout must start (bytes)
CORE_ROWS = 8  # rows of a core matrix
UNIT_BYTES = 16  # a core matrix row; LBO, SBO and the start address count in these
SWIZZLE_ROW_BYTES = 128  # the row of the 128-byte swizzle pattern
FIELD_MASK = 0x3FFFF  # address bits a descriptor field keeps (before dropping the low 4)


@dataclass(frozen=True)
class Descriptor:
    """The fields of a matrix descriptor, in bytes."""

    start: int
    lbo: int
    sbo: int
    swizzle: str
    base_offset: int = 0


def _field(x: int) -> int:
    return (x & FIELD_MASK) >> 4


def encode(start: int, lbo: int, sbo: int, swizzle: str) -> int:
    """The 64-bit descriptor of a tile at shared address `start` (what the printed
    `as_wgmma_desc` computes from the pointer and `encode(0, lbo, sbo, swizzle)`)."""
    return _field(start) | _field(lbo) << 16 | _field(sbo) << 32 | SWIZZLE_BITS[swizzle] << 62


def decode(value: int) -> Descriptor:
    """The fields of a 64-bit descriptor as the hardware reads them."""
    mask14 = (1 << 14) - 1
    mode = {bits: name for name, bits in SWIZZLE_BITS.items()}.get((value >> 62) & 3)
    if mode is None:
        raise ValueError(f"descriptor {value:#x}: swizzle mode {(value >> 62) & 3} is not modelled")
    return Descriptor(
        start=(value & mask14) << 4,
        lbo=((value >> 16) & mask14) << 4,
        sbo=((value >> 32) & mask14) << 4,
        swizzle=mode,
        base_offset=(value >> 49) & 7,
    )


def swizzle_128b(address: np.ndarray) -> np.ndarray:
    """Swizzle<3,4,3> on byte addresses: bits 4-6 XOR bits 7-9."""
    return address ^ (((address >> 7) & 7) << 4)


def element_address(d: Descriptor, major: str, row: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The byte address the hardware reads element (row, k) of a 16-bit operand from (row: M of
    A or N of B; k < 16)."""
    t = UNIT_BYTES // ELEMENT_BYTES  # elements per 16-byte unit
    eb = ELEMENT_BYTES
    if major == "k":
        if d.swizzle == "none":
            linear = (row % 8) * UNIT_BYTES + (row // 8) * d.sbo + (k % t) * eb + (k // t) * d.lbo
        else:
            linear = (row % 8) * SWIZZLE_ROW_BYTES + (row // 8) * d.sbo + k * eb
    elif d.swizzle == "none":
        linear = (row % t) * eb + (row // t) * d.sbo + (k % 8) * UNIT_BYTES + (k // 8) * d.lbo
    else:
        per_row = SWIZZLE_ROW_BYTES // eb  # elements of one 128-byte row along MN
        linear = (row % per_row) * eb + (row // per_row) * d.lbo
        linear = linear + (k % 8) * SWIZZLE_ROW_BYTES + (k // 8) * d.sbo
    address = d.start + linear
    return address if d.swizzle == "none" else swizzle_128b(address)


def accumulator_position(thread: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of value `i` of warpgroup thread `thread`'s accumulator registers."""
    lane, warp = thread % 32, thread // 32
    row = 16 * warp + lane // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return row, col


def canonical_offset(major: str, swizzle: str, row, k, lbo: int, sbo: int):
    """The byte offset from a tile's start where a producer stores element (row, k) so that a
    descriptor with these fields reads it there (`element_address` at start 0); works on ints,
    numpy arrays and te expressions (no swizzle only for expressions)."""
    d = Descriptor(0, lbo, sbo, swizzle)
    if swizzle == "none":
        return element_address(d, major, row, k)
    return element_address(d, major, np.asarray(row), np.asarray(k))


__all__ = [
    "MAJORS",
    "SWIZZLE_ALIGN",
    "SWIZZLE_BITS",
    "TYPES",
    "VALID_N",
    "WARPGROUP_THREADS",
    "Descriptor",
    "accumulator_position",
    "canonical_offset",
    "decode",
    "element_address",
    "encode",
]
