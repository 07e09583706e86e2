"""An implicit GEMM's gather as TMA im2col copies: the proof that a convolution's gathered
operand tile is what TMA's im2col mode (`tma_ir.Im2col`) copies, and the copy's coordinates.

The gather of an NHWC convolution (`schedule/implicit_gemm.py`) reads, for output pixel m and
filter tap (ry, rx),

    im2col[m, ry, rx, rc] = P[m / (OH*OW), (m / OW % OH)*sh + ry, (m % OW)*sw + rx, rc]

with P the input or its zero padding `P[n, h, w, c] = data[n, h - ph, w - pw, c]` inside the
data, 0 outside (`topi.nn.pad`'s form). `im2col_gather` proves both forms symbolically (the
padding's condition atom by atom; the gather's indices equal to those built from the
candidate strides, `fold_digits` folding the digits of m) and returns the geometry. A tile of
the gather at a fixed tap is then one im2col copy per 64 channels: rows = consecutive output
pixels from the tile's first m0, which the traversal visits in the same order (image by image,
row by row), each at its window origin (y*sh - ph, x*sw - pw) shifted by the tap, zero where
that falls outside the data, as the padding reads. The traversal's corners: lower = -p, upper
= (O - 1)*s - p - D + 1 (its last position is the last output's window origin); the copy's
coordinates (m0's image, window origin, the tile's first channel) and offsets (the tap).
"""

from __future__ import annotations

from dataclasses import dataclass

from autosched.lower import tma_ir as ti
from autosched.lower.arith import simplify
from autosched.lower.digit_folding import fold_digits
from autosched.lower.ir import I32, int32
from autosched.te.expr import BinOp, Const, Expr, IterVar, Load, Select
from autosched.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor

STRIDES = (1, 2, 3, 4)  # the convolution strides tried (each is then proven)


@dataclass(frozen=True)
class Im2colGather:
    """A convolution's gather read as TMA im2col copies of its NHWC input `data` (a
    placeholder): its padding, strides and output extents (h, w)."""

    data: Tensor
    pads: tuple[int, int]
    strides: tuple[int, int]
    outputs: tuple[int, int]

    def mode(self) -> ti.Im2col:
        """The im2col traversal whose positions are the output pixels' window origins."""
        spatial = tuple(int(n) for n in self.data.shape[1:3])
        upper = tuple(
            (o - 1) * s - p - n + 1
            for o, s, p, n in zip(self.outputs, self.strides, self.pads, spatial, strict=True)
        )
        lower = tuple(-p for p in self.pads)
        return ti.Im2col(lower, upper, self.strides)

    def coords(self, m: Expr, channel: Expr) -> tuple[Expr, ...]:
        """The copy coordinates (n, h, w, c) of a tile whose first row is output pixel `m`."""
        (oh, ow), (sh, sw), (ph, pw) = self.outputs, self.strides, self.pads
        n = BinOp("floordiv", m, int32(oh * ow), I32)
        y = BinOp("floormod", BinOp("floordiv", m, int32(ow), I32), int32(oh), I32)
        x = BinOp("floormod", m, int32(ow), I32)
        h = BinOp("-", BinOp("*", y, int32(sh), I32), int32(ph), I32)
        w = BinOp("-", BinOp("*", x, int32(sw), I32), int32(pw), I32)
        return (n, h, w, channel)


def _atoms(cond: Expr) -> list[Expr] | None:
    """The comparisons a conjunction is made of."""
    if isinstance(cond, BinOp) and cond.op == "&&":
        a, b = _atoms(cond.a), _atoms(cond.b)
        return None if a is None or b is None else a + b
    if isinstance(cond, BinOp) and cond.op in (">=", "<"):
        return [cond]
    return None


def _zero_padding(op: Operation) -> tuple[Tensor, tuple[int, ...]] | None:
    """(data, padding before each dimension) where `op` is `data` itself (a placeholder) or its
    zero padding: `if_then_else(inside, data[i - p], 0)` whose condition is exactly `i - p`
    inside the data along every dimension the padding may leave."""
    if isinstance(op, PlaceholderOp):
        return op.output(0), (0,) * len(op.shape)
    if not isinstance(op, ComputeOp):
        return None
    body = op.body
    if not (isinstance(body, Select) and isinstance(body.t, Load) and isinstance(body.f, Const)):
        return None
    if body.f.value != 0 or not isinstance(body.t.buffer, Tensor):
        return None
    data = body.t.buffer
    if not isinstance(data.op, PlaceholderOp) or len(body.t.indices) != len(op.axis):
        return None
    pads = []
    for axis, index in zip(op.axis, body.t.indices, strict=True):
        shift = simplify(BinOp("-", axis, index, I32))
        if not isinstance(shift, Const):
            return None
        pads.append(int(shift.value))
    atoms = _atoms(body.cond)
    if atoms is None:
        return None
    allowed, needed = set(), set()
    for axis, pad, size in zip(op.axis, pads, data.shape, strict=True):
        bounds = ((">=", pad), ("<", pad + int(size)))
        allowed |= {(id(axis), *b) for b in bounds}
        if pad > 0:
            needed.add((id(axis), *bounds[0]))
        if axis.extent > pad + int(size):
            needed.add((id(axis), *bounds[1]))
        if pad < 0:
            return None
    found = set()
    for atom in atoms:
        assert isinstance(atom, BinOp)
        if not (isinstance(atom.a, IterVar) and isinstance(atom.b, Const)):
            return None
        found.add((id(atom.a), atom.op, int(atom.b.value)))
    if not needed <= found <= allowed:
        return None
    return data, tuple(pads)


def _same(a: Expr, b: Expr, bounds) -> bool:
    """Whether `a - b` simplifies to 0 over `bounds` (digits of one value folded)."""
    difference = simplify(fold_digits(simplify(BinOp("-", a, b, I32), bounds), bounds), bounds)
    return isinstance(difference, Const) and difference.value == 0


def im2col_gather(gather: ComputeOp) -> Im2colGather | None:
    """The geometry of an NHWC convolution's gather `gather` (axes m, ry, rx, rc; see the
    module docstring), proven, or None where it does not have that form."""
    body, axes = gather.body, gather.axis
    if len(axes) != 4 or not isinstance(body, Load) or not isinstance(body.buffer, Tensor):
        return None
    found = _zero_padding(body.buffer.op)
    if found is None or len(body.indices) != 4:
        return None
    data, pads = found
    if pads[0] or pads[3] or body.indices[3] is not axes[3]:
        return None
    m, ry, rx, rc = axes
    n_images = int(data.shape[0])
    padded = [int(x) for x in body.buffer.shape[1:3]]
    bounds = {id(a): (0, a.extent - 1) for a in axes}
    for sh in STRIDES:
        for sw in STRIDES:
            oh, ow = (padded[0] - ry.extent) // sh + 1, (padded[1] - rx.extent) // sw + 1
            if oh < 1 or ow < 1 or n_images * oh * ow != m.extent:
                continue
            y = BinOp("floormod", BinOp("floordiv", m, int32(ow), I32), int32(oh), I32)
            x = BinOp("floormod", m, int32(ow), I32)
            expected = (
                BinOp("floordiv", m, int32(oh * ow), I32),
                BinOp("+", BinOp("*", y, int32(sh), I32), ry, I32),
                BinOp("+", BinOp("*", x, int32(sw), I32), rx, I32),
            )
            if all(_same(i, e, bounds) for i, e in zip(body.indices[:3], expected, strict=True)):
                return Im2colGather(data, (pads[1], pads[2]), (sh, sw), (oh, ow))
    return None


__all__ = ["Im2colGather", "im2col_gather"]
