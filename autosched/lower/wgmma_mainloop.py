"""The Hopper mainloop order of a cp.async pipeline that feeds wgmmas: a K step's wgmmas stay in
flight across the next step's wait, barrier and fetch (part of the `warpgroup_mma` pass).

Lowering emits a pipeline of S >= 3 shared slots (`double_buffer.emit_double_buffered`) as

    for k:  cp.async.wait_group(S - 2); barrier; fetch tile k + S - 1 into slot (k - 1) % S;
            cp.async.commit_group; compute on slot k % S

Where the computation is wgmmas, the plain order (`warpgroup_mma._rewrite`) waits for every
wgmma (`wgmma.wait_group 0`) before each barrier, so the tensor cores idle from that wait until
the next step's wgmmas issue. Here one group stays in flight: each step issues its wgmmas and
commits them, then `wgmma.wait_group 1` retires the step before's, whose slot is free from then
on for the warpgroup that waited. Two orders follow, by how many warpgroups read the slots:

- one warpgroup: the fetch moves after that wait, into the slot it just freed (CUTLASS's
  multistage order, S - 1 tiles ahead):

      for k:  cp.async.wait_group(S - 2); fence.proxy.async; barrier;
              wgmma.fence; wgmmas on slot k % S; wgmma.commit_group; wgmma.wait_group 1;
              fetch tile k + S - 1 into slot (k - 1) % S; cp.async.commit_group

- several: a thread learns that the other warpgroups retired step k - 1 only at a barrier after
  their waits, so step k fetches into the slot step k - 2 read (retired by every warpgroup
  before this step's barrier): the fetch of the plain order one step later, tile k + S - 2,
  S - 2 tiles ahead; step 0 fetches nothing (the prologue holds tiles 0 .. S - 2) but still
  commits a group, so step k's `cp.async.wait_group(S - 3)` completes tile k's group:

      for k:  cp.async.wait_group(S - 3); fence.proxy.async; barrier;
              if k >= 1: fetch tile k + S - 2 into slot (k - 2) % S; cp.async.commit_group;
              wgmma.fence; wgmmas on slot k % S; wgmma.commit_group; wgmma.wait_group 1

`wgmma.wait_group 0` follows the loop. A loop of any other shape keeps the plain order. The
interpreter (`interpret_wgmma.AsyncReads`) and the verifier (`verify_wgmma_order`) refuse a
fetch into a slot that a wgmma may still read.
"""

from __future__ import annotations

from collections.abc import Callable

from autosched.lower import ir, stmt_walk
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.lower.arith import simplify
from autosched.te.expr import BinOp
from autosched.te.visitor import substitute

IN_FLIGHT = 1  # the wgmma groups left in flight at the end of a step


def _has(s: ir.Stmt, types: tuple[type, ...]) -> bool:
    return any(isinstance(x, types) for x in ir.iter_stmts(s))


def _split(loop: ir.For) -> tuple[int, list[ir.Stmt], list[ir.Stmt]] | None:
    """(the step's cp.async pending count, its fetch, its computation) of a pipelined loop of
    S >= 3 slots whose computation holds products; None for any other loop."""
    stmts = stmt_walk.statements(loop.body)
    if len(stmts) < 4 or not isinstance(stmts[0], ir.AsyncWait):
        return None
    if not isinstance(stmts[1], ir.Barrier) or stmts[0].pending < 1:
        return None
    commits = [i for i, x in enumerate(stmts) if isinstance(x, ir.AsyncCommit)]
    if len(commits) != 1:
        return None
    fetch, compute = stmts[2 : commits[0]], stmts[commits[0] + 1 :]
    sync = (ir.Barrier, ir.AsyncCommit, ir.AsyncWait, wi.WarpgroupStmt)
    if not fetch or any(_has(x, (*sync, ir.FragmentMma)) for x in fetch):
        return None
    if not compute or any(_has(x, (ir.Barrier, ir.AsyncCommit, ir.AsyncWait)) for x in compute):
        return None
    if not any(_has(x, (ir.FragmentMma,)) for x in compute):
        return None
    return stmts[0].pending, fetch, compute


def fetches_after_the_wait(block: tuple[int, int, int]) -> bool:
    """Whether a block of this shape fetches into the slot its own `wgmma.wait_group` just
    freed (one warpgroup), rather than one step later (several)."""
    return block[1] == wl.WARPGROUP_WARPS


def overlapped_loop(
    loop: ir.For, block: tuple[int, int, int], rewrite: Callable[[ir.Stmt], ir.Stmt]
) -> ir.Stmt | None:
    """`loop` in the mainloop order above, its computation's products made wgmmas by
    `rewrite` (each step's in one or more commit groups); None where the order does not apply
    (then the caller keeps the plain one)."""
    parts = _split(loop)
    if parts is None:
        return None
    pending, fetch, compute = parts
    issued = rewrite(ir.seq(compute))
    top = stmt_walk.statements(issued)
    if not any(isinstance(x, wi.WgmmaCommit) for x in top) or _has(issued, (wi.WgmmaWait,)):
        return None
    head = [wi.ProxyFence(), ir.Barrier()]
    retire = wi.WgmmaWait(IN_FLIGHT)
    if fetches_after_the_wait(block):
        body = [ir.AsyncWait(pending), *head, issued, retire, *fetch, ir.AsyncCommit()]
    else:
        k = loop.var
        earlier = BinOp("-", k, ir.int32(1), ir.I32)
        late = stmt_walk.map_exprs(ir.seq(fetch), lambda e: simplify(substitute(e, {k: earlier})))
        after_first = BinOp(">=", k, ir.int32(1), "bool")
        late_fetch = ir.guarded(late, [after_first])
        body = [ir.AsyncWait(pending - 1), *head, late_fetch, ir.AsyncCommit(), issued, retire]
    out = ir.For(loop.var, loop.extent, loop.kind, ir.seq(body))
    return ir.seq([out, wi.WgmmaWait(0)])


__all__ = ["IN_FLIGHT", "fetches_after_the_wait", "overlapped_loop"]
