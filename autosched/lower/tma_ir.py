"""Hopper's tensor memory accelerator (TMA) and transaction barriers (`mbarrier`) in the lowered
IR: how one elected thread of a block copies a whole operand tile from global into shared
memory, and how every thread then learns that the tile landed.

- `TensorMap`: a `const __grid_constant__ CUtensorMap` kernel parameter describing a global
  param buffer (row-major, its shape) to the copy engine: the box (the tile one copy moves, in
  the buffer's dimension order; `encoding()` gives them innermost first, as
  `cuTensorMapEncodeTiled` takes them), the shared-memory swizzle
  ("none" or "128B", the wgmma descriptors' modes) and zero fill out of bounds.
- An mbarrier array is a shared buffer of dtype `MBARRIER_DTYPE` (8 bytes a slot), one slot
  per pipeline stage.
- `MbarrierInit`: thread 0 initialises every slot with an arrival count of `count`
  (`mbarrier.init`) and fences the init for the async proxy (`fence.mbarrier_init`); a
  `Barrier` after it makes the barriers visible to every thread before any uses them.
- `MbarrierExpectTx`: `mbarrier.arrive.expect_tx` on slot `slot`: one arrival that also adds
  `nbytes` to the bytes the slot's current phase waits for.
- `TmaLoad`: `cp.async.bulk.tensor.<rank>d.shared::cluster.global.mbarrier::complete_tx::bytes`:
  the box of `map` at element coordinates `coords` (in the buffer's dimension order) into
  `dst` from element `offset`, completing its bytes on slot `slot`.
- `MbarrierWait`: every thread that reaches it spins on `mbarrier.try_wait.parity` until the
  phase of slot `slot` with parity `parity` has completed. A slot's phase completes when its
  arrivals are all in and every byte it expects has landed; the phases of a slot alternate
  parity 0, 1, 0, ...

Every statement here is reached by the whole block together, like a barrier (no
thread-dependent guard); `MbarrierInit`, `MbarrierExpectTx` and `TmaLoad` are issued by thread
0 alone (the printer guards them: the one elected issuer), so the block agrees on their operands.

Releasing a slot before it is overwritten: the consumers' wgmmas read the slot through the
async proxy, as the next copy writes it; the block retires its wgmmas (`wgmma.wait_group`) and
passes a block barrier before the elected thread issues the copy that overwrites the slot. This
is the simpler of the two correct orders; the other, an "empty" barrier per slot that the
consumers arrive on and a producer warpgroup waits on, is `warp_specialize.py`'s. The
interpreter rejects a copy into a slot that a wgmma may still read.

The CPU interpreter runs these in `interpret_tma.py`, the verifier checks them in
`verify_tma.py`, the CUDA printer prints them in `codegen/tma.py`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

from autosched.lower import ir
from autosched.te.dtype import BYTES
from autosched.te.expr import Expr

MBARRIER_DTYPE = "int64"  # an mbarrier's 8 bytes of shared memory
SWIZZLES = ("none", "128B")
SWIZZLE_ROW_BYTES = {"128B": 128}  # a swizzled box's inner row is exactly this wide
TMA_ALIGN = {"none": 128, "128B": 1024}  # where a box may land in shared memory (bytes)
BOX_MAX = 256  # elements per box dimension
RANK_MAX = 5
TMA_DTYPES = ("float16", "bfloat16", "float32")


# im2col mode: a bounding-box corner's range per spatial dimension, by the tensor's rank
# (cuTensorMapEncodeIm2col), and the traversal strides the driver takes
IM2COL_CORNERS = {3: (-(2**15), 2**15 - 1), 4: (-(2**7), 2**7 - 1), 5: (-(2**4), 2**4 - 1)}
IM2COL_STRIDE_MAX = 8
IM2COL_OFFSET_MAX = 2**16 - 1  # an im2col offset is a 16-bit operand of the copy


@dataclass(frozen=True)
class Im2col:
    """TMA's im2col mode over an [N, spatial..., C] tensor (NHWC: spatial = H, W). A copy
    moves `box` = (pixels, channels): `channels` channels from its channel coordinate of each
    of `pixels` consecutive pixels of the traversal, which visits, per image, the positions
    `lower[d] + k * strides[d]` up to `dim[d] - 1 + upper[d]` of each spatial dimension d (the
    last fastest), then the next image; the copy's coordinates name the first pixel (a position
    of that traversal), its offsets (one per spatial dimension, `TmaLoad.offsets`) are added to
    every pixel's position before reading, and positions outside the tensor read zeros. For a
    convolution of padding p, stride s: lower = -p, the positions are the output pixels' window
    origins, and the offsets the filter tap."""

    lower: tuple[int, ...]
    upper: tuple[int, ...]
    strides: tuple[int, ...]

    def positions(self, spatial: tuple[int, ...]) -> tuple[int, ...]:
        """The traversal's positions along each spatial dimension of extents `spatial`."""
        return tuple(
            (n - 1 + hi - lo) // s + 1
            for n, lo, hi, s in zip(spatial, self.lower, self.upper, self.strides, strict=True)
        )


@dataclass(eq=False)
class TensorMap:
    """A tensor map over the global param `buffer` (row-major in its shape, or in `view`, a
    shape of as many elements: an NHWC input seen as [N*H*W, C]): copies move boxes of `box`
    elements (in that shape's dimension order) into shared memory in `swizzle` mode, reading
    zeros outside it. With `im2col`, the map is in TMA's im2col mode (`Im2col`) and `box` is
    (pixels, channels)."""

    buffer: ir.Buffer
    box: tuple[int, ...]
    swizzle: str = "none"
    view: tuple[int, ...] | None = None
    im2col: Im2col | None = None

    @property
    def rank(self) -> int:
        """The rank of the tensor the map describes (as many coordinates a copy takes)."""
        return len(self.shape) if self.im2col is not None else len(self.box)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape the map describes the buffer as: its view, or its own."""
        return self.view if self.view is not None else tuple(self.buffer.shape)

    @property
    def box_bytes(self) -> int:
        return math.prod(self.box) * BYTES[self.buffer.dtype]

    def problem(self) -> str:
        """Why the driver would refuse this map ("" if it would not)."""
        b = self.buffer
        if b.scope != "global" or b.dtype not in TMA_DTYPES:
            return f"a tensor map over {b.scope} {b.dtype} {b.name}; global {TMA_DTYPES} only"
        if self.im2col is not None:
            return self._im2col_problem() or self._rows_problem()
        if len(self.shape) != self.rank or not 1 <= self.rank <= RANK_MAX:
            return f"a box of rank {self.rank} over {b.name} of shape {self.shape}"
        if math.prod(self.shape) != b.size:
            return f"a view {self.shape} of {b.name} of shape {b.shape}: not as many elements"
        if any(not 1 <= x <= BOX_MAX for x in self.box):
            return f"box {self.box}: each extent must be 1..{BOX_MAX}"
        return self._rows_problem()

    def _im2col_problem(self) -> str:
        """Why the driver would refuse this im2col map's own fields ("" if it would not)."""
        b, i2c = self.buffer, self.im2col
        assert i2c is not None
        spatial = len(self.shape) - 2
        if self.view is not None or len(self.shape) not in IM2COL_CORNERS:
            return f"an im2col map over {b.name} of shape {self.shape}: rank 3 to 5, no view"
        if len(self.box) != 2 or not 1 <= self.box[0] <= BOX_MAX:
            return f"im2col box {self.box}: (pixels 1..{BOX_MAX}, channels)"
        if not len(i2c.lower) == len(i2c.upper) == len(i2c.strides) == spatial:
            return f"im2col corners and strides of {spatial} spatial dimensions expected: {i2c}"
        lo, hi = IM2COL_CORNERS[len(self.shape)]
        if any(not lo <= c <= hi for c in (*i2c.lower, *i2c.upper)):
            return f"im2col corners {i2c.lower}, {i2c.upper}: each in {lo}..{hi}"
        if any(not 1 <= s <= IM2COL_STRIDE_MAX for s in i2c.strides):
            return f"im2col traversal strides {i2c.strides}: each 1..{IM2COL_STRIDE_MAX}"
        if any(p < 1 for p in i2c.positions(self.shape[1:-1])):
            return f"im2col corners {i2c.lower}, {i2c.upper} leave no pixel of {self.shape}"
        return ""

    def _rows_problem(self) -> str:
        """Why the driver would refuse the box's rows, swizzle or the strides ("" if not)."""
        b = self.buffer
        if self.swizzle not in SWIZZLES:
            return f"unknown swizzle {self.swizzle!r}"
        inner = self.box[-1] * BYTES[b.dtype]
        if inner % 16:
            return f"box rows of {inner} bytes; TMA moves whole 16-byte units"
        if self.swizzle in SWIZZLE_ROW_BYTES and inner != SWIZZLE_ROW_BYTES[self.swizzle]:
            return f"box rows of {inner} bytes under the {self.swizzle} swizzle (128 bytes)"
        strides = self.encoding()[1]
        if any(s % 16 for s in strides):
            return f"global strides {strides} bytes of {b.name}: multiples of 16 only"
        return ""

    def encoding(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(dims, byte strides of dims 1.., box), innermost first: `cuTensorMapEncodeTiled`'s
        globalDim, globalStrides and boxDim."""
        dims = tuple(reversed(self.shape))
        strides, stride = [], BYTES[self.buffer.dtype]
        for d in dims[:-1]:
            stride *= d
            strides.append(stride)
        return dims, tuple(strides), tuple(reversed(self.box))


class TmaStmt(ir.Stmt):
    """Base of the TMA and mbarrier statements. `exprs()` lists the statement's expressions,
    `with_exprs(new)` rebuilds it with others (same order), so that the generic passes
    (`stmt_walk.map_exprs`: simplification, index folding) treat them like other statements;
    `text()` is its line in `ir_text`."""

    EXPR_FIELDS: ClassVar[tuple[str, ...]] = ()  # the Expr fields, in `exprs()` order

    def exprs(self) -> list[Expr]:
        return [getattr(self, f) for f in self.EXPR_FIELDS]

    def with_exprs(self, new: list[Expr]) -> TmaStmt:
        changes = dict(zip(self.EXPR_FIELDS, new, strict=True))
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def text(self) -> str:
        fields = ", ".join(f"{f} {getattr(self, f)!r}" for f in self.EXPR_FIELDS)
        bars = getattr(self, "bars", None)
        on = f"{bars.name}" if bars is not None else ""
        return f"{type(self).__name__}({on}{'; ' if fields else ''}{fields})"


@dataclass(eq=False)
class MbarrierInit(TmaStmt):
    """Thread 0 initialises every slot of `bars` to expect `count` arrivals a phase."""

    bars: ir.Buffer
    count: int = 1


@dataclass(eq=False)
class MbarrierExpectTx(TmaStmt):
    """Thread 0's arrival on `bars[slot]`, adding `nbytes` to the bytes its phase waits for."""

    EXPR_FIELDS = ("slot",)
    bars: ir.Buffer
    slot: Expr
    nbytes: int

    def text(self) -> str:
        return f"MbarrierExpectTx({self.bars.name}[{self.slot!r}]; {self.nbytes} bytes)"


@dataclass(eq=False)
class TmaLoad(TmaStmt):
    """Thread 0 copies the box of `map` at `coords` (elements, the buffer's dimension order)
    into `dst[offset:]`, its bytes completing on `bars[slot]`."""

    map: TensorMap
    dst: ir.Buffer
    offset: Expr
    coords: tuple[Expr, ...]
    bars: ir.Buffer
    slot: Expr
    # an im2col map's offsets, one per spatial dimension (the buffer's order): the filter tap
    offsets: tuple[Expr, ...] = ()

    def exprs(self) -> list[Expr]:
        return [self.offset, *self.coords, self.slot, *self.offsets]

    def with_exprs(self, new: list[Expr]) -> TmaLoad:
        n = len(self.coords)
        offset, coords, slot, offsets = new[0], new[1 : n + 1], new[n + 1], new[n + 2 :]
        return dataclasses.replace(
            self, offset=offset, coords=tuple(coords), slot=slot, offsets=tuple(offsets)
        )

    def text(self) -> str:
        coords = ", ".join(repr(c) for c in self.coords)
        box = "x".join(str(x) for x in self.map.box)
        mode = ""
        if self.map.im2col is not None:
            mode = f" im2col + ({', '.join(repr(o) for o in self.offsets)})"
        return (
            f"TmaLoad({self.dst.name}[{self.offset!r}] <- {self.map.buffer.name} box {box} "
            f"{self.map.swizzle} at ({coords}){mode}; {self.bars.name}[{self.slot!r}])"
        )


@dataclass(eq=False)
class MbarrierWait(TmaStmt):
    """Wait until the phase of `bars[slot]` of parity `parity` (0 or 1) has completed."""

    EXPR_FIELDS = ("slot", "parity")
    bars: ir.Buffer
    slot: Expr
    parity: Expr

    def text(self) -> str:
        return f"MbarrierWait({self.bars.name}[{self.slot!r}]; parity {self.parity!r})"


TMA_STMTS = (MbarrierInit, MbarrierExpectTx, TmaLoad, MbarrierWait)


def uses_tma(kernel: ir.Kernel) -> bool:
    """Whether `kernel` has TMA or mbarrier statements."""
    return any(isinstance(s, TMA_STMTS) for s in ir.iter_stmts(kernel.body))


def tensor_maps(kernel: ir.Kernel) -> list[TensorMap]:
    """The kernel's tensor-map parameters, in order of first use: they follow its pointers."""
    out: dict[int, TensorMap] = {}
    for s in ir.iter_stmts(kernel.body):
        if isinstance(s, TmaLoad):
            out.setdefault(id(s.map), s.map)
    return list(out.values())


def tma_destinations(kernel: ir.Kernel) -> dict[int, str]:
    """The shared buffers TMA copies write (by id) and their swizzle, for alignment."""
    out: dict[int, str] = {}
    for s in ir.iter_stmts(kernel.body):
        if isinstance(s, TmaLoad) and out.get(id(s.dst)) != "128B":
            out[id(s.dst)] = s.map.swizzle
    return out


__all__ = [
    "BOX_MAX",
    "IM2COL_CORNERS",
    "IM2COL_OFFSET_MAX",
    "IM2COL_STRIDE_MAX",
    "MBARRIER_DTYPE",
    "RANK_MAX",
    "SWIZZLES",
    "Im2col",
    "TMA_ALIGN",
    "TMA_DTYPES",
    "TMA_STMTS",
    "MbarrierExpectTx",
    "MbarrierInit",
    "MbarrierWait",
    "TensorMap",
    "TmaLoad",
    "TmaStmt",
    "tensor_maps",
    "tma_destinations",
    "uses_tma",
]
