"""CUDA for the TMA and mbarrier statements (`lower/tma_ir.py`): inline PTX of sm_90.

- Tensor maps are kernel parameters after the pointers, one per `tma_ir.tensor_maps(kernel)`
  entry: `const __grid_constant__ TmaDescriptor name`, a 64-byte aligned 128-byte struct the
  host encodes with the driver's `cuTensorMapEncodeTiled` and passes by value; the copy takes
  the parameter's generic address.
- Elected statements print under `threadIdx == (0, 0, 0)`.
- MbarrierInit: `mbarrier.init.shared::cta.b64` of every slot, then
  `fence.mbarrier_init.release.cluster` and `fence.proxy.async.shared::cta`, which make the
  init visible to the async proxy (the TMA unit) and, with the `Barrier` that must follow, to
  every thread.
- MbarrierExpectTx: `mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes`.
- TmaLoad: `cp.async.bulk.tensor.<r>d.shared::cluster.global.mbarrier::complete_tx::bytes
  [dst], [map, {coordinates, innermost first}], [bar]`; over an im2col map
  `...global.im2col.mbarrier...` with the 16-bit offsets after the barrier, innermost first
  (`{w, h}` of an NHWC tensor).
- MbarrierWait: a `mbarrier.try_wait.parity.shared::cta.b64` loop.
"""

from __future__ import annotations

from autosched.codegen.context import PrintContext, StmtTable
from autosched.lower import ir
from autosched.lower import tma_ir as ti

DESCRIPTOR_TYPE = "TmaDescriptor"
DESCRIPTOR_HELPER = (
    f"struct __align__(64) {DESCRIPTOR_TYPE} {{ unsigned long long bits[16]; }};  "
    "// a CUtensorMap, encoded by the host"
)
ELECTED = "if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {"
SHARED_ADDRESS = "(unsigned)__cvta_generic_to_shared"
WAIT_LOOP = (
    "{\\n.reg .pred done;\\nTMA_WAIT:\\n"
    "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n"
    "@!done bra TMA_WAIT;\\n}\\n"
)


def map_names(printer: PrintContext) -> dict[int, str]:
    """The parameter name of each tensor map of the printed kernel (by id)."""
    return {id(m): printer.fresh(f"{m.buffer.name}_map") for m in ti.tensor_maps(printer.k)}


class TmaPrinter:
    """Parameters and statements of one kernel's TMA and mbarrier statements."""

    def __init__(self, printer: PrintContext) -> None:
        self.p = printer
        self.maps = map_names(printer)
        # inside a producer warpgroup's branch that only its elected thread runs
        # (`warp_roles.RolePrinter`): the elected statements print unguarded
        self.issuer = False

    def params(self) -> list[str]:
        """The tensor map parameters, after the pointers."""
        if self.maps:
            self.p.ex.helpers.add(DESCRIPTOR_HELPER)
        return [f"const __grid_constant__ {DESCRIPTOR_TYPE} {n}" for n in self.maps.values()]

    def register(self, table: StmtTable) -> None:
        table.register(ti.MbarrierInit, self.init)
        table.register(ti.MbarrierExpectTx, self.expect_tx)
        table.register(ti.TmaLoad, self.load)
        table.register(ti.MbarrierWait, self.wait)

    def bar(self, bars: ir.Buffer, slot) -> str:
        name = self.p.ex.buffer_names[id(bars)]
        return f"{SHARED_ADDRESS}(&{name}[{self.p.ex(slot)}])"

    def elected(self, d: int, lines: list[str]) -> None:
        if self.issuer:
            for line in lines:
                self.p.emit(d, line)
            return
        self.p.emit(d, ELECTED)
        for line in lines:
            self.p.emit(d + 1, line)
        self.p.emit(d, "}")

    def init(self, s: ti.MbarrierInit, d: int) -> None:
        name = self.p.ex.buffer_names[id(s.bars)]
        self.elected(
            d,
            [
                f"for (int tma_s = 0; tma_s < {s.bars.size}; ++tma_s) "
                f'asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\\n" :: '
                f'"r"({SHARED_ADDRESS}(&{name}[tma_s])), "r"({s.count}) : "memory");',
                'asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");',
                'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");',
            ],
        )

    def expect_tx(self, s: ti.MbarrierExpectTx, d: int) -> None:
        self.elected(
            d,
            [
                'asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n" :: '
                f'"r"({self.bar(s.bars, s.slot)}), "r"({s.nbytes}) : "memory");'
            ],
        )

    def load(self, s: ti.TmaLoad, d: int) -> None:
        rank = s.map.rank
        coords = ", ".join(f"%{2 + i}" for i in range(rank))
        mode, shifts = "", ""
        if s.map.im2col is not None:  # the offsets follow the barrier, innermost first
            mode = ".im2col"
            shifts = ", {" + ", ".join(f"%{3 + rank + i}" for i in range(len(s.offsets))) + "}"
        text = (
            f"cp.async.bulk.tensor.{rank}d.shared::cluster.global{mode}.mbarrier::complete_tx::"
            f"bytes [%0], [%1, {{{coords}}}], [%{2 + rank}]{shifts};\\n"
        )
        dst = f"{SHARED_ADDRESS}(&{self.p.ex.buffer_names[id(s.dst)]}[{self.p.ex(s.offset)}])"
        ins = [f'"r"({dst})', f'"l"(reinterpret_cast<unsigned long long>(&{self.maps[id(s.map)]}))']
        ins += [f'"r"((int)({self.p.ex(c)}))' for c in reversed(s.coords)]  # innermost first
        ins.append(f'"r"({self.bar(s.bars, s.slot)})')
        ins += [f'"h"((unsigned short)({self.p.ex(o)}))' for o in reversed(s.offsets)]
        self.elected(d, [f'asm volatile("{text}" :: {", ".join(ins)} : "memory");'])

    def wait(self, s: ti.MbarrierWait, d: int) -> None:
        self.p.emit(
            d,
            f'asm volatile("{WAIT_LOOP}" :: "r"({self.bar(s.bars, s.slot)}), '
            f'"r"((unsigned)({self.p.ex(s.parity)})) : "memory");',
        )


__all__ = ["DESCRIPTOR_HELPER", "DESCRIPTOR_TYPE", "TmaPrinter", "map_names"]
