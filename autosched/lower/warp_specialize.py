"""The warp-specialised form of a TMA-fed wgmma pipeline (a device pass, `passes.DEVICE_PASSES`):
one extra PRODUCER warpgroup issues the TMA copies, the CONSUMER warpgroups (those the kernel
was lowered for) only wait and multiply, and no block barrier remains in the mainloop
(CUTLASS sm90's `PipelineTmaAsync` with `KernelTmaWarpSpecializedCooperative`).

A kernel marked `warp_specialized` (`State.warp_specialize`) whose body holds the overlapped
TMA pipeline of `tma_fetch.emit_tma_pipeline` + `tma_fetch.overlapped_tma_loop` at top level,

    [barriers]; fills; mbarrier.init(full, 1); [wgmma.wait_group 0; fence.proxy.async]; barrier;
    issue(0 .. S-2)
    for k:  wait full[k % S]; wgmmas; commit; wgmma.wait_group 1; barrier;
            if k + S - 1 < K: issue(k + S - 1)
    wgmma.wait_group 0; [wgmma.wait_group 0; fence.proxy.async]; barrier; epilogue

becomes, with S "empty" mbarriers that the consumer warpgroups arrive on (one arrival a
warpgroup) and the block grown by one warpgroup (`threadIdx.y` past the consumers' warps):

    mbarrier.init(full, 1); mbarrier.init(empty, consumer warpgroups); [...]; barrier
    if (producer) {                               setmaxnreg.dec 40
        for k:  wait empty[k % S], parity (k / S + 1) % 2    (a fresh slot passes at once)
                issue(k)                                     (expect_tx + box copies)
    } else {                                      setmaxnreg.inc (what the block leaves)
        fills
        for k:  wait full[k % S], parity (k / S) % 2; wgmmas; commit; wgmma.wait_group 1
                if k >= 1: arrive empty[(k - 1) % S]         (step k - 1's reads retired)
        wgmma.wait_group 0; [wgmma.wait_group 0; fence.proxy.async]
        bar.sync 1, consumer threads; epilogue, its barriers `bar.sync 1` as well
    }

Nothing follows the split: the roles run with different register counts (`setmaxnreg`), and
code after a merge would run under the producer's 40 (ptxas cannot allocate the consumers'
accumulators there). The epilogue tile's alias over the slots stays proven: the consumers'
named barrier after their last wait on every copy separates the slots from the tile
(`shared_alias.overlay_problem` reads a role split's consumer branch as the kernel's
continuation). Any kernel not of that shape, or whose epilogue needs the whole block (a
cp.async group, an all-reduce, a TMA copy) or whose consumers leave no room for 128 more
threads in a block, keeps today's form: the mark is then a no-op.
"""

from __future__ import annotations

import dataclasses

from autosched.lower import ir, stmt_walk
from autosched.lower import tma_ir as ti
from autosched.lower import warp_roles_ir as wr
from autosched.lower import wgmma_ir as wi
from autosched.lower.arith import simplify
from autosched.lower.wgmma_mainloop import IN_FLIGHT
from autosched.te.expr import BinOp, Var
from autosched.te.visitor import substitute

_HEAD = (wi.WgmmaWait, wi.ProxyFence)  # what may sit between an init / the loop and a barrier
_WHOLE_BLOCK = (ir.AsyncGroupStmt, ir.AllReduce, ti.TmaStmt, ir.Barrier)


def _has(s: ir.Stmt, types: tuple[type, ...]) -> bool:
    return any(isinstance(x, types) for x in ir.iter_stmts(s))


@dataclasses.dataclass
class _Pipeline:
    """The parts of a kernel body holding one overlapped TMA pipeline at top level."""

    opening: list[ir.Stmt]  # before the fills: barriers and their waits, every thread's
    fills: list[ir.Stmt]
    init: ti.MbarrierInit
    head: list[ir.Stmt]  # between the init and its barrier
    loop: ir.For
    refill: ir.IfThenElse
    rest: list[ir.Stmt]  # after the loop's wgmma.wait_group 0


def _pipeline(body: ir.Stmt) -> _Pipeline | None:
    """The parts of `body` (see the module docstring), or None where it is of another shape."""
    top = stmt_walk.statements(body)
    inits = [i for i, s in enumerate(top) if isinstance(s, ti.MbarrierInit)]
    if len(inits) != 1:
        return None
    i = inits[0]
    # before the init: syncs every thread runs (the block's, no index of a thread), then the
    # accumulators' fills, which only the consumers run
    synced = max((b + 1 for b in range(i) if isinstance(top[b], ir.Barrier)), default=0)
    opening, fills, init = top[:synced], top[synced:i], top[i]
    assert isinstance(init, ti.MbarrierInit)
    if not all(isinstance(s, (*_HEAD, ir.Barrier)) for s in opening):
        return None
    if any(_has(s, (*_WHOLE_BLOCK, wi.WarpgroupStmt)) for s in fills):
        return None
    j = i + 1
    while j < len(top) and isinstance(top[j], _HEAD):
        j += 1
    if j >= len(top) or not isinstance(top[j], ir.Barrier):
        return None
    head = top[i + 1 : j]
    j += 1
    while j < len(top) and isinstance(top[j], (ti.MbarrierExpectTx, ti.TmaLoad)):
        j += 1  # the prologue's issues, which the producer's loop makes again
    if j + 1 >= len(top) or not isinstance(top[j], ir.For):
        return None
    loop, after = top[j], top[j + 1]
    assert isinstance(loop, ir.For)
    if not (isinstance(after, wi.WgmmaWait) and after.pending == 0):
        return None
    steps = stmt_walk.statements(loop.body)
    if len(steps) < 4 or not isinstance(steps[0], ti.MbarrierWait):
        return None
    *compute, wait, barrier, refill = steps[1:]
    if not (isinstance(wait, wi.WgmmaWait) and wait.pending == IN_FLIGHT):
        return None
    if not isinstance(barrier, ir.Barrier) or not isinstance(refill, ir.IfThenElse):
        return None
    if refill.else_case is not None or steps[0].bars is not init.bars:
        return None
    if any(_has(s, _WHOLE_BLOCK) for s in compute):
        return None
    return _Pipeline(opening, fills, init, head, loop, refill, top[j + 2 :])


def _consumer_epilogue(rest: list[ir.Stmt], threads: int) -> list[ir.Stmt] | None:
    """What the consumers run after their mainloop: `rest`, its barriers made barriers of the
    consumers alone; None where it needs the whole block or does not begin with the pipeline's
    end (wgmma waits and proxy fences, then a barrier)."""
    at = next((i for i, s in enumerate(rest) if isinstance(s, ir.Barrier)), None)
    if at is None or not all(isinstance(s, _HEAD) for s in rest[:at]):
        return None
    if any(_has(s, (ir.AsyncGroupStmt, ir.AllReduce, ti.TmaStmt)) for s in rest):
        return None
    return [_named_barriers(s, threads) for s in rest]


def _named_barriers(s: ir.Stmt, threads: int) -> ir.Stmt:
    """`s` with every `__syncthreads()` a barrier of the first `threads` threads."""
    if isinstance(s, ir.Barrier):
        return wr.NamedBarrier(threads)
    if isinstance(s, ir.Seq):
        return ir.Seq([_named_barriers(c, threads) for c in s.stmts])
    if isinstance(s, ir.For):
        return ir.For(s.var, s.extent, s.kind, _named_barriers(s.body, threads))
    if isinstance(s, ir.IfThenElse):
        els = None if s.else_case is None else _named_barriers(s.else_case, threads)
        return ir.IfThenElse(s.cond, _named_barriers(s.then_case, threads), els)
    return s


def _producer_loop(p: _Pipeline, empty: ir.Buffer, slots: int) -> ir.For:
    """For every tile k: wait until its slot is empty, then issue it (the refill's statements
    with its tile k + S - 1 made k)."""
    k = Var(f"{p.loop.var.name}_issue", p.loop.var.dtype)
    earlier = BinOp("-", k, ir.int32(slots - 1), ir.I32)
    issue = stmt_walk.map_exprs(
        p.refill.then_case, lambda e: simplify(substitute(e, {p.loop.var: earlier}))
    )
    slot = BinOp("floormod", k, ir.int32(slots), ir.I32)
    lap = BinOp("floordiv", k, ir.int32(slots), ir.I32)
    parity = BinOp("floormod", BinOp("+", lap, ir.int32(1), ir.I32), ir.int32(2), ir.I32)
    wait = ti.MbarrierWait(empty, slot, parity)
    return ir.For(k, p.loop.extent, "serial", ir.seq([wait, issue]))


def _consumer_loop(p: _Pipeline, empty: ir.Buffer, slots: int) -> ir.For:
    """The mainloop without its barrier and refill: step k releases step k - 1's slot once
    its `wgmma.wait_group 1` retired the wgmmas that read it."""
    k = p.loop.var
    steps = stmt_walk.statements(p.loop.body)[:-2]
    previous = BinOp("-", k, ir.int32(1), ir.I32)
    release = wr.MbarrierArrive(empty, BinOp("floormod", previous, ir.int32(slots), ir.I32))
    released = ir.guarded(release, [BinOp(">=", k, ir.int32(1), "bool")])
    return ir.For(k, p.loop.extent, p.loop.kind, ir.seq([*steps, released]))


def _fresh_name(kernel: ir.Kernel, full: str) -> str:
    """A name for the "empty" mbarriers beside the "full" ones named `full`, unused in
    `kernel`."""
    taken = {b.name for b in kernel.allocs}
    base = name = f"{full.removesuffix('_full')}_empty"
    n = 0
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def warp_specialize(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` in the warp-specialised form (the module docstring) where it is marked
    `warp_specialized` and holds the overlapped TMA pipeline; otherwise the kernel as it is."""
    if not kernel.warp_specialized or kernel.block[0] != ir.WARP_SIZE or kernel.block[2] != 1:
        return kernel
    warps = kernel.block[1]
    if warps % 4 or kernel.vthread != 1 or (warps + 4) * ir.WARP_SIZE > wr.MAX_BLOCK_THREADS:
        return kernel
    p = _pipeline(kernel.body)
    consumer_threads = warps * ir.WARP_SIZE
    epilogue = None if p is None else _consumer_epilogue(p.rest, consumer_threads)
    if p is None or epilogue is None or p.loop.extent < 2:
        return kernel
    slots = p.init.bars.size
    empty = ir.Buffer(_fresh_name(kernel, p.init.bars.name), (slots,), ti.MBARRIER_DTYPE, "shared")
    budget = 65536 // max(1, kernel.min_blocks_per_sm)
    regs = wr.consumer_registers(consumer_threads, budget)
    if regs < wr.REGISTER_RANGE[0]:
        return kernel
    producer = ir.seq(
        [wr.WarpRole("producer", wr.PRODUCER_REGISTERS), _producer_loop(p, empty, slots)]
    )
    consumer = ir.seq(
        [
            wr.WarpRole("consumer", regs),
            *p.fills,
            _consumer_loop(p, empty, slots),
            wi.WgmmaWait(0),
            *epilogue,
        ]
    )
    roles = ir.IfThenElse(wr.producer_condition(warps), producer, consumer)
    body = [*p.opening, p.init, ti.MbarrierInit(empty, warps // 4), *p.head, ir.Barrier(), roles]
    block = (kernel.block[0], warps + 4, 1)
    allocs = [*kernel.allocs, empty]
    return dataclasses.replace(kernel, block=block, allocs=allocs, body=ir.seq(body))


__all__ = ["warp_specialize"]
