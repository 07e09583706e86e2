"""Virtual-thread injection: the pass that removes every `vthread` loop of a kernel (what TVM's
InjectVirtualThread does).

Lowering emits an iterator annotated `vthread` as a `For` of kind `ir.VTHREAD_KIND` placed where
the iterator is. In the GPU sketches that loop wraps the whole per-thread computation: the
`local` accumulator's init, the reduction loop with the `shared` fetches and their barriers
inside it, and the output stores. Run as an ordinary loop it would repeat the fetches and the
barriers once per virtual thread. Instead the pass pushes the loop down through loops and
sequences to the statements that depend on the virtual thread and replicates only those, one
copy per virtual thread with the variable replaced by a constant; statements that do not depend
on it (the shared fetches, barriers) stay once. A buffer private to the loop (the `local`
accumulator) that the virtual threads write differently is expanded, one part per virtual
thread, indexed by the variable.

Why pushing the loop down is legal. A statement *depends* on the virtual thread when its
expressions (index, value, guard) use the variable or read a *touched* buffer, or it writes a
touched one; a buffer is touched when some store to it depends on the virtual thread (a fixed
point, since reading a touched buffer makes a store depend). Then:
- statements that do not depend write only untouched buffers, with values that are the same
  for every virtual thread, so running them once where each virtual thread ran them gives every
  virtual thread the data it saw before (shared stages relax the vthread loop in bound
  inference, so their fetches serve all virtual threads and do not depend on it);
- statements that depend keep their order within each virtual thread, and different virtual
  threads of one thread touch disjoint data: the parts of an expanded buffer, outputs at indices
  that use the variable, or one accumulator updated by a commutative reduction;
- a Barrier never depends, so it is never replicated (replicating a statement that holds one
  is an error).
Warp statements (Tensor Core fragments) take part like stores: they write their fragment (a
FragmentStore its memory tile) from the buffers they read, and an expanded fragment gets one
block of tiles per virtual thread.
Vectorized loops and guards that depend on the virtual thread are replicated whole (the CUDA
printer wants one store under a vector loop). A kernel's product of nested vthread extents is
kept in `Kernel.vthread` (the cost-model features read it). Lowering simplifies the kernel
before the pass (smaller expressions to copy) and again after it when it made copies (to fold
their constants).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from autosched.errors import LoweringError
from autosched.lower import ir, stmt_walk
from autosched.lower.dispatch import TypeTable
from autosched.te.expr import BinOp, Const, Expr, Load, Var
from autosched.te.visitor import children, loads, nodes, rebuild, rewrite, walk


def inject_virtual_threads(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` without vthread loops: each replaced by copies of the statements that depend on
    its variable, private buffers expanded per virtual thread (a new Kernel; `kernel.vthread` is
    set to the largest product of nested vthread extents). A kernel without any is returned as
    is."""
    if not any(_is_vthread(s) for s in ir.iter_stmts(kernel.body)):
        return kernel
    pass_ = _Injection(kernel.body)
    body = pass_.visit(kernel.body)
    allocs = [pass_.final_buffer(b) for b in kernel.allocs]
    return dataclasses.replace(
        kernel, allocs=allocs, body=body, vthread=vthread_extent(kernel.body)
    )


def vthread_extent(s: ir.Stmt) -> int:
    """The largest product of the extents of nested vthread loops in `s` (1 when none)."""
    if isinstance(s, ir.For):
        inner = vthread_extent(s.body)
        return inner * s.extent if _is_vthread(s) else inner
    return max((vthread_extent(c) for c in _child_stmts(s)), default=1)


# ---- the pass over a kernel ---------------------------------------------------------------------


class _Injection:
    """Injects the vthread loops of one kernel body, innermost first."""

    def __init__(self, body: ir.Stmt) -> None:
        self.body = body  # the kernel's body as it came in
        self._total: Counter | None = None  # accesses per buffer id over it (`total`)
        self.expanded: dict[int, ir.Buffer] = {}  # id(old buffer) -> its expansion

    @property
    def total(self) -> Counter:
        """Accesses per buffer id over the whole kernel, counted on first use."""
        if self._total is None:
            self._total = _access_counts(self.body)
        return self._total

    def visit(self, s: ir.Stmt) -> ir.Stmt:
        """`s` with every vthread loop in it injected (children first)."""
        if isinstance(s, ir.For):
            body = self.visit(s.body)
            if _is_vthread(s):
                return self.inject(s, body)
            return s if body is s.body else ir.For(s.var, s.extent, s.kind, body)
        kids = _child_stmts(s)
        new = [self.visit(c) for c in kids]
        if all(a is b for a, b in zip(new, kids, strict=True)):
            return s
        return _with_children(s, new)

    def inject(self, loop: ir.For, body: ir.Stmt) -> ir.Stmt:
        """One vthread loop (with injected `body`) replaced by the pushed-down copies."""
        touched = _touched_buffers(body, loop.var)
        candidates = [b for b in touched.values() if b.scope != "global"]
        outside = _access_counts_outside(self.body, loop) if candidates else Counter()
        if outside is None:  # the loop met more than once: the counts over it and the kernel
            inside = _access_counts(loop.body)
            private = [b for b in candidates if self.is_private(b, inside)]
        else:  # all accesses inside the loop, or a buffer an inner expansion made
            private = [b for b in candidates if not outside.get(id(b))]
        swap = {id(b): self.expand(b, loop.extent) for b in private}
        body = _expand_accesses(body, swap, loop.var)
        ids = set(touched) | {id(b) for b in swap.values()}
        return _Pusher(loop.var, loop.extent, ids).push(body)

    def is_private(self, b: ir.Buffer, inside: Counter) -> bool:
        """No access to `b` lies outside the loop whose access counts are `inside` (a buffer
        made by an inner expansion has all its accesses inside that inner loop)."""
        total = self.total.get(id(b))
        return total is None or total == inside.get(id(b), 0)

    def expand(self, b: ir.Buffer, n: int) -> ir.Buffer:
        """A buffer with one copy of `b` per virtual thread (leading axis of extent n)."""
        shape = (n,) + tuple(b.shape)
        new = ir.Buffer(
            b.name,
            shape,
            b.dtype,
            b.scope,
            fragment_flavour=b.fragment_flavour,
            fragment_double_buffer=b.fragment_double_buffer,
        )
        self.expanded[id(b)] = new
        return new

    def final_buffer(self, b: ir.Buffer) -> ir.Buffer:
        """The buffer that replaces allocation `b` after all expansions."""
        while id(b) in self.expanded:
            b = self.expanded[id(b)]
        return b


def _touched_buffers(body: ir.Stmt, var: Var) -> dict[int, ir.Buffer]:
    """Buffers (by id) some store of `body` writes differently per value of `var`: its index,
    value or guards use `var` or read a buffer already found (iterated to a fixed point). Each
    store's expressions are scanned once, for `var` and the buffers they load."""
    writes = []
    for buffer, exprs, reads in _writes(body, ()):
        uses_var, loaded = _scan(exprs, var)
        writes.append((buffer, uses_var, loaded | {id(r) for r in reads}))
    touched: dict[int, ir.Buffer] = {}
    grew = True
    while grew:
        grew = False
        for buffer, uses_var, loaded in writes:
            if id(buffer) in touched:
                continue
            if uses_var or any(b in touched for b in loaded):
                touched[id(buffer)] = buffer
                grew = True
    return touched


def _writes(s: ir.Stmt, guards: tuple):
    """(buffer, expressions the written data depends on, buffers a warp statement reads) of
    every Store / AllReduce / warp statement in `s`."""
    if isinstance(s, (ir.Store, ir.AllReduce)):
        yield s.buffer, _exprs(s) + guards, ()
    elif isinstance(s, ir.WarpStmt):
        yield s.written(), _exprs(s) + guards, tuple(s.reads())
    elif isinstance(s, ir.IfThenElse):
        inner = guards + (s.cond,)
        yield from _writes(s.then_case, inner)
        if s.else_case is not None:
            yield from _writes(s.else_case, inner)
    else:
        for c in _child_stmts(s):
            yield from _writes(c, guards)


def _scan(exprs, var: Var) -> tuple[bool, set[int]]:
    """Whether `exprs` use `var`, and the ids of the buffers they load."""
    uses_var, loaded = False, set()
    for e in exprs:
        for n in nodes(e):
            if n is var:
                uses_var = True
            elif isinstance(n, Load):
                loaded.add(id(n.buffer))
    return uses_var, loaded


def _uses(e: Expr, var: Var, buffer_ids) -> bool:
    """Whether `e` uses `var` or loads one of the buffers in `buffer_ids`."""
    for n in walk(e):
        if n is var or (isinstance(n, Load) and id(n.buffer) in buffer_ids):
            return True
    return False


def _expand_accesses(body: ir.Stmt, swap: dict[int, ir.Buffer], var: Var) -> ir.Stmt:
    """Every access to a buffer in `swap` redirected to its expansion, at `var * size + index`."""
    if not swap:
        return body
    reads: dict[int, bool] = {}  # expression node id -> whether it loads a swapped buffer

    def reads_swapped(e: Expr) -> bool:
        got = reads.get(id(e))
        if got is None:
            got = (isinstance(e, Load) and id(e.buffer) in swap) or any(
                reads_swapped(k) for k in children(e)
            )
            reads[id(e)] = got
        return got

    def part(buffer, index: Expr) -> Expr:
        offset = BinOp("*", var, Const(buffer.size, index.dtype), index.dtype)
        return BinOp("+", offset, index, index.dtype)

    def load(node: Expr) -> Expr | None:
        if isinstance(node, Load) and id(node.buffer) in swap:
            index = rewrite(node.indices[0], load)
            return Load(swap[id(node.buffer)], (part(node.buffer, index),))
        return None

    def target(buffer: ir.Buffer, index: Expr) -> tuple[ir.Buffer, Expr]:
        if id(buffer) in swap:
            return swap[id(buffer)], part(buffer, index)
        return buffer, index

    def warp(s: ir.WarpStmt) -> ir.WarpStmt:
        """`s` with its buffers in `swap` redirected to their expansions: tile number
        `var * tiles + tile` of a fragment, offset `var * size + offset` of a memory tile."""
        changes: dict = {}
        for (b, tile, _), (field, tile_field, _) in zip(s.fragments(), s.FRAGMENTS, strict=True):
            if id(b) in swap:
                step = BinOp("*", var, Const(b.size // ir.tile_elems(b), tile.dtype), tile.dtype)
                changes[field] = swap[id(b)]
                changes[tile_field] = BinOp("+", step, tile, tile.dtype)
        m = s.memory_tile()
        if m is not None and id(m.buffer) in swap:
            off = m.offset
            step = BinOp("*", var, Const(m.buffer.size, off.dtype), off.dtype)
            offset = BinOp("+", step, off, off.dtype)
            changes[s.MEMORY_TILE] = ir.MatrixTile(swap[id(m.buffer)], offset, m.ldm, m.layout)
        return dataclasses.replace(s, **changes) if changes else s

    return stmt_walk.map_exprs(
        body, lambda e: rewrite(e, load) if reads_swapped(e) else e, target, warp
    )


class _Pusher:
    """Pushes one vthread loop (variable `var`, `n` virtual threads) down to the statements
    that depend on it and replicates those; `touched` holds the ids of touched buffers."""

    def __init__(self, var: Var, n: int, touched: set[int]) -> None:
        self.var, self.n, self.touched = var, n, touched
        self.memo: dict[int, bool] = {}
        self.has_var: dict[int, bool] = {}  # expression node id -> whether it uses var
        # statement type -> push(statement); statements of other types are replicated
        self.table: TypeTable[ir.Stmt, [], ir.Stmt] = TypeTable()
        self.table.register(ir.Seq, self._seq)
        self.table.register(ir.For, self._for)
        self.table.register(ir.IfThenElse, self._if)

    def push(self, s: ir.Stmt) -> ir.Stmt:
        """`s` as it runs for all virtual threads."""
        if not self.depends(s):
            return s
        push = self.table.handler(s)
        return self.replicate(s) if push is None else push(s)

    def depends(self, s: ir.Stmt) -> bool:
        """Whether `s` uses the variable, reads or writes a touched buffer (memoised)."""
        got = self.memo.get(id(s))
        if got is None:
            got = (
                any(_uses(e, self.var, self.touched) for e in _exprs(s))
                or (isinstance(s, (ir.Store, ir.AllReduce)) and id(s.buffer) in self.touched)
                or (isinstance(s, ir.WarpStmt) and any(id(b) in self.touched for b in s.buffers()))
                or any(self.depends(c) for c in _child_stmts(s))
            )
            self.memo[id(s)] = got
        return got

    def _seq(self, s: ir.Seq) -> ir.Stmt:
        return ir.seq([self.push(c) for c in s.stmts])

    def _for(self, s: ir.For) -> ir.Stmt:
        if s.kind == "vectorize":  # one store per vector loop: replicate it whole
            return self.replicate(s)
        return ir.For(s.var, s.extent, s.kind, self.push(s.body))

    def _if(self, s: ir.IfThenElse) -> ir.Stmt:
        if _uses(s.cond, self.var, self.touched):
            return self.replicate(s)
        els = self.push(s.else_case) if s.else_case is not None else None
        return ir.IfThenElse(s.cond, self.push(s.then_case), els)

    def replicate(self, s: ir.Stmt) -> ir.Stmt:
        """One copy of `s` per virtual thread, the variable replaced by its value."""
        if any(isinstance(x, (ir.Barrier, ir.AsyncGroupStmt)) for x in ir.iter_stmts(s)):
            raise LoweringError(
                f"a barrier depends on virtual thread {self.var.name!r} (under a guard that "
                "uses it); it cannot be replicated per virtual thread"
            )
        return ir.seq([self.copy(s, v) for v in range(self.n)])

    def copy(self, s: ir.Stmt, v: int) -> ir.Stmt:
        """`s` as virtual thread `v` runs it."""
        value = Const(v, self.var.dtype)
        done: dict[int, Expr] = {}
        return stmt_walk.map_exprs(s, lambda e: self.substitute(e, value, done))

    def substitute(self, e: Expr, value: Const, done: dict[int, Expr]) -> Expr:
        """`e` with the variable replaced by `value`; only the nodes above a use of the
        variable are rebuilt (which those are is remembered across the copies)."""
        if not self.uses_var(e):
            return e
        if e is self.var:
            return value
        got = done.get(id(e))
        if got is None:
            got = done[id(e)] = rebuild(
                e, tuple(self.substitute(k, value, done) for k in children(e))
            )
        return got

    def uses_var(self, e: Expr) -> bool:
        got = self.has_var.get(id(e))
        if got is None:
            got = self.has_var[id(e)] = e is self.var or any(self.uses_var(k) for k in children(e))
        return got


# ---- statement helpers ---------------------------------------------------------------------------


def _is_vthread(s: ir.Stmt) -> bool:
    return isinstance(s, ir.For) and s.kind == ir.VTHREAD_KIND


def _child_stmts(s: ir.Stmt) -> list[ir.Stmt]:
    """The direct sub-statements of `s`."""
    if isinstance(s, ir.Seq):
        return list(s.stmts)
    if isinstance(s, ir.For):
        return [s.body]
    if isinstance(s, ir.IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    return []


def _with_children(s: ir.Stmt, kids: list[ir.Stmt]) -> ir.Stmt:
    """`s` rebuilt around new sub-statements (the order of `_child_stmts`)."""
    if isinstance(s, ir.Seq):
        return ir.Seq(kids)
    if isinstance(s, ir.For):
        return ir.For(s.var, s.extent, s.kind, kids[0])
    assert isinstance(s, ir.IfThenElse)  # the statements with children (`_child_stmts`)
    return ir.IfThenElse(s.cond, kids[0], kids[1] if len(kids) > 1 else None)


def _exprs(s: ir.Stmt) -> tuple[Expr, ...]:
    """The expressions a statement holds itself (not those of its sub-statements)."""
    if isinstance(s, ir.Store):
        return (s.index, s.value)
    if isinstance(s, ir.AllReduce):
        return (s.index, s.value) if s.cond is None else (s.index, s.value, s.cond)
    if isinstance(s, ir.IfThenElse):
        return (s.cond,)
    if isinstance(s, ir.WarpStmt):
        return tuple(s.exprs())
    return ()


def _access_counts(s: ir.Stmt) -> Counter:
    """Loads and stores per buffer id in `s`."""
    counts: Counter = Counter()
    for node in ir.iter_stmts(s):
        _count_accesses(node, counts)
    return counts


def _access_counts_outside(s: ir.Stmt, loop: ir.For) -> Counter | None:
    """Loads and stores per buffer id in `s` outside `loop`: what `_access_counts(s)` counts
    less what `_access_counts(loop.body)` does, without walking the loop (a vthread loop holds
    most of its kernel); None when `s` holds `loop` more than once (then that difference is
    not the count outside one of them)."""
    counts: Counter = Counter()
    met = 0
    todo = [s]
    while todo:
        node = todo.pop()
        if node is loop:
            met += 1
            continue
        _count_accesses(node, counts)
        todo.extend(reversed(_child_stmts(node)))
    return counts if met == 1 else None


def _count_accesses(node: ir.Stmt, counts: Counter) -> None:
    """Add the accesses of one statement's own (not its sub-statements') to `counts`."""
    if isinstance(node, (ir.Store, ir.AllReduce)):
        counts[id(node.buffer)] += 1
    elif isinstance(node, ir.WarpStmt):
        for b in node.buffers():
            counts[id(b)] += 1
    for e in _exprs(node):
        for n in loads(e):
            counts[id(n.buffer)] += 1
