"""CUDA for warp statements on fragments of the "mma" flavour (`ir.Buffer.fragment_flavour`):
per-lane register arrays, `ldmatrix` and `mma.sync.m16n8k16` as inline PTX.

A fragment of `tiles` 16x16 tiles is `unsigned name[tiles][4]` (matrix_a / matrix_b: four
32-bit registers of two 16-bit values each) or `float name[tiles][8]` (accumulator); which value
of the tile each register holds is `autosched.lower.mma_layout`'s, which the CPU interpreter
emulates (`lower/interpret_mma.py`).

- FragmentLoad: one `ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16` from the lane's row
  address (`mma_layout.lane_row_offset`; the lane is threadIdx.x, since a kernel with warp
  statements has blockDim.x == 32).
- FragmentMma: two `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`, one per
  8 columns of the accumulator tile (`m16n8k8 ... .tf32.tf32` for float32 operands, whose
  loads are each lane's four values, converted by `cvt.rna.tf32.f32`).
- FragmentStore: each lane's 8 accumulator values where the C layout puts them: four float2
  stores into a row-major tile (two neighbours in a row), eight scalar stores otherwise; into
  a tile kept in 16 bits (`lower/narrow_tile.py`), rounded `half2` / `__nv_bfloat162` pairs.
- FragmentFill: the lane's 8 values.

`WarpPrinter` (wmma.py) hands a statement here when its fragments are of this flavour.
"""

from __future__ import annotations

from dataclasses import replace

from autosched.codegen.context import PrintContext
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import mma_layout as ml
from autosched.lower.arith import simplify
from autosched.lower.narrow_tile import narrowed
from autosched.te.expr import Expr

LANE = ir.THREAD_VARS["threadIdx.x"]  # the lane: blockDim.x is the warp size
FILL_ELEM = "mma_e"  # the loop variable of a fill


def _operand_list(first: int, count: int) -> str:
    return ", ".join(f"%{first + i}" for i in range(count))


def _neighbours(first: ml.LanePosition, second: ml.LanePosition) -> bool:
    """Whether `second` is the element right of `first` in every lane (one float2 store)."""
    return replace(first, col0=first.col0 + 1) == second


# an accumulator tile's element type -> (the type of a pair of values, what makes one from two
# floats, one value's store expression)
FLOAT_STORES = ("float2", "make_float2", "{}")
NARROW_STORES = {
    "float16": ("half2", "__floats2half2_rn", "__float2half_rn({})"),
    "bfloat16": ("__nv_bfloat162", "__floats2bfloat162_rn", "__float2bfloat16_rn({})"),
}


class MmaStatements:
    """Allocation lines and statements of one kernel's mma-flavour warp statements."""

    def __init__(self, printer: PrintContext) -> None:
        self.p = printer

    def alloc_line(self, b: ir.Buffer) -> str:
        """The register array of fragment `b`."""
        name, tiles = self.p.ex.buffer_names[id(b)], b.size // ir.tile_elems(b)
        if b.scope == ir.ACCUMULATOR_SCOPE:
            return f"float {name}[{tiles}][{ml.ELEMS_PER_LANE}];"
        return f"unsigned {name}[{tiles}][{ml.OPERAND_REGS}];"

    def reg(self, b: ir.Buffer, tile: Expr, i: int) -> str:
        return f"{self.p.ex.buffer_names[id(b)]}[{self.p.ex(tile)}][{i}]"

    def index(self, e: Expr) -> str:
        return self.p.ex(simplify(e))

    def fill(self, s: ir.FragmentFill, d: int) -> None:
        e, name = FILL_ELEM, self.p.ex.buffer_names[id(s.frag)]
        self.p.emit(d, "#pragma unroll")
        self.p.emit(
            d,
            f"for (int {e} = 0; {e} < {ml.ELEMS_PER_LANE}; ++{e}) "
            f"{name}[{self.p.ex(s.tile)}][{e}] = {self.p.ex(s.value)};",
        )

    def load(self, s: ir.FragmentLoad, d: int) -> None:
        src = s.src
        if src.buffer.scope != "shared" or s.frag.dtype not in ml.MMA_TYPES:
            raise LoweringError(
                f"{s.describe()}: mma fragments load {tuple(ml.MMA_TYPES)} tiles from shared "
                f"memory ({src.buffer.scope} {src.buffer.dtype} here)"
            )
        if not ml.SHAPES[s.frag.dtype].ldmatrix:
            self.load_values(s, d)
            return
        trans = ".trans" if ml.ldmatrix_trans(s.frag.scope, src.layout) else ""
        row = src.offset + ml.lane_row_offset(LANE, src.layout, src.ldm)
        address = f"&{self.p.ex.buffer_names[id(src.buffer)]}[{self.index(row)}]"
        outs = ", ".join(f'"=r"({self.reg(s.frag, s.tile, i)})' for i in range(ml.OPERAND_REGS))
        self.p.emit(
            d,
            f'asm volatile("ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 '
            f'{{{_operand_list(0, ml.OPERAND_REGS)}}}, [%{ml.OPERAND_REGS}];\\n" : {outs} : '
            f'"r"(static_cast<unsigned>(__cvta_generic_to_shared({address}))));',
        )

    def load_values(self, s: ir.FragmentLoad, d: int) -> None:
        """A TF32 operand tile: each lane's values from where the A / B layout puts them,
        rounded to TF32 into their registers."""
        src, name = s.src, self.p.ex.buffer_names[id(s.src.buffer)]
        for e in range(ml.lane_values(s.frag.scope, s.frag.dtype)):
            row, col = ml.tile_position(s.frag.scope, e, s.frag.dtype).at(LANE)
            at = self.index(src.offset + ml.element_offset(row, col, src.layout, src.ldm))
            self.p.emit(
                d,
                f'asm("cvt.rna.tf32.f32 %0, %1;\\n" : "=r"({self.reg(s.frag, s.tile, e)}) : '
                f'"f"({name}[{at}]));',
            )

    def mma(self, s: ir.FragmentMma, d: int) -> None:
        if s.a.dtype not in ml.SHAPES:
            raise LoweringError(f"{s.describe()}: mma.sync takes {tuple(ml.MMA_TYPES)}")
        shape = ml.SHAPES[s.a.dtype].instruction
        for n_half in range(ir.WMMA_TILE // ml.MMA_N):
            c = [f'"+f"({self.reg(s.acc, s.acc_tile, e)})' for e in ml.accumulator_elems(n_half)]
            a = [f'"r"({self.reg(s.a, s.a_tile, i)})' for i in range(ml.OPERAND_REGS)]
            b = [f'"r"({self.reg(s.b, s.b_tile, i)})' for i in ml.operand_b_regs(n_half)]
            operands = f"{{{_operand_list(0, 4)}}}, {{{_operand_list(4, 4)}}}, "
            operands += f"{{{_operand_list(8, 2)}}}, {{{_operand_list(0, 4)}}}"
            self.p.emit(
                d,
                f'asm volatile("{shape} {operands};\\n" : {", ".join(c)} : {", ".join(a + b)});',
            )

    def store(self, s: ir.FragmentStore, d: int) -> None:
        dst = s.dst
        name = self.p.ex.buffer_names[id(dst.buffer)]
        # a tile kept in 16 bits (lower/narrow_tile.py) takes rounded pairs, else float pairs
        pair, make, one = NARROW_STORES.get(dst.buffer.dtype, FLOAT_STORES)
        if dst.buffer.dtype != "float32" and not narrowed(dst.buffer):
            raise LoweringError(f"an accumulator stored into {dst.buffer.dtype} {dst.buffer.name}")
        positions = [ml.tile_position(ir.ACCUMULATOR_SCOPE, e) for e in range(ml.ELEMS_PER_LANE)]
        e = 0
        while e < ml.ELEMS_PER_LANE:
            row, col = positions[e].at(LANE)
            at = self.index(dst.offset + ml.element_offset(row, col, dst.layout, dst.ldm))
            if dst.layout == "row_major" and e % 2 == 0 and _neighbours(*positions[e : e + 2]):
                x, y = self.reg(s.frag, s.tile, e), self.reg(s.frag, s.tile, e + 1)
                self.p.emit(d, f"*reinterpret_cast<{pair}*>(&{name}[{at}]) = {make}({x}, {y});")
                e += 2
                continue
            self.p.emit(d, f"{name}[{at}] = {one.format(self.reg(s.frag, s.tile, e))};")
            e += 1


__all__ = ["MmaStatements"]
