"""CUDA for the warpgroup statements (`lower/wgmma_ir.py`): Hopper's `wgmma.mma_async` and its
fences as inline PTX, for the sm_90a target (`measure.compile_options.compile_arch`).

- A warpgroup accumulator of `tiles` 64 x N tiles is `float name[tiles][N / 2]`: thread t's
  values of each tile, in the order `wgmma_layout.accumulator_position` gives.
- WgmmaMma: one `wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}` with the
  accumulator's N / 2 registers as "+f" operands and the two 64-bit descriptors made by
  `as_wgmma_desc(pointer, fields)`: the fields other than the start address are the constant
  `wgmma_layout.encode(0, lbo, sbo, swizzle)`; imm-trans-a / -b are 1 for an MN-major operand.
- WgmmaFence / WgmmaCommit / WgmmaWait: `wgmma.fence`, `wgmma.commit_group`,
  `wgmma.wait_group n`. Around the fence and after a wait every accumulator register goes
  through an empty `asm volatile` that reads and writes it, so the compiler keeps register
  accesses on their side of the asynchronous window (CUTLASS's warpgroup_fence_operand).
- WgmmaStore: each thread's values where the accumulator layout puts them (float2 pairs into a
  row-major tile); WgmmaFill: the thread's N / 2 values.
- ProxyFence: `fence.proxy.async.shared::cta`.
- A long scalar fetch into a shared tile wgmmas read is unrolled `FETCH_UNROLL` iterations at
  a time (`fetch_loop_pragma`), so its swizzled addresses do not all live at once.

Shared buffers that wgmmas read are aligned to their swizzle pattern (16 bytes, 1024 for the
128-byte swizzle), whose addresses the interpreter assumes (`interpret_wgmma`). A source with
these statements holds `CUDATarget.arch_specific_marker`, which makes the builder compile it
for sm_90a.
"""

from __future__ import annotations

from autosched.codegen.context import PrintContext, StmtTable
from autosched.lower import ir
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.lower.arith import simplify
from autosched.lower.tma_ir import TMA_ALIGN, tma_destinations

DESC_HELPER = """__device__ __forceinline__ unsigned long long as_wgmma_desc(const void* p, unsigned long long fields) {
  unsigned long long address = static_cast<unsigned long long>(__cvta_generic_to_shared(p));
  return fields | ((address & 0x3FFFFULL) >> 4);
}"""  # noqa: E501
FILL_ELEM = "wg_e"
# the unroll depth of a long fetch into a shared tile wgmmas read (`fetch_loop_pragma`)
FETCH_UNROLL = 8
# the thread's place in its warpgroup: blockDim.x is the warp size, warp w = threadIdx.y % 4
ROW0 = "(16 * ((int)threadIdx.y & 3) + ((int)threadIdx.x >> 2))"
COL0 = "(2 * ((int)threadIdx.x & 3))"


def shared_alignment(kernel: ir.Kernel) -> dict[int, int]:
    """The byte alignment of each shared buffer wgmmas read or TMA copies write (by id): its
    swizzle pattern's (TMA needs 128 bytes without a swizzle)."""
    out = {i: wl.SWIZZLE_ALIGN[sw] for i, sw in wi.wgmma_operands(kernel).items()}
    for i, sw in tma_destinations(kernel).items():
        out[i] = max(out.get(i, 0), TMA_ALIGN[sw])
    return out


class WgmmaPrinter:
    """Declarations and statements of one kernel's warpgroup statements."""

    def __init__(self, printer: PrintContext) -> None:
        self.p = printer
        self.align = shared_alignment(printer.k)
        self.accumulators = [b for b in printer.k.allocs if b.fragment_flavour == ir.WGMMA_FLAVOUR]

    def alloc_line(self, b: ir.Buffer) -> str | None:
        """The declaration of a warpgroup accumulator or of a shared buffer wgmmas read; None
        for every other buffer."""
        name = self.p.ex.buffer_names[id(b)]
        if b.fragment_flavour == ir.WGMMA_FLAVOUR:
            return f"float {name}[{b.size // (wl.M * b.shape[-1])}][{b.shape[-1] // 2}];"
        if id(b) in self.align:
            align = max(self.align[id(b)], 16)
            return f"__shared__ __align__({align}) {self.p.t.types[b.dtype]} {name}[{b.size}];"
        return None

    def fetch_loop_pragma(self, s: ir.For) -> str | None:
        """`#pragma unroll FETCH_UNROLL` for an innermost serial or unrolled loop of more than
        `FETCH_UNROLL` iterations that stores into a shared tile wgmmas read; None for every
        other loop. Unrolled whole (by nvcc's choice or the schedule's), such a loop has every
        iteration's swizzled address and global load hoisted: a scalar gather (an NCHW im2col
        tile, 64 iterations) then needs more than 255 registers and spills, where 8 iterations
        at a time need under 100. Vectorized fetches (an inner `vectorize` loop) and loops of
        at most 8 iterations print as before."""
        if s.kind not in ("serial", "unroll") or s.extent <= FETCH_UNROLL:
            return None
        body = list(ir.iter_stmts(s.body))
        if any(isinstance(c, ir.For) for c in body):
            return None
        fetches = any(isinstance(c, ir.Store) and id(c.buffer) in self.align for c in body)
        return f"#pragma unroll {FETCH_UNROLL}" if fetches else None

    def register(self, table: StmtTable) -> None:
        table.register(wi.WgmmaFill, self.fill)
        table.register(wi.WgmmaMma, self.mma)
        table.register(wi.WgmmaStore, self.store)
        table.register(wi.WgmmaFence, self.fence)
        table.register(wi.WgmmaCommit, self.commit)
        table.register(wi.WgmmaWait, self.wait)
        table.register(wi.ProxyFence, self.proxy_fence)

    def reg(self, b: ir.Buffer, tile, i) -> str:
        """Register i of a wgmma's accumulator at `tile`: of a warpgroup accumulator's tile, or
        value i % 8 of tile tile + i / 8 of an mma-flavour one (`WgmmaMma`)."""
        name = self.p.ex.buffer_names[id(b)]
        if b.fragment_flavour == ir.WGMMA_FLAVOUR or not isinstance(i, int):
            return f"{name}[{self.p.ex(tile)}][{i}]"
        return f"{name}[{self.p.ex(simplify(tile + i // 8))}][{i % 8}]"

    def fill(self, s: wi.WgmmaFill, d: int) -> None:
        e = FILL_ELEM
        self.p.emit(d, "#pragma unroll")
        self.p.emit(
            d,
            f"for (int {e} = 0; {e} < {s.acc.shape[-1] // 2}; ++{e}) "
            f"{self.reg(s.acc, s.tile, e)} = {self.p.ex(s.value)};",
        )

    def fence_operands(self, d: int) -> None:
        """Every accumulator register through an empty asm: the compiler may not move its
        reads or writes across this point."""
        for b in self.accumulators:
            name, tiles = self.p.ex.buffer_names[id(b)], b.size // ir.tile_elems(b)
            values = b.shape[-1] // 2 if b.fragment_flavour == ir.WGMMA_FLAVOUR else 8
            self.p.emit(d, "#pragma unroll")
            self.p.emit(d, f"for (int wg_t = 0; wg_t < {tiles}; ++wg_t) {{")
            self.p.emit(d + 1, "#pragma unroll")
            self.p.emit(
                d + 1,
                f'for (int wg_e = 0; wg_e < {values}; ++wg_e) asm volatile("" : '
                f'"+f"({name}[wg_t][wg_e]) :: "memory");',
            )
            self.p.emit(d, "}")

    def fence(self, s: wi.WgmmaFence, d: int) -> None:
        self.fence_operands(d)
        self.p.emit(d, 'asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");')

    def commit(self, s: wi.WgmmaCommit, d: int) -> None:
        self.p.emit(d, 'asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");')

    def wait(self, s: wi.WgmmaWait, d: int) -> None:
        self.p.emit(
            d,
            f'asm volatile("wgmma.wait_group.sync.aligned {int(s.pending)};\\n" ::: "memory");',
        )
        self.fence_operands(d)

    def proxy_fence(self, s: wi.ProxyFence, d: int) -> None:
        self.p.emit(d, 'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");')

    def descriptor(self, op: wi.SharedOperand) -> str:
        self.p.ex.helpers.add(DESC_HELPER)
        pointer = f"&{self.p.ex.buffer_names[id(op.buffer)]}[{self.p.ex(op.offset)}]"
        return f"as_wgmma_desc({pointer}, {op.descriptor_fields():#x}ULL)"

    def mma(self, s: wi.WgmmaMma, d: int) -> None:
        n, half = s.n, s.n // 2
        ty = wl.TYPES[s.a.buffer.dtype]
        regs = ", ".join(f"%{i}" for i in range(half))
        trans = [int(op.major == "mn") for op in (s.a, s.b)]
        text = (
            "{\\n.reg .pred p;\\n"
            f"setp.ne.b32 p, %{half + 2}, 0;\\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} "
            f"{{{regs}}}, %{half}, %{half + 1}, p, 1, 1, {trans[0]}, {trans[1]};\\n}}\\n"
        )
        outs = ", ".join(f'"+f"({self.reg(s.acc, s.acc_tile, i)})' for i in range(half))
        ins = f'"l"({self.descriptor(s.a)}), "l"({self.descriptor(s.b)}), "r"(1)'
        self.p.emit(d, f'asm volatile("{text}" : {outs} : {ins});')

    def store(self, s: wi.WgmmaStore, d: int) -> None:
        dst = s.dst
        name = self.p.ex.buffer_names[id(dst.buffer)]
        offset = self.p.ex(dst.offset)
        self.p.emit(d, "{")
        for j in range(s.acc.shape[-1] // 8):
            for h in range(2):
                i = 4 * j + 2 * h
                row, col = f"{ROW0} + {8 * h}", f"{COL0} + {8 * j}"
                x, y = self.reg(s.acc, s.tile, i), self.reg(s.acc, s.tile, i + 1)
                if dst.layout == "row_major" and dst.ldm % 2 == 0:
                    at = f"{offset} + ({row}) * {dst.ldm} + {col}"
                    self.p.emit(
                        d + 1, f"*reinterpret_cast<float2*>(&{name}[{at}]) = make_float2({x}, {y});"
                    )
                    continue
                for v, value in enumerate((x, y)):
                    if dst.layout == "row_major":
                        at = f"{offset} + ({row}) * {dst.ldm} + {col} + {v}"
                    else:
                        at = f"{offset} + {row} + ({col} + {v}) * {dst.ldm}"
                    self.p.emit(d + 1, f"{name}[{at}] = {value};")
        self.p.emit(d, "}")


__all__ = ["DESC_HELPER", "WgmmaPrinter", "shared_alignment"]
