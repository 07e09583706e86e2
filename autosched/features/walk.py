"""The walk over a Program that builds one StoreInfo per Store / AllReduce statement, and per
warp-collective Tensor Core statement (as `features.warp` models it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from autosched.features.analysis import (
    CACHE_LINE_BYTES,
    CURVE_POINTS,
    READ,
    REUSE_LOOP,
    REUSE_NONE,
    REUSE_SERIAL,
    RW,
    WRITE,
    Access,
    Annotation,
    BufferInfo,
    Loop,
    StoreInfo,
    touched_regions,
)
from autosched.features.exprs import FLOAT_COMPUTE, INT_BASE, OP_KINDS, REDUCER_KIND, count_ops
from autosched.features.tma import box_copy
from autosched.features.warp import ELEM, lane_view, warp_record, wgmma_record
from autosched.lower import ir
from autosched.lower import single_pass_ir as sp
from autosched.lower import tma_ir as ti
from autosched.lower import wgmma_ir as wi
from autosched.lower.ir import BLOCK_TAGS, THREAD_TAGS
from autosched.te.dtype import BYTES, FLOAT_DTYPES
from autosched.te.expr import Expr

Guards = tuple[Expr, ...]  # the conditions of the enclosing ifs


def _steps(s: ir.Stmt, memo: dict) -> int:
    """Store instances one execution of `s` runs (the size of an unrolled nest)."""
    got = memo.get(id(s))
    if got is not None:
        return got
    if isinstance(s, ir.Seq):
        n = sum(_steps(c, memo) for c in s.stmts)
    elif isinstance(s, ir.For):
        n = s.extent * _steps(s.body, memo)
    elif isinstance(s, ir.IfThenElse):
        n = _steps(s.then_case, memo)
        if s.else_case is not None:
            n += _steps(s.else_case, memo)
    elif isinstance(s, (ir.Store, ir.AllReduce, ir.WarpStmt)):
        n = 1
    else:
        n = 0
    memo[id(s)] = n
    return n


class ProgramWalker:
    """Walks every kernel of a program; `run()` returns the StoreInfos in program order.

    Virtual threads are no loops of the lowered IR (lowering injects them): every statement of
    a kernel gets the kernel's `vthread` extent."""

    def __init__(self, program: ir.Program) -> None:
        self.program = program
        self.out: list[StoreInfo] = []
        self.steps_memo: dict[int, int] = {}
        self.linear_cache: dict = {}  # index expression -> Linear
        self.atom_cache: dict = {}  # structural key of an atom -> Atom

    def run(self) -> list[StoreInfo]:
        for kernel in self.program.kernels:
            self.kernel = kernel
            self.allocs = {id(b): b for b in kernel.allocs}
            self.lane_views: dict[int, ir.Buffer] = {}
            size = {"shared": 0, "local": 0, "global": 0}
            for b in kernel.allocs:
                if b.scope in ir.FRAGMENT_SCOPES:
                    b = self.lane_view(b)
                    self.allocs[id(b)] = b
                size[b.scope] += b.size * BYTES[b.dtype]
            self.shared_bytes, self.local_bytes = kernel.shared_bytes, size["local"]
            self.n_blocks = kernel.grid[0] * kernel.grid[1] * kernel.grid[2]
            self.n_threads = self.n_blocks * kernel.threads_per_block
            self.arrivals: list[sp.CountArrival] = []  # met before their last-block branch
            self.loops: list[Loop] = []
            self.level_of: dict[int, int] = {}
            self.threads = dict.fromkeys(BLOCK_TAGS + THREAD_TAGS, 1)
            for tag, ext in zip(BLOCK_TAGS + THREAD_TAGS, kernel.grid + kernel.block, strict=True):
                self.threads[tag] = ext
                if ext > 1:
                    self.push(Loop(ir.THREAD_VARS[tag], ext, tag))
            self.outer_prod = self.n_threads
            self.copy_engine = False
            self.visit(kernel.body, ())
        return self.out

    def lane_view(self, b: ir.Buffer) -> ir.Buffer:
        """The per-lane `local` stand-in of fragment `b` (one per fragment and kernel)."""
        got = self.lane_views.get(id(b))
        if got is None:
            got = self.lane_views[id(b)] = lane_view(b)
        return got

    def push(self, loop: Loop) -> None:
        self.level_of[id(loop.var)] = len(self.loops)
        self.loops.append(loop)

    def pop(self) -> None:
        loop = self.loops.pop()
        del self.level_of[id(loop.var)]

    def visit(self, s: ir.Stmt, guards: Guards) -> None:
        """Walk `s` under the conditions `guards` (`_VISITORS` says how, by statement type;
        a barrier records nothing)."""
        visit = _VISITORS.get(type(s))
        if visit is not None:
            visit(self, s, guards)

    def visit_seq(self, s: ir.Seq, guards: Guards) -> None:
        for c in s.stmts:
            self.visit(c, guards)

    def visit_for(self, s: ir.For, guards: Guards) -> None:
        self.push(Loop(s.var, s.extent, s.kind, s))
        self.outer_prod *= s.extent
        self.visit(s.body, guards)
        self.outer_prod //= s.extent
        self.pop()

    def visit_if(self, s: ir.IfThenElse, guards: Guards) -> None:
        inner = guards + (s.cond,)
        # a single-pass kernel's last block: its statements run in one block, not in each
        once = any(sp.is_last_block(s, a) for a in self.arrivals)
        if once:
            self.outer_prod //= self.n_blocks
        self.visit(s.then_case, inner)
        if s.else_case is not None:
            self.visit(s.else_case, inner)
        if once:
            self.outer_prod *= self.n_blocks

    def visit_store(self, s: ir.Store, guards: Guards) -> None:
        self.store(s.buffer, s.index, (s.value,), guards, None)

    def visit_allreduce(self, s: ir.AllReduce, guards: Guards) -> None:
        roots = (s.value,) if s.cond is None else (s.value, s.cond)
        self.store(s.buffer, s.index, roots, guards, s)

    def visit_warp(self, s: ir.WarpStmt | wi.WgmmaMma, guards: Guards) -> None:
        """A warp statement: a store in a pseudo loop over each lane's elements of the tile
        (a wgmma: over each thread's accumulator values)."""
        rec = (
            wgmma_record(s, self.lane_view)
            if isinstance(s, wi.WgmmaMma)
            else warp_record(s, self.lane_view)
        )
        counts = [0] * len(OP_KINDS)
        loads: list = []
        count_ops(rec.roots + guards, counts, loads)
        per_step = [c / rec.per_lane for c in counts]  # the expressions run once per lane
        for k, n in rec.extra.items():
            per_step[k] += n
        reads = [(ld.buffer, ld.indices[0]) for ld in loads] + rec.reads
        self.push(Loop(ELEM, rec.per_lane, "serial"))
        self.outer_prod *= rec.per_lane
        self.record(*rec.write, per_step, reads)
        self.outer_prod //= rec.per_lane
        self.pop()

    def visit_tma_load(self, s: ti.TmaLoad, guards: Guards) -> None:
        """A TMA box copy: the cooperative copy it replaces (`features/tma.py`), a store in a
        pseudo loop over each thread's elements."""
        copy = box_copy(s, self.kernel.block)
        self.push(Loop(ELEM, copy.per_thread, "serial"))
        self.outer_prod *= copy.per_thread
        self.copy_engine = True
        self.store(copy.dst, copy.index, (copy.value,), guards, None)
        self.copy_engine = False
        self.outer_prod //= copy.per_thread
        self.pop()

    # ---- one statement -----------------------------------------------------------------------
    def store(
        self,
        buffer: ir.Buffer,
        index: Expr,
        roots: tuple[Expr, ...],
        guards: Guards,
        allreduce: ir.AllReduce | None,
    ) -> None:
        counts = [0] * len(OP_KINDS)
        loads: list = []
        count_ops(roots + guards + (index,), counts, loads)
        if allreduce is not None:  # the combine each thread's value takes part in
            base = 0 if allreduce.value.dtype in FLOAT_DTYPES else INT_BASE
            counts[base + REDUCER_KIND.get(allreduce.reducer, 1)] += 1
        self.record(buffer, index, counts, [(ld.buffer, ld.indices[0]) for ld in loads])

    def record(
        self,
        buffer: ir.Buffer,
        index: Expr,
        counts: Sequence[float],
        reads: list[tuple[ir.Buffer, Expr]],
    ) -> None:
        """The StoreInfo of one statement: it writes `buffer[index]`, reads the (buffer,
        index) pairs of `reads`, and runs the operations `counts` per execution."""
        loops = self.loops
        info = StoreInfo()
        info.buffer = buffer
        outer = self.outer_prod
        info.ops = [c * outer for c in counts]
        info.outer_prod = outer
        info.num_loops = len(loops)

        accesses: dict[int, Access] = {id(buffer): Access(buffer, WRITE, index)}
        for b, read_index in reads:
            acc = accesses.get(id(b))
            if acc is None:
                accesses[id(b)] = Access(b, READ, read_index)
            else:
                if acc.acc_type == WRITE:
                    acc.acc_type = RW
                acc.add(read_index)
        acc_list = list(accesses.values())
        touched_regions(acc_list, loops, self.level_of, self.linear_cache, self.atom_cache)
        self.context(info, index)
        # record for reuse analysis (Ansor's for_touch_regions)
        sizes = [(id(acc.buffer), acc.touched, BYTES[acc.buffer.dtype]) for acc in acc_list]
        elem_bytes = sum(eb for _, _, eb in sizes)
        for lv, loop in enumerate(loops):
            touch = loop.touch
            for key, touched, eb in sizes:
                t = touched[lv]
                entries = touch.get(key)
                if entries is None:
                    touch[key] = [t]
                else:
                    entries.append(t)
                loop.touch_bytes += t * eb
            loop.touch_elem_bytes += elem_bytes
        bufs = [self.buffer_info(acc, outer) for acc in acc_list]
        bufs.sort(key=lambda b: (-b.lines, -b.bytes))
        info.buffers = bufs
        flops = sum(counts[k] for k in FLOAT_COMPUTE)
        info.curve = _intensity_curve(flops, acc_list, loops)
        self.out.append(info)

    def context(self, info: StoreInfo, index: Expr) -> None:
        """Annotations, thread extents, allocation and outer-scope facts of the current store."""
        loops = self.loops
        n = len(loops)
        info.vec, info.unroll = Annotation(), Annotation()
        info.vthread = self.kernel.vthread
        outermost_unroll = None
        innermost: dict[int, Loop] = {}  # id(annotation) -> its innermost loop
        for lv, loop in enumerate(loops):
            kind = loop.kind
            ann = info.vec if kind == "vectorize" else info.unroll if kind == "unroll" else None
            if ann is None:
                continue
            if kind == "unroll" and outermost_unroll is None:
                outermost_unroll = loop
            ann.num += 1
            ann.prod = (ann.prod or 1) * loop.extent
            ann.length = loop.extent
            ann.inner_loops = n - 1 - lv
            innermost[id(ann)] = loop
        if innermost:
            store_vars = self.linear_cache[index].vids
            for ann in (info.vec, info.unroll):
                if ann.num:
                    ann.spatial = 1 if id(innermost[id(ann)].var) in store_vars else 0
        info.threads = self.threads
        info.unrolled_steps = 0
        if outermost_unroll is not None and outermost_unroll.for_node is not None:
            info.unrolled_steps = _steps(outermost_unroll.for_node, self.steps_memo)
        b = info.buffer
        alloc = self.allocs.get(id(b))
        if alloc is None:
            info.alloc_bytes, info.alloc_outer_prod, info.alloc_scope = 0, 0, "global"
        else:
            info.alloc_bytes = b.size * BYTES[b.dtype]
            info.alloc_outer_prod = self.n_threads if b.scope == "local" else self.n_blocks
            info.alloc_scope = b.scope
        info.kernel_shared_bytes = self.shared_bytes
        info.kernel_local_bytes = self.local_bytes
        info.copy_engine = self.copy_engine
        info.warp_specialized = self.kernel.warp_specialized
        # a store into a buffer that cp.async fills is one of its copies (a TMA-filled one's
        # copies are the copy engine's)
        info.async_copy = not self.copy_engine and alloc is not None and alloc.async_copy

    def buffer_info(self, acc: Access, outer: int) -> BufferInfo:
        loops = self.loops
        n = len(loops)
        b = acc.buffer
        eb = BYTES[b.dtype]
        f = BufferInfo()
        f.name = b.name
        f.acc_type = acc.acc_type
        f.scope = b.scope
        f.bytes = outer * eb * len(acc.exprs)
        used = acc.levels
        if n == 0:
            f.unique_bytes, f.stride, f.lines, f.unique_lines = eb, 0, 1.0, 1.0
        else:
            f.unique_bytes = acc.touched[0] * eb
            stride: float = 0
            reduce_ratio = 1
            for lv in range(n - 1, -1, -1):
                if lv in used:
                    steps = [
                        lin.stride(loops[lv])
                        for lin, lvs in zip(acc.linear, acc.index_levels, strict=True)
                        if lv in lvs
                    ]
                    stride = min((s for s in steps if s), default=0)
                    if stride:
                        break
                reduce_ratio *= loops[lv].extent
            f.stride = stride
            f.lines = max(1.0, outer / reduce_ratio * min(1.0, stride * eb / CACHE_LINE_BYTES))
            run = 1  # contiguous elements of the touched box
            for span, size in zip(reversed(acc.spans), reversed(b.shape), strict=True):
                run *= span
                if span < size:
                    break
            f.unique_lines = max(1.0, f.unique_bytes / min(run * eb, CACHE_LINE_BYTES))
        tx = self.level_of.get(id(ir.THREAD_VARS["threadIdx.x"]))
        f.tx_stride = 0
        if tx is not None and tx in used:
            f.tx_stride = min(
                lin.stride(loops[tx])
                for lin, lvs in zip(acc.linear, acc.index_levels, strict=True)
                if tx in lvs
            )
        f.reuse_type, f.reuse_dis_iter, f.reuse_dis_bytes, f.reuse_ct = _reuse(acc, used, loops)
        return f


# statement type -> how the walk handles it (each handler takes the type it is listed under)
_VISITORS: dict[type[ir.Stmt], Callable[[ProgramWalker, Any, Guards], None]] = {
    ir.Seq: ProgramWalker.visit_seq,
    ir.For: ProgramWalker.visit_for,
    ir.IfThenElse: ProgramWalker.visit_if,
    ir.Store: ProgramWalker.visit_store,
    ir.AllReduce: ProgramWalker.visit_allreduce,
    **dict.fromkeys(ir.WARP_STMTS, ProgramWalker.visit_warp),
    wi.WgmmaMma: ProgramWalker.visit_warp,
    ti.TmaLoad: ProgramWalker.visit_tma_load,
    # cp.async groups, the wgmma fences, the mbarriers and a single pass's fence order work as
    # a barrier does: they record nothing
    **dict.fromkeys(
        (
            ir.AsyncCommit,
            ir.AsyncWait,
            wi.WgmmaFence,
            wi.WgmmaCommit,
            wi.WgmmaWait,
            wi.ProxyFence,
            sp.ThreadFence,
        ),
        lambda walker, s, guards: None,
    ),
    # a single pass's arrival records nothing either; the walk remembers it, to read the last
    # block's branch after it as running once
    sp.CountArrival: lambda walker, s, guards: walker.arrivals.append(s),
    **dict.fromkeys(
        (ti.MbarrierInit, ti.MbarrierExpectTx, ti.MbarrierWait), lambda walker, s, guards: None
    ),
}


def _reuse(acc: Access, used: set[int], loops: list[Loop]) -> tuple[int, float, float, float]:
    """Ansor's ComputeReuse: walking outwards, the first loop that does not move over the
    buffer re-reads it (loop reuse, count = its extent); before that, a loop under which other
    statements touched the buffer too gives serial reuse."""
    dis_iter, dis_bytes = 1.0, -1.0
    key = id(acc.buffer)
    for lv in range(len(loops) - 1, -1, -1):
        loop = loops[lv]
        if lv in used:
            dis_iter *= loop.extent
            dis_bytes = float(loop.touch_bytes)
        else:
            if dis_bytes < 0:
                dis_bytes = float(loop.touch_elem_bytes)
            return REUSE_LOOP, dis_iter, dis_bytes, float(loop.extent)
        entries = loop.touch[key]
        if len(entries) > 1:
            d_iter = min(entries)
            return (
                REUSE_SERIAL,
                d_iter / loop.extent,
                loop.touch_bytes / loop.extent,
                float(len(entries) - 1),
            )
    return REUSE_NONE, 0.0, 0.0, 0.0


def _intensity_curve(flops: float, accesses: list[Access], loops: list[Loop]) -> list[float]:
    """Ansor's arithmetic-intensity curve: float ops / touched bytes as loops are added from the
    innermost outwards, sampled at CURVE_POINTS evenly spaced op counts (linear interpolation)."""
    if flops <= 0 or not loops:
        return [0.0] * CURVE_POINTS
    ops_list, bytes_list = [], []
    cur = float(flops)
    for lv in range(len(loops) - 1, -1, -1):
        cur *= loops[lv].extent
        ops_list.append(cur)
        bytes_list.append(float(sum(a.touched[lv] * BYTES[a.buffer.dtype] for a in accesses)))
    ratio = [o / b for o, b in zip(ops_list, bytes_list, strict=True)]
    out, pt, total = [], 0, ops_list[-1]
    for i in range(CURVE_POINTS):
        x = total * (i + 1) / CURVE_POINTS
        while pt < len(ops_list) - 1 and ops_list[pt] < x - 1e-4:
            pt += 1
        if pt == 0:
            out.append(ratio[0])
        else:
            slope = (ratio[pt] - ratio[pt - 1]) / (ops_list[pt] - ops_list[pt - 1])
            out.append(ratio[pt - 1] + slope * (x - ops_list[pt - 1]))
    return out
