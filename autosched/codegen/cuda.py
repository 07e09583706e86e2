"""CUDA source from the lowered IR (`autosched.lower.ir.Program`).

`codegen_program` prints every kernel of a program into one source: `extern "C" __global__`
functions with `__launch_bounds__(threads, min_blocks)` (min_blocks 1 unless the schedule asks
for more: one block per SM is enough for most kernels, and without the bound ptxas trades
registers for occupancy and spills; a reduction of a few hundred blocks may need two or more per
SM to run in one wave, `sketch/launch_bounds.py`), `local` buffers as register arrays, `__shared__`
arrays (or pointers into dynamic shared memory: `shared_memory.py`), loops with
`#pragma unroll` (in long unrolled nests, elements of shared buffers as a pointer plus a
constant offset where the index splits so: `index_forms.py`), float4/float2/half2/__nv_bfloat162 and
packed 8- and 16-byte half accesses for aligned `vectorize` loops (`vectors.py`), a block
reduction for `AllReduce` (`allreduce.py`), nvcuda::wmma calls for the warp-collective Tensor
Core statements (`wmma.py`), and `cp.async` for copies into double-buffered shared buffers
(`async_copy.py`), and the cluster attribute, rank, barrier and distributed-shared-memory loads
of a thread-block cluster kernel (`cluster.py`). Statements are printed
through a table from node type to printer, expressions through `expr_printer.ExprPrinter`; the
spellings that depend on the target are class attributes of `target.CUDATarget`. The helper
printers take the `context.PrintContext` this printer is, and import nothing from here.

`cuda_fp16.h` / `cuda_bf16.h` are included only by sources that use the type.

The printer prints the program it is given and rewrites nothing: the device program
(`autosched.lower.passes.device_program`) is what `build` hands it.
"""

from __future__ import annotations

from autosched.codegen.allreduce import emit_allreduce
from autosched.codegen.async_copy import HELPER as ASYNC_HELPER
from autosched.codegen.async_copy import HELPERS as ASYNC_HELPERS
from autosched.codegen.async_copy import WAIT as ASYNC_WAIT
from autosched.codegen.async_copy import (
    async_copy_text,
    async_group_text,
    uses_async_copy,
    uses_async_groups,
)
from autosched.codegen.cluster import HELPER as CLUSTER_HELPER
from autosched.codegen.cluster import HELPERS as CLUSTER_HELPERS
from autosched.codegen.cluster import ClusterPrinter
from autosched.codegen.context import PrintContext, StmtTable
from autosched.codegen.expr_printer import FLOOR_HELPERS, literal
from autosched.codegen.index_forms import is_nonneg
from autosched.codegen.lanes import aligned_unit_stride, linear_form
from autosched.codegen.shared_memory import (
    DYNAMIC_SHARED_NAME,
    STATIC_SHARED_LIMIT,
    dynamic_shared_bytes,
    shared_layout,
)
from autosched.codegen.single_pass import SinglePassPrinter
from autosched.codegen.streaming import store_line, streamed_inputs, streamed_outputs
from autosched.codegen.target import CUDATarget
from autosched.codegen.tma import DESCRIPTOR_HELPER, TmaPrinter
from autosched.codegen.vectors import emit_vector_loop
from autosched.codegen.warp_roles import RolePrinter
from autosched.codegen.wgmma import DESC_HELPER, WgmmaPrinter
from autosched.codegen.wmma import HEADER as WMMA_HEADER
from autosched.codegen.wmma import WarpPrinter, uses_wmma, written_buffer
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.dispatch import TypeTable
from autosched.lower.wgmma_ir import WgmmaStore, uses_wgmma


class KernelPrinter(PrintContext):
    """Prints one kernel; statements through a table from statement type to printer,
    expressions through the context's ExprPrinter."""

    def __init__(self, kernel: ir.Kernel, params: list[ir.Buffer], target: CUDATarget, fast: bool):
        super().__init__(kernel, params, target, fast)
        self.table: StmtTable = TypeTable()
        self.table.register(ir.Seq, self._seq)
        self.table.register(ir.Store, self._store)
        self.table.register(ir.For, self._for)
        self.table.register(ir.IfThenElse, self._if)
        self.table.register(ir.Barrier, self._barrier)
        self.table.register(ir.AsyncCommit, self._async_group)
        self.table.register(ir.AsyncWait, self._async_group)
        self.table.register(ir.AllReduce, lambda s, d: emit_allreduce(self, s, d))
        self.warp = WarpPrinter(self)
        self.warp.register(self.table)
        self.wgmma = WgmmaPrinter(self)
        self.wgmma.register(self.table)
        self.cluster = ClusterPrinter(self)
        self.cluster.register(self.table)
        self.tma = TmaPrinter(self)
        self.tma.register(self.table)
        self.roles = RolePrinter(self, self.tma, self.stmt)
        self.roles.register(self.table)
        SinglePassPrinter(self).register(self.table)

    def stmt(self, s: ir.Stmt, depth: int) -> None:
        fn = self.table.handler(s)
        if fn is None:
            raise LoweringError(f"the CUDA printer cannot print a {type(s).__name__} statement")
        fn(s, depth)

    def _seq(self, s: ir.Seq, d: int) -> None:
        for c in s.stmts:
            self.stmt(c, d)

    def print(self) -> str:
        k, t = self.k, self.t
        written = {
            id(s.buffer) for s in ir.iter_stmts(k.body) if isinstance(s, (ir.Store, ir.AllReduce))
        }
        written |= {id(b) for b in map(written_buffer, ir.iter_stmts(k.body)) if b is not None}
        written |= {id(s.dst.buffer) for s in ir.iter_stmts(k.body) if isinstance(s, WgmmaStore)}
        self.ex.streamed = streamed_inputs(k, self.params, written)
        self.ex.stream_stored = streamed_outputs(k, self.params)
        args = []
        for b in self.params:
            const = "" if id(b) in written else "const "
            args.append(f"{const}{t.types[b.dtype]}* {t.restrict} {self.ex.buffer_names[id(b)]}")
        args += self.tma.params()
        bounds = f"{k.threads_per_block}, {k.min_blocks_per_sm}"
        cluster = self.cluster.attribute()
        self.emit(0, f"{t.kernel_prefix} __launch_bounds__({bounds}){cluster} {k.name}(")
        self.lines[-1] += ", ".join(args) + ") {"
        dynamic = self.dynamic_shared()
        for b in k.allocs:
            prefix = f"{t.shared_prefix} " if b.scope == "shared" else ""
            line = dynamic.get(id(b)) or self.wgmma.alloc_line(b) or self.warp.alloc_line(b)
            self.emit(
                1, line or f"{prefix}{t.types[b.dtype]} {self.ex.buffer_names[id(b)]}[{b.size}];"
            )
        self.cluster.prologue(1)
        self.stmt(k.body, 1)
        self.emit(0, "}")
        return "\n".join(self.lines)

    def dynamic_shared(self) -> dict[int, str]:
        """Over `STATIC_SHARED_LIMIT`, declare the kernel's dynamic shared memory and return
        each shared buffer's declaration (by id): a typed pointer at its offset, which indexes
        as the array would. Empty (static arrays) for a kernel at or under the limit."""
        if not dynamic_shared_bytes(self.k):
            return {}
        offsets, align, _ = shared_layout(self.k)
        base = self.fresh(DYNAMIC_SHARED_NAME)
        self.emit(1, self.t.dynamic_shared_decl.format(align=align, name=base))
        lines = {}
        for b in self.k.allocs:
            if id(b) in offsets:
                ty, name = self.t.types[b.dtype], self.ex.buffer_names[id(b)]
                cast = f"({ty}*)({base} + {offsets[id(b)]})"
                lines[id(b)] = f"{ty}* {self.t.restrict} {name} = {cast};"
        return lines

    def _store(self, s: ir.Store, d: int) -> None:
        copy = async_copy_text(self, s)
        if copy is not None:
            self.emit(d, copy)
            return
        at = self.ex.element(s.buffer, s.index)
        self.emit(d, store_line(self, s.buffer, at, self.ex(s.value)))

    def _barrier(self, s: ir.Barrier, d: int) -> None:
        """`__syncthreads()`, after waiting for the thread's asynchronous copies if it may have
        issued any (they must be complete and visible once the block passes the barrier)."""
        if uses_async_copy(self.k) and not uses_async_groups(self.k):
            self.ex.helpers.add(ASYNC_HELPER)
            self.emit(d, ASYNC_WAIT)
        self.emit(d, self.t.barrier)

    def _async_group(self, s: ir.AsyncGroupStmt, d: int) -> None:
        """A pipeline's cp.async commit or wait (the kernel's barriers then wait for nothing)."""
        self.ex.helpers.add(ASYNC_HELPER)
        self.emit(d, async_group_text(s))

    def _if(self, s: ir.IfThenElse, d: int) -> None:
        if self.roles.split(s, d):
            return
        self.emit(d, f"if ({self.ex(s.cond)}) {{")
        self.stmt(s.then_case, d + 1)
        if s.else_case is not None:
            self.emit(d, "} else {")
            self.stmt(s.else_case, d + 1)
        self.emit(d, "}")

    def _for(self, s: ir.For, d: int) -> None:
        if s.kind == "vectorize" and emit_vector_loop(self, s, d):
            return
        name = self.ex.names[id(s.var)] = self.fresh(s.var.name)
        pragma = self.wgmma.fetch_loop_pragma(s) or self.t.loop_pragma.get(s.kind, "")
        if pragma:
            self.emit(d, pragma)
        self.emit(d, f"for ({self.index_type} {name} = 0; {name} < {s.extent}; ++{name}) {{")
        if pragma == self.t.loop_pragma["unroll"]:  # unrolled in full: its accesses may split
            self.ex.unrolled[id(s.var)] = s.extent
        self.stmt(s.body, d + 1)
        self.ex.unrolled.pop(id(s.var), None)
        self.emit(d, "}")


# ---- the program ---------------------------------------------------------------------------


def codegen_program(
    program: ir.Program, fast_math: bool = False, target: CUDATarget | None = None
) -> str:
    """One CUDA source holding every kernel of `program` (kernels take all params in order)."""
    target = target or CUDATarget()
    bodies, helpers = [], set()
    for kernel in program.kernels:
        printer = KernelPrinter(kernel, program.params, target, fast_math)
        bodies.append(printer.print())
        helpers |= printer.ex.helpers
    head = ["// Generated by autosched.codegen.cuda"]
    if any(uses_wgmma(k) for k in program.kernels):
        head.append(target.arch_specific_marker)
    head += [h for h, used in target.half_headers.items() if any(used.search(b) for b in bodies)]
    if any(uses_wmma(k) for k in program.kernels):
        head.append(WMMA_HEADER)
    if "floor" in helpers:
        head.append(FLOOR_HELPERS.rstrip("\n"))
    if DESC_HELPER in helpers:
        head.append(DESC_HELPER)
    if DESCRIPTOR_HELPER in helpers:
        head.append(DESCRIPTOR_HELPER)
    if ASYNC_HELPER in helpers:
        head.append(ASYNC_HELPERS.rstrip("\n"))
    if CLUSTER_HELPER in helpers:
        head.append(CLUSTER_HELPERS.rstrip("\n"))
    return "\n".join(head) + "\n\n" + "\n\n".join(bodies) + "\n"


__all__ = [
    "STATIC_SHARED_LIMIT",
    "CUDATarget",
    "KernelPrinter",
    "aligned_unit_stride",
    "codegen_program",
    "dynamic_shared_bytes",
    "is_nonneg",
    "linear_form",
    "literal",
    "shared_layout",
]
