"""Register double buffering of mma operand fragments across a warp's k-steps: CUTLASS's
warp-level mainloop, as a lowering pass.

An accumulator stage marked `fragment_double_buffer` (`State.fragment_double_buffer`; mma
flavour) gives its matrix_a / matrix_b fragment buffers the mark
(`ir.Buffer.fragment_double_buffer`, set by `tensorize.plan_fragments`). Emission leaves the
warp's k-step loop as

    for s < S:
        load the A and B fragments of k-step s          (ldmatrix, from the shared tile)
        mma on them

so each step's multiplies wait for its own loads. This pass gives each marked fragment two
register slots (twice the tiles; slot `s % 2` holds step s) and makes the loop

    load the fragments of step 0 into slot 0
    for s < S (unrolled):
        if s + 1 < S: load the fragments of step s + 1 into slot (s + 1) % 2
        mma on slot s % 2

so the loads of the next step are issued, and in flight, while the Tensor Cores multiply the
current one. The loop is unrolled, so every slot index is a constant in the printed kernel
(registers cannot be indexed at run time). The interpreter runs this very program: a load
into the slot being multiplied, or an mma on the wrong slot, computes a wrong product there.

Within a shared tile ptxas schedules the unrolled loads ahead by itself; what it cannot do is
move a load across the barrier at the head of the next tile. So where the k-step loop is the
body of a double-buffered (or pipelined) shared tile loop (double_buffer.py) and has an even
number of steps, the pass also carries the loads across tiles, as CUTLASS's multistage
mainloop does:

    wait; barrier; load the fragments of tile 0, step 0 into slot 0
    for t < T:
        fetch tile t + S - 1 ahead; commit                  (cp.async, as before)
        for s < S_k - 1 (unrolled): load step s + 1 into slot (s + 1) % 2; mma on slot s % 2
        wait; barrier                                       (tile t + 1 has landed)
        if t + 1 < T: load tile t + 1, step 0 into slot 0
        mma of the last step on slot 1

One barrier per tile, as before: it follows every read of tile t's shared slot (the last
step's fragments were loaded a step earlier) and precedes the fetch that overwrites it, and
the wait before it covers tile t + 1's group. The multiplies of the last step now run while
the next tile's first fragments load, instead of after the barrier.

A loop qualifies when its body is the loads of marked fragments (in nests of loops and guards)
followed by the multiply-accumulates that read them, and it runs more than once. Where the
marked fragments are also used elsewhere the kernel is left as it is (the mark is ignored,
as `double_buffer`'s is on a loop that runs once).
"""

from __future__ import annotations

import dataclasses

from autosched.lower import ir, stmt_walk
from autosched.lower.ir import I32, int32
from autosched.te.expr import BinOp, Expr, Var
from autosched.te.visitor import substitute

SLOTS = 2
OPERAND_SCOPES = ("wmma.matrix_a", "wmma.matrix_b")


def _leaves(s: ir.Stmt) -> list[ir.Stmt]:
    """The statements under `s` that are neither loops, guards nor sequences."""
    return [x for x in ir.iter_stmts(s) if not isinstance(x, (ir.For, ir.IfThenElse, ir.Seq))]


def _loads_marked(s: ir.Stmt, marked: dict[int, ir.Buffer]) -> bool:
    leaves = _leaves(s)
    return bool(leaves) and all(
        isinstance(x, ir.FragmentLoad) and id(x.frag) in marked for x in leaves
    )


def _multiplies(s: ir.Stmt) -> bool:
    leaves = _leaves(s)
    return bool(leaves) and all(isinstance(x, ir.FragmentMma) for x in leaves)


def _split(loop: ir.For, marked: dict[int, ir.Buffer]) -> tuple[list, list] | None:
    """(loads, multiplies) of a k-step loop that qualifies, else None."""
    if loop.extent < 2 or not isinstance(loop.body, ir.Seq):
        return None
    stmts = loop.body.stmts
    n = 0
    while n < len(stmts) and _loads_marked(stmts[n], marked):
        n += 1
    loads, rest = stmts[:n], stmts[n:]
    if not loads or not rest or not all(_multiplies(s) for s in rest):
        return None
    return loads, rest


class _Doubler:
    """Rewrites one kernel's qualifying k-step loops onto the doubled buffers."""

    def __init__(self, marked: dict[int, ir.Buffer]) -> None:
        self.marked = marked
        self.doubled = {
            k: ir.Buffer(
                b.name,
                (SLOTS * b.shape[0], *b.shape[1:]),
                b.dtype,
                b.scope,
                fragment_flavour=b.fragment_flavour,
                fragment_double_buffer=True,
            )
            for k, b in marked.items()
        }

    def into_slot(self, s: ir.Stmt, step: Expr) -> ir.Stmt:
        """`s` with its marked fragments' tiles moved into the slot of k-step `step`."""

        def warp(w: ir.WarpStmt) -> ir.WarpStmt:
            changes: dict[str, object] = {}
            for buffer_field, tile_field, _ in w.FRAGMENTS:
                b = getattr(w, buffer_field)
                if id(b) not in self.marked:
                    continue
                tiles = b.size // ir.tile_elems(b)
                slot = BinOp("floormod", step, int32(SLOTS), I32)
                offset = BinOp("*", slot, int32(tiles), I32)
                changes[buffer_field] = self.doubled[id(b)]
                changes[tile_field] = BinOp("+", getattr(w, tile_field), offset, I32)
            return dataclasses.replace(w, **changes) if changes else w

        return stmt_walk.map_exprs(s, lambda e: e, warp=warp)

    def at_step(self, stmts: list[ir.Stmt], v: Var, step: Expr, slot: Expr | None = None):
        """`stmts` at k-step `step` (loop variable `v` replaced), their fragments in the
        slot of `slot` (default: of `step`)."""
        body = stmt_walk.map_exprs(ir.seq(stmts), lambda e: substitute(e, {v: step}))
        return self.into_slot(body, step if slot is None else slot)

    def rewrite(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Seq):
            return ir.Seq([self.rewrite(c) for c in s.stmts])
        if isinstance(s, ir.IfThenElse):
            els = self.rewrite(s.else_case) if s.else_case is not None else None
            return ir.IfThenElse(s.cond, self.rewrite(s.then_case), els)
        if not isinstance(s, ir.For):
            return s
        across = self.across_tiles(s)
        if across is not None:
            return across
        parts = _split(s, self.marked)
        if parts is None:
            return ir.For(s.var, s.extent, s.kind, self.rewrite(s.body))
        loads, rest = parts
        following = BinOp("+", s.var, int32(1), I32)
        ahead = ir.guarded(
            self.at_step(loads, s.var, following),
            [BinOp("<", following, int32(s.extent), "bool")],
        )
        compute = self.into_slot(ir.seq(rest), s.var)
        loop = ir.For(s.var, s.extent, "unroll", ir.seq([ahead, compute]))
        return ir.seq([self.at_step(loads, s.var, int32(0)), loop])

    def across_tiles(self, tile_loop: ir.For) -> ir.Stmt | None:
        """The cross-tile form of a double-buffered shared tile loop whose body is
        `[wait?, barrier, fetch ahead, commit?, k-step loop]` (double_buffer.py's) with an even
        number of k-steps, else None: the wait and barrier move from the head of iteration t + 1
        to before the last k-step of iteration t, and the fragments of tile t + 1's first
        k-step are loaded there, into slot 0, while the last k-step of tile t multiplies."""
        body = tile_loop.body
        if not isinstance(body, ir.Seq) or not body.stmts:
            return None
        *pre, steps = body.stmts
        if not isinstance(steps, ir.For) or steps.extent % SLOTS:
            return None
        parts = _split(steps, self.marked)
        barriers = [i for i, x in enumerate(pre) if isinstance(x, ir.Barrier)]
        if parts is None or len(barriers) != 1:
            return None
        sync, issue = pre[: barriers[0] + 1], pre[barriers[0] + 1 :]
        if not all(isinstance(x, ir.AsyncWait) for x in sync[:-1]) or any(
            isinstance(y, (ir.Barrier, ir.WarpStmt)) for x in issue for y in ir.iter_stmts(x)
        ):
            return None
        loads, rest = parts
        t, k, last = tile_loop.var, steps.var, steps.extent - 1
        following = BinOp("+", k, int32(1), I32)
        within = ir.For(
            k,
            last,
            "unroll",
            ir.seq([self.at_step(loads, k, following), self.into_slot(ir.seq(rest), k)]),
        )
        next_tile = BinOp("+", t, int32(1), I32)
        first_of_next = stmt_walk.map_exprs(ir.seq(loads), lambda e: substitute(e, {t: next_tile}))
        ahead = ir.guarded(
            self.at_step([first_of_next], k, int32(0)),
            [BinOp("<", next_tile, int32(tile_loop.extent), "bool")],
        )
        final = self.at_step(rest, k, int32(last))
        loop = ir.For(
            t, tile_loop.extent, tile_loop.kind, ir.seq([*issue, within, *sync, ahead, final])
        )
        first = stmt_walk.map_exprs(
            self.at_step(loads, k, int32(0)), lambda e: substitute(e, {t: int32(0)})
        )
        return ir.seq([*sync, first, loop])


def _uses(s: ir.Stmt, buffers: dict[int, ir.Buffer]) -> bool:
    return any(
        isinstance(x, ir.WarpStmt) and any(id(b) in buffers for b in x.buffers())
        for x in ir.iter_stmts(s)
    )


def double_buffer_fragments(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with the k-step loops of its marked operand fragments double-buffered in
    registers; unchanged when it has none, or when a marked fragment is used outside such a
    loop."""
    marked = {
        id(b): b
        for b in kernel.allocs
        if b.fragment_double_buffer and b.scope in OPERAND_SCOPES and b.fragment_flavour == "mma"
    }
    if not marked:
        return kernel
    doubler = _Doubler(marked)
    body = doubler.rewrite(kernel.body)
    if _uses(body, marked):  # a marked fragment outside a qualifying loop: keep the plain one
        return kernel
    allocs = [doubler.doubled.get(id(b), b) for b in kernel.allocs]
    return dataclasses.replace(kernel, allocs=allocs, body=body)


__all__ = ["double_buffer_fragments"]
