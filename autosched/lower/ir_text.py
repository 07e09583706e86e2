"""The text form of a program: one line per statement, indented by nesting, with each kernel's
launch shape and allocations. Tests compare it (the golden files of the passes) and it is what to
print when debugging a lowering."""

from __future__ import annotations

from autosched.lower.cluster_ir import ClusterBarrier, ClusterLoad
from autosched.lower.ir import (
    AllReduce,
    AsyncCommit,
    AsyncWait,
    Barrier,
    For,
    IfThenElse,
    Program,
    Seq,
    Stmt,
    Store,
    WarpStmt,
)
from autosched.lower.single_pass_ir import SINGLE_PASS_STMTS
from autosched.lower.tma_ir import TmaStmt
from autosched.lower.wgmma_ir import (
    ProxyFence,
    WarpgroupStmt,
    WgmmaMma,
    WgmmaOperandTile,
    WgmmaWait,
)


def warpgroup_text(s: WarpgroupStmt) -> str:
    """One warpgroup statement: its name, buffers and expressions, a wgmma's operands' layouts
    and width, a wait's pending count."""
    parts = [", ".join(b.name for b in s.buffers())] if s.buffers() else []
    if s.exprs():
        parts.append(", ".join(repr(e) for e in s.exprs()))
    if isinstance(s, WgmmaMma):
        parts.append(f"N {s.n}")
        parts += [f"{o.major}-major lbo {o.lbo} sbo {o.sbo} {o.swizzle}" for o in (s.a, s.b)]
    if isinstance(s, WgmmaOperandTile):
        o = s.operand
        parts.append(f"{o.major}-major lbo {o.lbo} sbo {o.sbo} {o.swizzle}")
    if isinstance(s, WgmmaWait):
        parts.append(f"pending {s.pending}")
    return f"{type(s).__name__}({'; '.join(parts)})"


def program_text(p: Program) -> str:
    """A compact, readable dump of a program (for debugging and tests)."""
    out: list[str] = []

    def emit(s: Stmt, d: int) -> None:
        pad = "  " * d
        if isinstance(s, Seq):
            for c in s.stmts:
                emit(c, d)
        elif isinstance(s, For):
            out.append(f"{pad}for {s.var.name} in 0..{s.extent} [{s.kind}]:")
            emit(s.body, d + 1)
        elif isinstance(s, IfThenElse):
            out.append(f"{pad}if {s.cond!r}:")
            emit(s.then_case, d + 1)
            if s.else_case is not None:
                out.append(f"{pad}else:")
                emit(s.else_case, d + 1)
        elif isinstance(s, Store):
            out.append(f"{pad}{s.buffer.name}[{s.index!r}] = {s.value!r}")
        elif isinstance(s, Barrier):
            out.append(f"{pad}__syncthreads()")
        elif isinstance(s, AsyncCommit):
            out.append(f"{pad}cp.async.commit_group")
        elif isinstance(s, AsyncWait):
            out.append(f"{pad}cp.async.wait_group {s.pending}")
        elif isinstance(s, AllReduce):
            reduced = f"allreduce_{s.reducer}({s.value!r}) over {s.thread_tag}"
            reduced += " once" if s.once else ""
            out.append(f"{pad}{s.buffer.name}[{s.index!r}] = {reduced}")
        elif isinstance(s, WarpStmt):
            out.append(pad + s.describe(", ".join(repr(e) for e in s.exprs())))
        elif isinstance(s, WarpgroupStmt):
            out.append(pad + warpgroup_text(s))
        elif isinstance(s, (TmaStmt, *SINGLE_PASS_STMTS)):
            out.append(pad + s.text())
        elif isinstance(s, ProxyFence):
            out.append(f"{pad}fence.proxy.async.shared::cta")
        elif isinstance(s, ClusterBarrier):
            out.append(f"{pad}barrier.cluster")
        elif isinstance(s, ClusterLoad):
            src = f"{s.src.name}[{s.src_index!r}] of cluster block {s.rank!r}"
            out.append(f"{pad}{s.dst.name}[{s.dst_index!r}] = {src}")
        elif callable(getattr(s, "text", None)):  # a statement that prints itself
            out.append(pad + s.text())  # type: ignore[attr-defined]
        else:
            out.append(f"{pad}<{type(s).__name__}>")

    for b in p.workspaces:
        out.append(f"workspace {b.dtype} {b.name}[{b.size}] (zeroed once)")
    for k in p.kernels:
        cluster = f" cluster={k.cluster}" if k.cluster > 1 else ""
        out.append(f"kernel {k.name} grid={k.grid} block={k.block}{cluster}")
        if k.unit_vars:
            out.append(f"  unit vars {', '.join(v.name for v in k.unit_vars)}")
        for b in k.allocs:
            out.append(f"  alloc {b.scope} {b.dtype} {b.name}[{b.size}]")
        for a in k.shared_aliases:
            out.append(f"  alias {a.tile.name} over {', '.join(h.name for h in a.hosts)}")
        emit(k.body, 1)
    return "\n".join(out)
