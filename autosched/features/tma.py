"""What the feature walk sees of a TMA box copy (`tma_ir.TmaLoad`): the copy the block's threads
would make cooperatively, each thread `per_thread` consecutive elements of the box. The copy
engine moves the box for the one issuing thread, but the bytes, their global lines and where
they land in shared memory are those of the cooperative fetch it replaces, so a TMA-fed kernel
shows the same memory traffic as its cp.async twin (and the feature table, hence the
pre-trained model, stays as it is)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from autosched.features.warp import ELEM
from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower.ir import I32, THREAD_TAGS, THREAD_VARS, int32
from autosched.te.expr import BinOp, Expr, Load


@dataclass(frozen=True)
class BoxCopy:
    """One thread's share of a box copy, as a store `dst[index] = value` run `per_thread`
    times (the walk's ELEM pseudo loop)."""

    dst: ir.Buffer
    index: Expr
    value: Expr
    per_thread: int


def _flat_thread(block: tuple[int, int, int]) -> Expr:
    x, y, z = (THREAD_VARS[tag] for tag in THREAD_TAGS)
    return x + y * int32(block[0]) + z * int32(block[0] * block[1])


def box_copy(s: ti.TmaLoad, block: tuple[int, int, int]) -> BoxCopy:
    """The cooperative copy of TMA copy `s` in a block of shape `block`: element e of the box
    (row-major) goes to `dst[offset + e]` from its place in the param."""
    box, shape = s.map.box, s.map.shape
    elems = math.prod(box)
    per_thread = max(1, elems // math.prod(block))
    e = _flat_thread(block) * int32(per_thread) + ELEM
    if s.map.im2col is not None:
        value = Load(s.map.buffer, (_im2col_source(s, e),))
        return BoxCopy(s.dst, s.offset + e, value, per_thread)
    src: Expr = int32(0)
    rest = e
    for d in reversed(range(len(box))):  # the element's coordinates in the box, innermost first
        local = BinOp("floormod", rest, int32(box[d]), I32) if d else rest
        rest = BinOp("floordiv", rest, int32(box[d]), I32)
        stride = math.prod(shape[d + 1 :])
        src = src + (s.coords[d] + local) * int32(stride)
    value = Load(s.map.buffer, (src,))
    return BoxCopy(s.dst, s.offset + e, value, per_thread)


def _im2col_source(s: ti.TmaLoad, e: Expr) -> Expr:
    """Where element e of an im2col copy's (pixels, channels) box is read, as the walk sees
    it: pixel rows of 64 channels from the first pixel's place shifted by the tap (the
    traversal's stride and its wraps past a row of the image left out: the same lines)."""
    shape, channels = s.map.shape, s.map.box[1]
    row: Expr = s.coords[0]
    for d in range(1, len(shape) - 1):
        row = row * int32(shape[d]) + s.coords[d] + s.offsets[d - 1]
    pixel = BinOp("floordiv", e, int32(channels), I32)
    channel = BinOp("floormod", e, int32(channels), I32)
    return (row + pixel) * int32(shape[-1]) + s.coords[-1] + channel


__all__ = ["BoxCopy", "box_copy"]
