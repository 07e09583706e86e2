"""The verifier's rules of the TMA and mbarrier statements (`lower/tma_ir.py`), checked within
`verify._KernelVerifier`, which registers `TmaRules` for each of them:

- no thread-dependent guard around them: the whole block reaches each (the printer has thread
  0 issue the elected ones, so a block has exactly one issuer);
- mbarrier arrays are shared buffers of `tma_ir.MBARRIER_DTYPE`; in program order, an array is
  used only after its `MbarrierInit` and a `Barrier` after that (the init's visibility);
- a copy's tensor map is one the driver would encode (`TensorMap.problem`), over a param of the
  destination's dtype (with an offset per spatial dimension exactly where the map is im2col),
  into a shared buffer at an offset provably aligned to the map's swizzle (`tma_ir.TMA_ALIGN`);
- each `MbarrierExpectTx` announces exactly the bytes of the copies that follow it in its
  statement list on the same mbarrier and slot, and every copy follows such an announcement.
"""

from __future__ import annotations

from typing import Any

from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower.arith import is_multiple
from autosched.lower.dispatch import TypeTable
from autosched.te.dtype import BYTES
from autosched.te.expr_text import expr_str


class TmaRules:
    """Checks one kernel's TMA and mbarrier statements for a `_KernelVerifier` (`kv`)."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv

    def register(self, table: TypeTable[ir.Stmt, [str | None], None]) -> None:
        for stmt_type in ti.TMA_STMTS:
            table.register(stmt_type, self.check)
        if ti.uses_tma(self.kv.k):
            for s in ir.iter_stmts(self.kv.k.body):  # the maps first: the bytes rest on them
                if isinstance(s, ti.TmaLoad) and s.map.problem():
                    self.kv.fail(f"TmaLoad into {s.dst.name}: {s.map.problem()}")
            self.check_order(self.kv.k.body)
            for s in ir.iter_stmts(self.kv.k.body):
                if isinstance(s, ir.Seq):
                    self.check_announcements(s.stmts)

    def check(self, s: Any, divergent: str | None) -> None:
        kv = self.kv
        where = type(s).__name__
        if divergent is not None:
            kv.fail(f"{where} under the thread-dependent condition {divergent} (the whole block)")
        kv.roles.issued(s)
        self.barriers(s.bars, where)
        for e in [getattr(s, "slot", None), getattr(s, "parity", None)]:
            if e is not None:
                kv.expr(e, where, "int")
        if isinstance(s, ti.MbarrierInit) and not (isinstance(s.count, int) and s.count >= 1):
            kv.fail(f"{where}: arrival count {s.count!r} must be a positive int")
        if isinstance(s, ti.TmaLoad):
            self.copy(s, where)

    def barriers(self, bars: Any, where: str) -> None:
        kv = self.kv
        kv.buffer(bars, where)
        if bars.scope != "shared" or bars.dtype != ti.MBARRIER_DTYPE:
            kv.fail(f"{where}: {bars.name} is no shared {ti.MBARRIER_DTYPE} mbarrier array")

    def copy(self, s: ti.TmaLoad, where: str) -> None:
        kv = self.kv
        problem = s.map.problem()
        if problem:
            kv.fail(f"{where}: {problem}")
        kv.buffer(s.map.buffer, where)
        kv.buffer(s.dst, where)
        if s.dst.scope != "shared" or s.dst.dtype != s.map.buffer.dtype:
            kv.fail(
                f"{where}: copies {s.map.buffer.dtype} {s.map.buffer.name} into {s.dst.scope} "
                f"{s.dst.dtype} {s.dst.name}; shared of the same dtype only"
            )
        if len(s.coords) != s.map.rank:
            kv.fail(f"{where}: {len(s.coords)} coordinates for a box of rank {s.map.rank}")
        spatial = s.map.rank - 2 if s.map.im2col is not None else 0
        if len(s.offsets) != spatial:
            kv.fail(f"{where}: {len(s.offsets)} im2col offsets for {spatial} spatial dimensions")
        for c in (*s.coords, *s.offsets):
            kv.expr(c, where, "int")
        kv.expr(s.offset, where, "int")
        align = ti.TMA_ALIGN[s.map.swizzle] // BYTES[s.dst.dtype]
        if not is_multiple(s.offset, align, kv.ranges):
            kv.fail(
                f"{where}: offset {expr_str(s.offset)} into {s.dst.name} is not provably "
                f"{ti.TMA_ALIGN[s.map.swizzle]}-byte aligned ({s.map.swizzle} swizzle)"
            )

    def check_order(self, body: ir.Stmt) -> None:
        """Init, then a barrier, then uses: walked in program order."""
        inited: set[int] = set()
        unfenced: set[int] = set()
        for s in ir.iter_stmts(body):
            if isinstance(s, ir.Barrier):
                unfenced.clear()
            elif isinstance(s, ti.MbarrierInit):
                inited.add(id(s.bars))
                unfenced.add(id(s.bars))
            elif isinstance(s, ti.TMA_STMTS):
                name = type(s).__name__
                if id(s.bars) not in inited:
                    self.kv.fail(f"{name} uses {s.bars.name} before its MbarrierInit")
                if id(s.bars) in unfenced:
                    self.kv.fail(f"{name} uses {s.bars.name} with no Barrier after its init")

    def check_announcements(self, stmts: list[ir.Stmt]) -> None:
        """Each expect_tx announces the bytes of the copies after it on its slot."""
        open_tx: ti.MbarrierExpectTx | None = None
        total = 0

        def close() -> None:
            if open_tx is not None and total != open_tx.nbytes:
                self.kv.fail(
                    f"MbarrierExpectTx on {open_tx.bars.name}[{expr_str(open_tx.slot)}] "
                    f"announces {open_tx.nbytes} bytes, but its copies deliver {total}"
                )

        for s in [*stmts, None]:
            if isinstance(s, ti.TmaLoad):
                same = open_tx is not None and (
                    open_tx.bars is s.bars and expr_str(open_tx.slot) == expr_str(s.slot)
                )
                if not same:
                    self.kv.fail(
                        f"TmaLoad into {s.dst.name} follows no MbarrierExpectTx on "
                        f"{s.bars.name}[{expr_str(s.slot)}] in its statement list"
                    )
                total += s.map.box_bytes
                continue
            close()
            open_tx, total = (s, 0) if isinstance(s, ti.MbarrierExpectTx) else (None, 0)


__all__ = ["TmaRules"]
