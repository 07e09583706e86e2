"""CUDA for the warp-collective Tensor Core statements (`ir.WarpStmt`): nvcuda::wmma.

A fragment buffer of `tiles` tiles is an array of wmma fragments,
`nvcuda::wmma::fragment<matrix_a, 16, 16, 16, half, row_major> A[tiles];` (matrix_a /
matrix_b: the element type and the layout that every FragmentLoad into the buffer uses; the
accumulator: `float`, no layout). The shape is m16n16k16 for float16 / bfloat16 operands and
m16n16k8 for TF32 ones (float32 matrix fragments, declared `precision::tf32`); an accumulator
takes the K of the multiply-accumulates that use it. The statements print as `fill_fragment`,
`load_matrix_sync`, `mma_sync` and `store_matrix_sync` on `&buffer[offset]` (the buffers'
pointer types, `half*`, `__nv_bfloat16*`, `float*`, are what wmma takes); a load into a TF32
fragment is followed by the loop converting each element with `__float_to_tf32`. Shared
buffers that warp statements access are declared 32-byte aligned (wmma's pointer alignment; in
a kernel whose shared memory is dynamic, `autosched.codegen.shared_memory` places them at
32-byte offsets instead), and `#include <mma.h>` is added only to sources with warp statements.

Fragments of the "mma" flavour (`ir.Buffer.fragment_flavour`) are per-lane registers instead:
their declarations and statements come from `autosched.codegen.mma` (`MmaStatements`), to which
the printer hands every statement whose fragments are of that flavour.

`KernelPrinter` (autosched.codegen.cuda) makes a `WarpPrinter` per kernel (its `register(table)`
adds to the printer's statement table, `alloc_line(b)` declares fragments and wmma-accessed shared
buffers) and calls `written_buffer` (parameter const-ness); `codegen_program` calls
`uses_wmma` for the header. The statements' rules are checked by the verifier (lower/verify.py).
"""

from __future__ import annotations

from autosched.codegen.context import PrintContext, StmtTable
from autosched.codegen.mma import MmaStatements
from autosched.errors import LoweringError
from autosched.lower import ir

WMMA = "nvcuda::wmma"
HEADER = "#include <mma.h>"
# load/store_matrix_sync need 256-bit alignment
SHARED_ALIGN = ir.OFFSET_ALIGN_BYTES
SHARED_PREFIX = f"__shared__ __align__({SHARED_ALIGN})"
FRAGMENT_USE = {
    "wmma.matrix_a": "matrix_a",
    "wmma.matrix_b": "matrix_b",
    "wmma.accumulator": "accumulator",
}
MEM_LAYOUT = {layout: f"{WMMA}::mem_{layout}" for layout in ir.MATRIX_LAYOUTS}
DEFAULT_LAYOUT = "row_major"  # of a matrix fragment nothing loads
# matrix fragment dtype -> the element type its declaration names, where not the dtype's C type
OPERAND_PRECISION = {ir.TF32_OPERAND_DTYPE: f"{WMMA}::precision::tf32"}
TF32_ELEM = "tf32_e"  # the element loop variable of the conversion after a TF32 load


def uses_wmma(kernel: ir.Kernel) -> bool:
    """Whether `kernel` has warp statements (or fragment allocations)."""
    fragments = (b for b in kernel.allocs if b.fragment_flavour != ir.WGMMA_FLAVOUR)
    return any(b.scope in ir.FRAGMENT_SCOPES for b in fragments) or any(
        isinstance(s, ir.WarpStmt) for s in ir.iter_stmts(kernel.body)
    )


def written_buffer(s: ir.Stmt) -> ir.Buffer | None:
    """The memory buffer a warp statement writes (FragmentStore's), for the const-ness of
    kernel parameters; None for every other statement."""
    return s.written() if isinstance(s, ir.WarpStmt) and s.writes_memory() else None


def warp_memory(kernel: ir.Kernel) -> set[int]:
    """The ids of the memory buffers warp statements access: their tiles' pointers must be
    `SHARED_ALIGN`-byte aligned, so a shared one is declared (or placed) at that alignment."""
    tiles = (s.memory_tile() for s in ir.iter_stmts(kernel.body) if isinstance(s, ir.WarpStmt))
    return {id(m.buffer) for m in tiles if m is not None}


def _fragment_layouts(kernel: ir.Kernel) -> dict[int, str]:
    """The layout of each matrix fragment (by id; one per buffer, else LoweringError)."""
    layouts: dict[int, str] = {}
    for s in ir.iter_stmts(kernel.body):
        if not isinstance(s, ir.WarpStmt):
            continue
        m = s.memory_tile()
        if m is None or s.writes_memory():  # only a load gives its fragment the tile's layout
            continue
        frag = s.written()
        first = layouts.setdefault(id(frag), m.layout)
        if first != m.layout:
            raise LoweringError(
                f"kernel {kernel.name}: fragment {frag.name} is loaded both {first} and "
                f"{m.layout}; a wmma fragment has one layout"
            )
    return layouts


def _accumulator_k(kernel: ir.Kernel) -> dict[int, int]:
    """The K of each accumulator (by id) that a multiply-accumulate uses (the verifier checks
    that it is one K per accumulator)."""
    return {
        id(s.acc): ir.operand_k(s.a.dtype)
        for s in ir.iter_stmts(kernel.body)
        if isinstance(s, ir.FragmentMma)
    }


class WarpPrinter:
    """Allocation lines and statements of one kernel's warp statements."""

    def __init__(self, printer: PrintContext) -> None:
        self.p = printer
        self.layouts, self.memory = _fragment_layouts(printer.k), warp_memory(printer.k)
        self.acc_k = _accumulator_k(printer.k)
        self.mma_flavour = MmaStatements(printer)

    def shape(self, b: ir.Buffer) -> list[str]:
        """The m, n, k of fragment `b`'s declaration."""
        if b.scope == "wmma.accumulator":
            k = self.acc_k.get(id(b), ir.WMMA_TILE)
        else:
            k = ir.operand_k(b.dtype)
        return [str(ir.WMMA_TILE), str(ir.WMMA_TILE), str(k)]

    def alloc_line(self, b: ir.Buffer) -> str | None:
        """The declaration of allocation `b` when it is a fragment or a shared buffer that
        warp statements access; None for the printer's usual declaration."""
        name = self.p.ex.buffer_names[id(b)]
        if b.scope in ir.FRAGMENT_SCOPES and b.fragment_flavour == "mma":
            return self.mma_flavour.alloc_line(b)
        if b.scope in ir.FRAGMENT_SCOPES:
            use = FRAGMENT_USE[b.scope]
            elem = self.p.t.types[b.dtype]
            if use != "accumulator":
                elem = OPERAND_PRECISION.get(b.dtype, elem)
            args = [f"{WMMA}::{use}", *self.shape(b), elem]
            if use != "accumulator":
                args.append(f"{WMMA}::{self.layouts.get(id(b), DEFAULT_LAYOUT)}")
            return f"{WMMA}::fragment<{', '.join(args)}> {name}[{b.size // ir.tile_elems(b)}];"
        if b.scope == "shared" and id(b) in self.memory:
            return f"{SHARED_PREFIX} {self.p.t.types[b.dtype]} {name}[{b.size}];"
        return None

    def frag(self, b: ir.Buffer, tile) -> str:
        return f"{self.p.ex.buffer_names[id(b)]}[{self.p.ex(tile)}]"

    def address(self, m: ir.MatrixTile) -> str:
        return f"&{self.p.ex.buffer_names[id(m.buffer)]}[{self.p.ex(m.offset)}]"

    def fill(self, s: ir.FragmentFill, d: int) -> None:
        self.p.emit(d, f"{WMMA}::fill_fragment({self.frag(s.frag, s.tile)}, {self.p.ex(s.value)});")

    def load(self, s: ir.FragmentLoad, d: int) -> None:
        frag, src = self.frag(s.frag, s.tile), self.address(s.src)
        self.p.emit(d, f"{WMMA}::load_matrix_sync({frag}, {src}, {s.src.ldm});")
        if ir.is_tf32(s.frag):
            self.tf32_convert(frag, d)

    def tf32_convert(self, frag: str, d: int) -> None:
        """Round a loaded float32 fragment's elements to TF32 (what mma_sync's tf32 shape
        expects; the interpreter rounds on load the same way)."""
        e = TF32_ELEM
        self.p.emit(d, f"for (int {e} = 0; {e} < {frag}.num_elements; ++{e}) {{")
        self.p.emit(d + 1, f"{frag}.x[{e}] = {WMMA}::__float_to_tf32({frag}.x[{e}]);")
        self.p.emit(d, "}")

    def store(self, s: ir.FragmentStore, d: int) -> None:
        dst, frag = self.address(s.dst), self.frag(s.frag, s.tile)
        layout = MEM_LAYOUT[s.dst.layout]
        self.p.emit(d, f"{WMMA}::store_matrix_sync({dst}, {frag}, {s.dst.ldm}, {layout});")

    def mma(self, s: ir.FragmentMma, d: int) -> None:
        acc = self.frag(s.acc, s.acc_tile)
        a, b = self.frag(s.a, s.a_tile), self.frag(s.b, s.b_tile)
        self.p.emit(d, f"{WMMA}::mma_sync({acc}, {a}, {b}, {acc});")

    def register(self, table: StmtTable) -> None:
        """Register the warp statements' printers in the KernelPrinter's statement table: each
        prints through the printer of its statement's flavour (this one, or MmaStatements)."""
        for stmt_type, method in (
            (ir.FragmentFill, "fill"),
            (ir.FragmentLoad, "load"),
            (ir.FragmentStore, "store"),
            (ir.FragmentMma, "mma"),
        ):
            table.register(stmt_type, self._by_flavour(method))

    def _by_flavour(self, method: str):
        printers = {"wmma": self, "mma": self.mma_flavour}

        def emit(s: ir.WarpStmt, d: int) -> None:
            getattr(printers[s.flavour()], method)(s, d)

        return emit


__all__ = ["HEADER", "SHARED_ALIGN", "WarpPrinter", "uses_wmma", "warp_memory", "written_buffer"]
