"""CUDA for the warp-collective Tensor Core statements (`ir.WarpStmt`): nvcuda::wmma.

A fragment buffer of `tiles` 16x16 tiles is an array of wmma fragments,
`nvcuda::wmma::fragment<matrix_a, 16, 16, 16, half, row_major> A[tiles];` (matrix_a /
matrix_b: the element type and the layout that every FragmentLoad into the buffer uses; the
accumulator: `float`, no layout). The statements print as `fill_fragment`, `load_matrix_sync`,
`mma_sync` and `store_matrix_sync` on `&buffer[offset]` (the buffers' pointer types, `half*`,
`__nv_bfloat16*`, `float*`, are what wmma takes). Shared buffers that warp statements access
are declared 32-byte aligned (wmma's pointer alignment), and `#include <mma.h>` is added only
to sources with warp statements.

`KernelPrinter` (autosched.codegen.cuda) makes a `WarpPrinter` per kernel (its `table()` joins
the printer's statement table, `alloc_line(b)` declares fragments and wmma-accessed shared
buffers) and calls `written_buffer` (parameter const-ness); `codegen_program` calls
`uses_wmma` for the header. The statements' rules are checked by the verifier (lower/verify.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autosched.errors import LoweringError
from autosched.lower import ir

if TYPE_CHECKING:
    from autosched.codegen.cuda import KernelPrinter

WMMA = "nvcuda::wmma"
HEADER = "#include <mma.h>"
# load/store_matrix_sync need 256-bit alignment
SHARED_PREFIX = f"__shared__ __align__({ir.OFFSET_ALIGN_BYTES})"
FRAGMENT_USE = {
    "wmma.matrix_a": "matrix_a",
    "wmma.matrix_b": "matrix_b",
    "wmma.accumulator": "accumulator",
}
MEM_LAYOUT = {layout: f"{WMMA}::mem_{layout}" for layout in ir.MATRIX_LAYOUTS}
DEFAULT_LAYOUT = "row_major"  # of a matrix fragment nothing loads


def uses_wmma(kernel: ir.Kernel) -> bool:
    """Whether `kernel` has warp statements (or fragment allocations)."""
    return any(b.scope in ir.FRAGMENT_SCOPES for b in kernel.allocs) or any(
        isinstance(s, ir.WarpStmt) for s in ir.iter_stmts(kernel.body)
    )


def written_buffer(s: ir.Stmt) -> ir.Buffer | None:
    """The memory buffer a warp statement writes (FragmentStore's), for the const-ness of
    kernel parameters; None for every other statement."""
    return s.written() if isinstance(s, ir.WarpStmt) and s.writes_memory() else None


def _warp_buffers(kernel: ir.Kernel) -> tuple[dict[int, str], set[int]]:
    """The layout of each matrix fragment (by id; one per buffer, else LoweringError) and the
    ids of the memory buffers warp statements access."""
    layouts: dict[int, str] = {}
    memory: set[int] = set()
    for s in ir.iter_stmts(kernel.body):
        m = s.memory_tile() if isinstance(s, ir.WarpStmt) else None
        if m is None:
            continue
        if not s.writes_memory():  # a load: the fragment takes the tile's layout
            frag = s.written()
            first = layouts.setdefault(id(frag), m.layout)
            if first != m.layout:
                raise LoweringError(
                    f"kernel {kernel.name}: fragment {frag.name} is loaded both {first} and "
                    f"{m.layout}; a wmma fragment has one layout"
                )
        memory.add(id(m.buffer))
    return layouts, memory


class WarpPrinter:
    """Allocation lines and statements of one kernel's warp statements."""

    def __init__(self, printer: KernelPrinter) -> None:
        self.p = printer
        self.layouts, self.memory = _warp_buffers(printer.k)

    def alloc_line(self, b: ir.Buffer) -> str | None:
        """The declaration of allocation `b` when it is a fragment or a shared buffer that
        warp statements access; None for the printer's usual declaration."""
        name = self.p.ex.buffer_names[id(b)]
        if b.scope in ir.FRAGMENT_SCOPES:
            use = FRAGMENT_USE[b.scope]
            args = [f"{WMMA}::{use}", *[str(ir.WMMA_TILE)] * 3, self.p.t.types[b.dtype]]
            if use != "accumulator":
                args.append(f"{WMMA}::{self.layouts.get(id(b), DEFAULT_LAYOUT)}")
            return f"{WMMA}::fragment<{', '.join(args)}> {name}[{b.size // ir.TILE_ELEMS}];"
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

    def store(self, s: ir.FragmentStore, d: int) -> None:
        dst, frag = self.address(s.dst), self.frag(s.frag, s.tile)
        layout = MEM_LAYOUT[s.dst.layout]
        self.p.emit(d, f"{WMMA}::store_matrix_sync({dst}, {frag}, {s.dst.ldm}, {layout});")

    def mma(self, s: ir.FragmentMma, d: int) -> None:
        acc = self.frag(s.acc, s.acc_tile)
        a, b = self.frag(s.a, s.a_tile), self.frag(s.b, s.b_tile)
        self.p.emit(d, f"{WMMA}::mma_sync({acc}, {a}, {b}, {acc});")

    def table(self) -> dict[type, Callable]:
        """Statement type -> printer(statement, depth), for the KernelPrinter's table."""
        return {
            ir.FragmentFill: self.fill,
            ir.FragmentLoad: self.load,
            ir.FragmentStore: self.store,
            ir.FragmentMma: self.mma,
        }


__all__ = ["HEADER", "WarpPrinter", "uses_wmma", "written_buffer"]
