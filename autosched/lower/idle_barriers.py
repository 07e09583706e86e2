"""Barriers that order nothing: the device passes `drop_idle_barrier` and
`mark_single_allreduces`.

A `__syncthreads()` orders the memory accesses of the block's threads before it against those
after it. A kernel whose first statements only read global memory into each thread's own
registers (a normalisation's row part loaded into its thread-private cache, sketch/
row_in_registers.py) and then compute its row statistic emits a barrier between the two: the
statistic is a shared stage, and a shared stage is emitted between barriers (`emission.
emit_attached`), the leading one guarding the buffer against readers of an earlier iteration.
Where the stage runs once per block, nothing came before it for that barrier to order: no
thread wrote memory another thread reads, and no thread read shared memory another thread then
overwrites. Each warp could start its part of the reduction as soon as its own loads landed;
with the barrier, every warp waits for the whole block's.

The pass drops the kernel's first top-level barrier where every statement before it is plain:
loops, conditions and stores into local buffers, reading only local buffers and global buffers
that the kernel never writes (so a later store of another thread cannot overtake a read). The
hand-written long-row kernels have no such barrier.

A block reduction through shared memory (`ir.AllReduce` over more than a warp) writes its
warps' partial results to a shared scratch array, waits at a barrier, reads them, and waits at a
second barrier so that no thread writes the scratch again, in a later iteration of a loop
around it, while another still reads it. An AllReduce in no loop runs once per thread: its
scratch is never written again, and `mark_single_allreduces` marks it `once`, printed without
the second barrier (a row's statistic reduced once per block, as a normalisation over a
cluster reduces its part).

Device passes: the analysis program (and with it the cost model's features) keeps both
barriers.
"""

from __future__ import annotations

import dataclasses

from autosched.lower import ir
from autosched.te.expr import Expr, Load
from autosched.te.visitor import walk


def _top_level(s: ir.Stmt) -> list[ir.Stmt]:
    """The statements of the kernel body's top-level sequence, nested sequences flattened."""
    if isinstance(s, ir.Seq):
        return [t for c in s.stmts for t in _top_level(c)]
    return [s]


def _global_writes(body: ir.Stmt) -> set[int]:
    """The ids of the global buffers stored anywhere in `body`."""
    return {
        id(s.buffer)
        for s in ir.iter_stmts(body)
        if isinstance(s, ir.Store) and s.buffer.scope == "global"
    }


def _reads_plainly(e: Expr, written: set[int]) -> bool:
    """Whether `e` loads only local buffers and global buffers outside `written`."""
    for n in walk(e):
        if not isinstance(n, Load):
            continue
        scope = getattr(n.buffer, "scope", None)
        if scope == "global" and id(n.buffer) in written:
            return False
        if scope not in ("global", "local"):
            return False
    return True


def _plain(s: ir.Stmt, written: set[int]) -> bool:
    """Whether `s` is loops, conditions and stores into local buffers that read plainly."""
    for t in ir.iter_stmts(s):
        if isinstance(t, (ir.Seq, ir.For)):
            continue
        if isinstance(t, ir.IfThenElse):
            exprs = [t.cond]
        elif isinstance(t, ir.Store) and t.buffer.scope == "local":
            exprs = [t.index, t.value]
        else:
            return False
        if not all(_reads_plainly(e, written) for e in exprs):
            return False
    return True


def drop_idle_barrier(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` without its first top-level barrier where only plain statements precede it
    (the module's description); any other kernel as it is."""
    stmts = _top_level(kernel.body)
    first = next((k for k, s in enumerate(stmts) if isinstance(s, ir.Barrier)), None)
    if first is None:
        return kernel
    written = _global_writes(kernel.body)
    rest = stmts[:first] + stmts[first + 1 :]
    if not rest or not all(_plain(s, written) for s in stmts[:first]):
        return kernel
    body = ir.seq(rest)
    return dataclasses.replace(kernel, allocs=list(kernel.allocs), body=body)


def _mark_once(s: ir.Stmt) -> ir.Stmt:
    """`s` with each AllReduce outside every loop marked `once` (loops are left as they are)."""
    if isinstance(s, ir.AllReduce):
        return dataclasses.replace(s, once=True)
    if isinstance(s, ir.Seq):
        return ir.Seq([_mark_once(c) for c in s.stmts])
    if isinstance(s, ir.IfThenElse):
        els = _mark_once(s.else_case) if s.else_case is not None else None
        return ir.IfThenElse(s.cond, _mark_once(s.then_case), els)
    return s


def mark_single_allreduces(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with its AllReduces in no loop marked `once` (the module's description)."""
    if not any(isinstance(s, ir.AllReduce) for s in ir.iter_stmts(kernel.body)):
        return kernel
    return dataclasses.replace(kernel, allocs=list(kernel.allocs), body=_mark_once(kernel.body))


__all__ = ["drop_idle_barrier", "mark_single_allreduces"]
