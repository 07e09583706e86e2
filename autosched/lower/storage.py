"""Storage layout of a staged buffer: the padding `storage_align` asks for.

A stage with `storage_align = (dim, factor, offset)` (a dimension of its op's axes) gets an
allocation whose stride of dimension `dim` satisfies stride % factor == offset, TVM's meaning:
the stride is the product of the extents after `dim`, padded up to the next such value. Shared
operand tiles use it to move their rows off the same memory banks (a row stride of 40 halves
instead of 32 spreads a 16-row fragment load over all banks).

The padding is expressed as a larger extent of dimension `dim + 1` (the storage shape), so a
flat index stays the per-dimension (Horner) form over the buffer's shape: every access, the
Tensor Core `ldm` read from the flat index's coefficients and the features' per-dimension view
all follow the storage shape without knowing about the padding. Bounds and guards stay on the
logical region.
"""

from __future__ import annotations

import math

from autosched.errors import LoweringError


def aligned_stride(stride: int, factor: int, offset: int) -> int:
    """The smallest stride >= `stride` with stride % factor == offset."""
    return stride + (factor + offset - stride % factor) % factor


def storage_shape(region, align: tuple[int, int, int] | None) -> tuple[int, ...]:
    """The allocated shape of a buffer of logical extents `region` under `align`
    ((dim, factor, offset) or None)."""
    shape = tuple(region)
    if align is None:
        return shape
    dim, factor, offset = align
    if not 0 <= dim < len(shape):
        raise LoweringError(f"storage_align: dimension {dim} of a {len(shape)}-d buffer")
    stride = math.prod(shape[dim + 1 :])
    padded = aligned_stride(stride, factor, offset)
    if padded == stride:
        return shape
    inner = math.prod(shape[dim + 2 :])
    if dim + 1 == len(shape) or padded % inner:
        raise LoweringError(
            f"storage_align {align}: a stride of {padded} for dimension {dim} of shape {shape} "
            "is not a whole extent of the next dimension"
        )
    return shape[: dim + 1] + (padded // inner,) + shape[dim + 2 :]


__all__ = ["aligned_stride", "storage_shape"]
