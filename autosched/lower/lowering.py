"""Lowering: State -> loop-nest IR (ir.Program).

Passes, in order:
  1. resolve bodies      each stage's expression with cache redirects and inlined stages applied
  2. attach tree         which stages are computed inside which loop (and their loop context)
  3. bound inference     consumers first: the region each attached stage must compute per
                         iteration of its attach loop (shared stages relax threadIdx loops)
  4. leaf extents        iterator extents re-derived from the regions through split/fuse relations
  5. emission            loops, init + update of reductions, guards, barriers around shared stages;
                         a reduction bound to threadIdx accumulates per thread, then AllReduces
  6. unrolling           auto_unroll_max_step marks small loop nests `unroll`; after virtual-thread
                         injection every loop whose variable indexes a local array is unrolled
                         (autosched/unrolling.py)
One root stage becomes one kernel; kernels run in dataflow order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from graphlib import TopologicalSorter

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.arith import INF, atom_bounds, expr_bounds, simplify, to_affine
from autosched.lower.unrolling import auto_unroll, unroll_register_indices
from autosched.lower.vthread import inject_virtual_threads
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, INLINED, ROOT, SPATIAL, FuseRel, SplitRel, Stage
from autosched.te.expr import BinOp, Const, Expr, Load, Reduce, Var
from autosched.te.reduce import BUILTIN_REDUCERS
from autosched.te.tensor import ComputeOp, Tensor
from autosched.te.visitor import free_vars, rewrite, substitute, walk

THREAD_TAGS = {"threadIdx.x", "threadIdx.y", "threadIdx.z"}
BLOCK_TAGS = {"blockIdx.x", "blockIdx.y", "blockIdx.z"}
I32 = "int32"


def _c(v: int) -> Const:
    return Const(v, I32)


@dataclass
class StageInfo:
    """Per-stage results of the passes."""

    index: int
    stage: Stage
    body: Expr | None = None
    reads: set = field(default_factory=set)  # stage ids loaded by the body
    context: list = field(default_factory=list)  # enclosing loops: (stage id, iterator name)
    scope: str = "global"
    base: list = field(default_factory=list)  # per spatial root axis: Expr of context vars
    region: list = field(default_factory=list)  # per spatial root axis: extent
    ext: dict = field(default_factory=dict)  # iterator name -> extent (all names, roots too)
    value: dict = field(default_factory=dict)  # root name -> offset Expr in leaf vars
    inner_limits: list = field(default_factory=list)  # (value, extent) of split reduce parents
    buffer: ir.Buffer | None = None


class Lowerer:
    """Lowers one State. Use `lower(state)`."""

    def __init__(self, state: State) -> None:
        if not state.is_complete:
            raise LoweringError("cannot lower a sketch: some tile sizes are still unknown")
        self.state = state
        self.stages = state.stages
        self.info = [StageInfo(i, s) for i, s in enumerate(self.stages)]
        self.producer_stage = {id(s.produces): i for i, s in enumerate(self.stages)}
        self.loop_vars: dict[tuple[int, str], Var] = {}
        self.attached: dict[tuple[int, str], list[int]] = {}
        self.taken_names: set[str] = set()
        self.extra_allocs: dict[int, list[ir.Buffer]] = {}  # per stage: cross-thread temporaries

    # ---- pass 1: bodies --------------------------------------------------------------------
    def resolve_bodies(self) -> None:
        memo: dict[int, Expr] = {}

        def body(i: int) -> Expr:
            if i in memo:
                return memo[i]
            st = self.stages[i]
            redirect = {id(a): b for a, b in st.redirects}

            def fix(node):
                if isinstance(node, Load) and isinstance(node.buffer, Tensor):
                    op = node.buffer.op
                    while id(op) in redirect:  # a cache of a cache: follow the chain
                        op = redirect[id(op)]
                    j = self.producer_stage.get(id(op))
                    if j is None:
                        raise LoweringError(
                            f"stage {st.name!r} reads {op.name!r}, which no stage produces"
                        )
                    idx = tuple(rewrite(x, fix) for x in node.indices)
                    src = self.stages[j]
                    if src.compute_at == INLINED:
                        inner = body(j)
                        return substitute(inner, dict(zip(src.op.axis, idx)))
                    return Load(src.produces.output(0), idx)
                return None

            memo[i] = rewrite(st.op.body, fix)
            return memo[i]

        for i, st in enumerate(self.stages):
            if isinstance(st.op, ComputeOp) and st.compute_at != INLINED:
                b = body(i)
                self.info[i].body = b
                for node in _loads(b):
                    self.info[i].reads.add(self.producer_stage[id(node.buffer.op)])

    # ---- pass 2: attach tree -----------------------------------------------------------------
    def build_attach_tree(self) -> None:
        for i, st in enumerate(self.stages):
            if st.compute_at == ATTACHED:
                t, name = st.attach
                if self.stages[t].compute_at == INLINED:
                    raise LoweringError(
                        f"stage {st.name!r} is computed at inlined stage {self.stages[t].name!r}"
                    )
                self.attached.setdefault((t, name), []).append(i)
        for i in self.topo_order():
            self.info[i].context = self.context_of(i)
            self.info[i].scope = self.scope_of(i)

    def context_of(self, i: int, depth: int = 0) -> list[tuple[int, str]]:
        st = self.stages[i]
        if st.compute_at != ATTACHED:
            return []
        if depth > len(self.stages):
            raise LoweringError("compute_at chain forms a cycle")
        t, name = st.attach
        target = self.stages[t]
        pos = target.iter_index(name)
        return self.context_of(t, depth + 1) + [(t, it.name) for it in target.iters[: pos + 1]]

    def annotation(self, key: tuple[int, str]) -> str:
        st = self.stages[key[0]]
        return st.iters[st.iter_index(key[1])].annotation

    def scope_of(self, i: int) -> str:
        st = self.stages[i]
        if st.origin in ("cache_read", "cache_write"):
            scope = st.scope
        else:
            anns = {self.annotation(k) for k in self.info[i].context}
            scope = "local" if anns & THREAD_TAGS else "shared" if anns & BLOCK_TAGS else "global"
        if st.compute_at == ROOT and scope != "global":
            raise LoweringError(
                f"stage {st.name!r} has scope {scope!r} but is computed at root; compute it at a "
                "loop inside the thread block (compute_at)"
            )
        return scope

    def topo_order(self) -> list[int]:
        graph = {
            i: {j for j in self.info[i].reads}
            for i, s in enumerate(self.stages)
            if s.compute_at != INLINED
        }
        return list(TopologicalSorter(graph).static_order())

    # ---- pass 3 + 4: bounds and extents ------------------------------------------------------
    def var_of(self, i: int, name: str) -> Var:
        st = self.stages[i]
        ann = st.iters[st.iter_index(name)].annotation
        if ann in THREAD_TAGS or ann in BLOCK_TAGS:
            return ir.THREAD_VARS[ann]
        key = (i, name)
        v = self.loop_vars.get(key)
        if v is None:
            v = self.loop_vars[key] = Var(f"{st.name.replace('.', '_')}_{name}", I32)
        return v

    def infer_bounds(self) -> None:
        for i in reversed(self.topo_order()):
            inf = self.info[i]
            st = self.stages[i]
            if st.is_placeholder:
                continue
            spatial = st.op.axis
            if st.compute_at == ATTACHED:
                inf.base, inf.region = self.attached_region(i)
            else:
                inf.base = [_c(0) for _ in spatial]
                inf.region = [a.extent for a in spatial]
            self.derive_extents(i)

    def derive_extents(self, i: int) -> None:
        inf, st = self.info[i], self.stages[i]
        ext: dict[str, int] = {}
        for a, r in zip(st.op.axis, inf.region):
            ext[a.name] = r
        for a in st.op.reduce_axis:
            ext[a.name] = a.extent
        for rel in st.relations:
            if isinstance(rel, SplitRel):
                rem = ext[rel.parent]
                n = len(rel.lengths)
                if rel.inner_to_outer:
                    for k in range(n, 0, -1):
                        f = rel.lengths[k - 1]
                        ext[rel.children[k]] = min(rem, f)
                        rem = -(-rem // f)
                    ext[rel.children[0]] = rem
                else:
                    for k in range(n):
                        f = rel.lengths[k]
                        ext[rel.children[k]] = min(rem, f)
                        rem = -(-rem // f)
                    ext[rel.children[n]] = rem
            else:
                ext[rel.fused] = math.prod(ext[c] for c in rel.children)
        inf.ext = ext
        # Root values in leaf variables: walk the relations backwards.
        val: dict[str, Expr] = {it.name: self.var_of(i, it.name) for it in st.iters}
        for rel in reversed(st.relations):
            if isinstance(rel, FuseRel):
                f = val[rel.fused]
                stride = 1
                for k in range(len(rel.children) - 1, -1, -1):
                    c = rel.children[k]
                    part = BinOp("floordiv", f, _c(stride), I32) if stride > 1 else f
                    if k > 0:
                        part = BinOp("floormod", part, _c(ext[c]), I32)
                    val[c] = part
                    stride *= ext[c]
            else:
                total: Expr | None = None
                stride = 1
                for k in range(len(rel.children) - 1, -1, -1):
                    c = rel.children[k]
                    term = val[c] if stride == 1 else BinOp("*", val[c], _c(stride), I32)
                    total = term if total is None else BinOp("+", term, total, I32)
                    if rel.inner_to_outer:
                        stride *= rel.lengths[k - 1] if k > 0 else 1
                    else:
                        stride *= ext[c]
                val[rel.parent] = total
        inf.value = {r.name: val[r.name] for r in st.root_iters}
        # A reduce iterator split again by a length that does not divide it: its recomposed
        # value can pass its extent and reach the next outer iteration's range (counted twice).
        reduce_names = {a.name for a in st.op.reduce_axis}
        for rel in st.relations:
            if isinstance(rel, SplitRel) and rel.parent in reduce_names:
                reduce_names.update(rel.children)
        roots = {r.name for r in st.root_iters}
        inf.inner_limits = [
            (val[rel.parent], ext[rel.parent])
            for rel in st.relations
            if isinstance(rel, SplitRel) and rel.parent in reduce_names and rel.parent not in roots
        ]

    def loop_bounds(self, keys) -> dict[int, tuple[int, int]]:
        """Bounds of the variables of the given loops (0 .. extent-1)."""
        out = {}
        for j, name in keys:
            v = self.var_of(j, name)
            e = self.info[j].ext[name]
            lo, hi = out.get(id(v), (0, 0))
            out[id(v)] = (0, max(hi, e - 1))
        return out

    def attached_region(self, i: int) -> tuple[list[Expr], list[int]]:
        inf, st = self.info[i], self.stages[i]
        ctx = inf.context
        # shared stages serve every thread and virtual thread of the block: both are relaxed
        relax_tags = THREAD_TAGS | {"vthread"} if inf.scope == "shared" else set()
        if inf.scope == "global":
            relax_tags = THREAD_TAGS | BLOCK_TAGS | {"vthread"}
        fixed = {k for k in ctx if self.annotation(k) not in relax_tags}
        fixed_vars = {id(self.var_of(*k)) for k in fixed}
        consumers = [j for j, other in enumerate(self.info) if i in other.reads]
        if not consumers:
            raise LoweringError(f"stage {st.name!r} is computed at a loop but nothing reads it")
        tensor_op = st.produces
        per_dim: list[list[tuple[Expr, int] | None]] = [[] for _ in st.op.axis]
        for j in consumers:
            cinf = self.info[j]
            loops = cinf.context + [(j, it.name) for it in self.stages[j].iters]
            missing = [k for k in fixed if k not in loops]
            if missing:
                raise LoweringError(
                    f"stage {st.name!r} is computed inside {self.stages[ctx[-1][0]].name!r} but "
                    f"{self.stages[j].name!r} reads it outside that loop"
                )
            relaxed = {}
            for k in loops:
                v = self.var_of(*k)
                if id(v) not in fixed_vars:
                    e = self.info[k[0]].ext[k[1]]
                    lo, hi = relaxed.get(id(v), (0, 0))
                    relaxed[id(v)] = (0, max(hi, e - 1))
            root_map = self.root_value_map(j)
            for node in _loads(cinf.body):
                if node.buffer.op is not tensor_op:
                    continue
                for d, idx in enumerate(node.indices):
                    per_dim[d].append(_interval(substitute(idx, root_map), relaxed))
        base, region = [], []
        for d, axis in enumerate(st.op.axis):
            got = _union(per_dim[d])
            if got is None or got[1] + 1 >= axis.extent:
                base.append(_c(0))
                region.append(axis.extent)
            else:
                base.append(got[0])
                region.append(got[1] + 1)
        return base, region

    def root_value_map(self, j: int) -> dict[Var, Expr]:
        """Root axis var -> global index expression (base + offset) for stage j."""
        inf, st = self.info[j], self.stages[j]
        out: dict[Var, Expr] = {}
        for d, a in enumerate(st.op.axis):
            out[a] = BinOp("+", inf.base[d], inf.value[a.name], I32)
        for a in st.op.reduce_axis:
            v = inf.value[a.name]
            out[a] = BinOp("+", v, _c(a.lo), I32) if a.lo else v
        return out

    # ---- buffers -----------------------------------------------------------------------------
    def make_buffers(self) -> tuple[list[ir.Buffer], list[ir.Buffer], list[ir.Buffer]]:
        dag = self.state.dag
        params, outputs, temps = [], [], []
        by_op: dict[int, ir.Buffer] = {}
        unique = self.unique_name
        for t in dag.tensors:
            b = ir.Buffer(unique(t.name), tuple(t.shape), t.dtype, "global")
            by_op[id(t.op)] = b
            params.append(b)
            if id(t.op) in {id(o) for o in dag.outputs}:
                outputs.append(b)
        for i, st in enumerate(self.stages):
            if st.compute_at == INLINED:
                continue
            inf = self.info[i]
            got = by_op.get(id(st.produces))
            if got is not None:
                inf.buffer = got
                if st.compute_at != ROOT:
                    raise LoweringError(f"output/input stage {st.name!r} must be computed at root")
                continue
            if inf.scope == "global":
                b = ir.Buffer(
                    unique(st.name), tuple(a.extent for a in st.op.axis), st.op.dtype, "global"
                )
                temps.append(b)
                if st.compute_at != ROOT:
                    raise LoweringError(f"stage {st.name!r} is attached outside any thread binding")
            else:
                b = ir.Buffer(unique(st.name), tuple(inf.region), st.op.dtype, inf.scope)
            inf.buffer = b
        return params, outputs, temps

    def unique_name(self, name: str) -> str:
        """`name` (dots made underscores), suffixed until no other buffer has it."""
        name = name.replace(".", "_")
        base, k = name, 1
        while name in self.taken_names:
            name, k = f"{base}_{k}", k + 1
        self.taken_names.add(name)
        return name

    def flat_index(self, j: int, indices, relative: bool) -> Expr:
        """Flat buffer index of stage j's element at global `indices` (minus its base)."""
        inf = self.info[j]
        shape = inf.buffer.shape
        flat: Expr | None = None
        for d, idx in enumerate(indices):
            if relative and inf.base:
                idx = BinOp("-", idx, inf.base[d], I32)
            flat = (
                idx if flat is None else BinOp("+", BinOp("*", flat, _c(shape[d]), I32), idx, I32)
            )
        return flat if flat is not None else _c(0)

    # ---- pass 5: emission ----------------------------------------------------------------------
    def value_expr(self, i: int, e: Expr, root_map) -> Expr:
        """`e` (a stage body) with root vars substituted and loads mapped to IR buffers."""

        def fix(node):
            if isinstance(node, Load) and isinstance(node.buffer, Tensor):
                j = self.producer_stage[id(node.buffer.op)]
                idx = [rewrite(x, fix) for x in node.indices]
                is_placeholder = self.stages[j].is_placeholder
                return Load(self.info[j].buffer, (self.flat_index(j, idx, not is_placeholder),))
            return None

        return rewrite(substitute(e, root_map), fix)

    def guards(self, i: int, spatial_only: bool, skip_tag: str | None = None) -> list[Expr]:
        """Conditions under which stage i's innermost statement is in range: its root values
        inside the region and the tensor (reductions too unless `spatial_only`), and its
        thread indices inside their iterators' extents (but `skip_tag`'s)."""
        inf, st = self.info[i], self.stages[i]
        conds: list[Expr] = []
        bounds = self.loop_bounds(inf.context + [(i, it.name) for it in st.iters])
        for d, a in enumerate(st.op.axis):
            off = inf.value[a.name]
            _, hi = expr_bounds(off, bounds)
            if hi >= inf.region[d]:
                conds.append(BinOp("<", off, _c(inf.region[d]), "bool"))
            g = BinOp("+", inf.base[d], off, I32)
            glo, ghi = expr_bounds(g, bounds)
            if glo < 0:
                conds.append(BinOp(">=", g, _c(0), "bool"))
            if ghi >= a.extent:
                conds.append(BinOp("<", g, _c(a.extent), "bool"))
        if not spatial_only:
            for a in st.op.reduce_axis:
                off = inf.value[a.name]
                _, hi = expr_bounds(off, bounds)
                if hi >= a.extent:
                    conds.append(BinOp("<", off, _c(a.extent), "bool"))
            for value, extent in inf.inner_limits:
                if expr_bounds(value, bounds)[1] >= extent:
                    conds.append(BinOp("<", value, _c(extent), "bool"))
        for it in st.iters:
            if it.annotation == skip_tag:
                continue
            if it.annotation in THREAD_TAGS and inf.ext[it.name] < self.block_extent[it.annotation]:
                conds.append(
                    BinOp("<", ir.THREAD_VARS[it.annotation], _c(inf.ext[it.name]), "bool")
                )
        return conds

    def store_stmt(self, i: int, init: bool, into: tuple[ir.Buffer, Expr] | None = None) -> ir.Stmt:
        """Stage i's innermost statement: its value (a reduction's init or update), guarded;
        `into` (buffer, index) redirects a reduction's accumulator (cross-thread partials)."""
        inf, st = self.info[i], self.stages[i]
        root_map = self.root_value_map(i)
        buffer, idx = into or (
            inf.buffer,
            self.flat_index(i, [inf.value[a.name] for a in st.op.axis], relative=False),
        )
        body = inf.body
        conds = self.guards(i, spatial_only=init)
        if isinstance(body, Reduce):
            if init:
                value: Expr = body.identity
            else:
                cur = Load(buffer, (idx,))
                src = self.value_expr(i, body.source, root_map)
                value = body.reducer.combine(cur, src)
                if body.condition is not None:
                    conds.append(self.value_expr(i, body.condition, root_map))
        else:
            value = self.value_expr(i, body, root_map)
        return _guarded(ir.Store(buffer, idx, value), conds)

    def loop(self, i: int, name: str, body: ir.Stmt) -> ir.Stmt:
        st = self.stages[i]
        it = st.iters[st.iter_index(name)]
        if it.annotation in THREAD_TAGS or it.annotation in BLOCK_TAGS:
            return body
        ext = self.info[i].ext[name]
        var = self.var_of(i, name)
        if ext == 1:
            # No loop: kernel_bounds gives the variable the range [0, 0], so the one
            # simplification pass over the kernel folds it to 0 everywhere.
            return body
        kind = {"unroll": "unroll", "vectorize": "vectorize", "vthread": ir.VTHREAD_KIND}.get(
            it.annotation, "serial"
        )
        return ir.For(var, ext, kind, body)

    def emit(self, i: int) -> ir.Stmt:
        st = self.stages[i]
        iters = st.iters
        is_reduce = isinstance(self.info[i].body, Reduce)
        first_reduce = next((k for k, it in enumerate(iters) if it.kind != "spatial"), len(iters))
        tag = self.cross_thread_tag(i)

        def init_nest(k: int) -> ir.Stmt:
            body = self.store_stmt(i, init=True)
            for it in reversed(iters[k:]):
                if it.kind == "spatial":
                    body = self.loop(i, it.name, body)
            return body

        def nest(k: int) -> ir.Stmt:
            if k == len(iters):
                inner = self.store_stmt(i, init=False, into=self.partial_of(i) if tag else None)
                return ir.seq([init_nest(k), inner]) if is_reduce and first_reduce == k else inner
            it = iters[k]
            parts = [self.emit_attached(j) for j in self.attached.get((i, it.name), [])]
            loop = self.loop(i, it.name, ir.seq(parts + [nest(k + 1)]))
            if is_reduce and k == first_reduce:
                if tag is not None:
                    return self.cross_thread(i, k, tag, loop)
                return ir.seq([init_nest(k), loop])
            return loop

        stmt = nest(0)
        if st.auto_unroll_max_step > 0:
            stmt = auto_unroll(stmt, st.auto_unroll_max_step)
        return stmt

    def emit_attached(self, j: int) -> ir.Stmt:
        stmt = self.emit(j)
        if self.info[j].scope == "shared":
            return ir.seq([ir.Barrier(), stmt, ir.Barrier()])
        return stmt

    # ---- cross-thread reductions ------------------------------------------------------------
    def cross_thread_tag(self, i: int) -> str | None:
        """The threadIdx tag stage i binds a reduction iterator to (a cross-thread reduction:
        each thread reduces its part, an AllReduce combines the parts), or None."""
        st, body = self.stages[i], self.info[i].body
        bound = [
            it
            for it in st.iters
            if it.kind != SPATIAL and it.annotation in THREAD_TAGS | BLOCK_TAGS
        ]
        if not bound:
            return None
        tags = {it.annotation for it in bound}
        reducer = body.reducer if isinstance(body, Reduce) else None
        builtin = reducer is not None and BUILTIN_REDUCERS.get(reducer.name) is reducer
        refusals = (  # (refused?, why), first match wins
            (bool(tags & BLOCK_TAGS), "it binds a reduction iterator to a blockIdx"),
            (len(tags) > 1, "it binds reduction iterators to several thread axes"),
            (
                any(it.kind != "reduce" for it in bound),
                "an iterator bound to a thread fuses spatial and reduction iterators",
            ),
            (not builtin, "its reducer is not sum, max or min"),
        )
        why = next((why for refused, why in refusals if refused), None)
        if why is not None:
            raise LoweringError(f"stage {st.name!r} cannot be a cross-thread reduction: {why}")
        tag = tags.pop()
        tv = id(ir.THREAD_VARS[tag])
        for d, a in enumerate(st.op.axis):
            if _contains(BinOp("+", self.info[i].base[d], self.info[i].value[a.name], I32), {tv}):
                raise LoweringError(
                    f"stage {st.name!r} reduces across {tag} but its element {a.name} depends on "
                    f"{tag} too (compute it at a loop outside the consumer's {tag})"
                )
        return tag

    def inner_spatial(self, i: int) -> list[str]:
        """Stage i's spatial loops inside its first reduction iterator (the accumulator tile)."""
        its = self.stages[i].iters
        first = next(k for k, it in enumerate(its) if it.kind != SPATIAL)
        return [
            it.name
            for it in its[first:]
            if it.kind == SPATIAL
            and it.annotation not in THREAD_TAGS
            and it.annotation not in BLOCK_TAGS
        ]

    def partial_of(self, i: int) -> tuple[ir.Buffer, Expr]:
        """Stage i's per-thread accumulator tile (a local buffer) and the index of the current
        element in it; made on first use, with a one-element buffer for the AllReduce result."""
        inf, name = self.info[i], self.stages[i].name
        names = self.inner_spatial(i)
        if i not in self.extra_allocs:
            size = math.prod(inf.ext[n] for n in names)
            self.extra_allocs[i] = [
                ir.Buffer(self.unique_name(f"{name}_part"), (size,), inf.buffer.dtype, "local"),
                ir.Buffer(self.unique_name(f"{name}_red"), (1,), inf.buffer.dtype, "local"),
            ]
        idx: Expr = _c(0)
        for n in names:
            idx = BinOp("+", BinOp("*", idx, _c(inf.ext[n]), I32), self.var_of(i, n), I32)
        return self.extra_allocs[i][0], idx

    def cross_thread(self, i: int, k: int, tag: str, reduce_nest: ir.Stmt) -> ir.Stmt:
        """What replaces a reduction's init + loops at its first reduction iterator `k` when a
        reduction iterator is bound to `tag`: every thread sets its accumulator tile to the
        identity (out-of-range threads keep it: their part is neutral), runs the loops, then
        per element an AllReduce over `tag` combines the parts and the result is stored (by
        the thread whose `tag` index is 0 unless the buffer is per thread)."""
        inf, st = self.info[i], self.stages[i]
        part, pidx = self.partial_of(i)
        red = self.extra_allocs[i][1]
        body = inf.body
        init: ir.Stmt = ir.Store(part, pidx, body.identity)
        value = Load(part, (pidx,))
        finish: list[ir.Stmt] = [
            ir.AllReduce(body.reducer.name, value, None, red, _c(0), tag, self.block_extent[tag])
        ]
        conds = self.guards(i, spatial_only=True, skip_tag=tag)
        if inf.buffer.scope != "local":
            conds.append(BinOp("==", ir.THREAD_VARS[tag], _c(0), "bool"))
        idx = self.flat_index(i, [inf.value[a.name] for a in st.op.axis], relative=False)
        finish.append(_guarded(ir.Store(inf.buffer, idx, Load(red, (_c(0),))), conds))
        tile = [it for it in st.iters[k:] if it.kind == SPATIAL]
        init_nest, finish_nest = init, ir.seq(finish)
        for it in reversed(tile):
            init_nest = self.loop(i, it.name, init_nest)
            finish_nest = self.loop(i, it.name, finish_nest)
        return ir.seq([init_nest, reduce_nest, finish_nest])

    # ---- driver --------------------------------------------------------------------------------
    def subtree(self, i: int) -> list[int]:
        out = [i]
        for it in self.stages[i].iters:
            for j in self.attached.get((i, it.name), []):
                out.extend(self.subtree(j))
        return out

    def launch_dims(self, root: int) -> tuple[tuple[int, int, int], dict[str, int]]:
        grid = {"blockIdx.x": 1, "blockIdx.y": 1, "blockIdx.z": 1}
        block = {t: 1 for t in THREAD_TAGS}
        for j in self.subtree(root):
            for it in self.stages[j].iters:
                e = self.info[j].ext[it.name]
                if it.annotation in BLOCK_TAGS:
                    if j != root:
                        raise LoweringError(
                            f"stage {self.stages[j].name!r} binds {it.annotation} but is not a root stage"
                        )
                    grid[it.annotation] = e
                elif it.annotation in THREAD_TAGS:
                    block[it.annotation] = max(block[it.annotation], e)
        return (grid["blockIdx.x"], grid["blockIdx.y"], grid["blockIdx.z"]), block

    def run(self) -> ir.Program:
        self.resolve_bodies()
        self.build_attach_tree()
        order = self.topo_order()
        self.topo_index = {i: k for k, i in enumerate(order)}
        for key in self.attached:
            self.attached[key].sort(key=lambda j: self.topo_index[j])
        self.infer_bounds()
        params, outputs, temps = self.make_buffers()
        kernels = []
        for i in order:
            st = self.stages[i]
            if st.is_placeholder or st.compute_at != ROOT:
                continue
            grid, block = self.launch_dims(i)
            self.block_extent = block
            body = self.emit(i)
            bounds = self.kernel_bounds(i, grid, block)
            allocs = [self.info[j].buffer for j in self.subtree(i)[1:]]
            allocs += [b for j in self.subtree(i) for b in self.extra_allocs.get(j, [])]
            kernel = inject_virtual_threads(
                ir.Kernel(
                    f"default_function_kernel{len(kernels) or ''}",
                    grid,
                    (block["threadIdx.x"], block["threadIdx.y"], block["threadIdx.z"]),
                    [b for b in allocs if b.scope != "global"],
                    _simplify_stmt(body, bounds),
                )
            )
            if kernel.vthread > 1:  # fold the constants of the copies
                kernel.body = _simplify_stmt(kernel.body, bounds)
            kernel.body = unroll_register_indices(kernel.body)
            kernels.append(kernel)
        return ir.Program(kernels, params + temps, outputs, temps)

    def kernel_bounds(self, root: int, grid, block) -> dict[int, tuple[int, int]]:
        bounds = {}
        for tag, e in zip(("blockIdx.x", "blockIdx.y", "blockIdx.z"), grid):
            bounds[id(ir.THREAD_VARS[tag])] = (0, e - 1)
        for tag, e in block.items():
            bounds[id(ir.THREAD_VARS[tag])] = (0, e - 1)
        for j in self.subtree(root):
            for it in self.stages[j].iters:
                if it.annotation not in THREAD_TAGS and it.annotation not in BLOCK_TAGS:
                    v = self.var_of(j, it.name)
                    bounds[id(v)] = (0, self.info[j].ext[it.name] - 1)
        return bounds


# ---- helpers -------------------------------------------------------------------------------


def _guarded(stmt: ir.Stmt, conds: list[Expr]) -> ir.Stmt:
    """`stmt` under the conjunction of `conds` (each distinct condition once)."""
    conds = list({c._key: c for c in conds}.values())
    if not conds:
        return stmt
    cond = conds[0]
    for c in conds[1:]:
        cond = BinOp("&&", cond, c, "bool")
    return ir.IfThenElse(cond, stmt)


def _loads(e: Expr) -> list[Load]:
    return [n for n in walk(e) if isinstance(n, Load) and isinstance(n.buffer, Tensor)]


def _contains(e: Expr, var_ids: set[int]) -> bool:
    return any(id(v) in var_ids for v in free_vars(e))


def _interval(e: Expr, relaxed: dict[int, tuple[int, int]]) -> tuple[Expr, int] | None:
    """(lo, span) of `e` when the `relaxed` vars range over their bounds and all other vars
    are fixed; lo is an expression of the fixed vars. None when it cannot be bounded."""
    aff = to_affine(simplify(e), {})
    sym: dict = {}
    lo_num, hi_num = aff.const, aff.const
    for key, (c, atom) in aff.terms.items():
        if not _contains(atom, set(relaxed)):
            sym[key] = [c, atom]
            continue
        free = free_vars(atom)
        if all(id(v) in relaxed for v in free):
            alo, ahi = atom_bounds(atom, relaxed)
        elif isinstance(atom, BinOp) and atom.op == "floordiv" and isinstance(atom.b, Const):
            inner = _interval(atom.a, relaxed)
            if inner is None:
                return None
            k = atom.b.value
            sub = BinOp("floordiv", inner[0], atom.b, I32)
            sym[sub._key] = [c, sub]
            alo, ahi = 0, inner[1] // k + 1
        elif isinstance(atom, BinOp) and atom.op == "floormod" and isinstance(atom.b, Const):
            alo, ahi = 0, atom.b.value - 1
        else:
            return None
        if alo == -INF or ahi == INF:
            return None
        if c > 0:
            lo_num, hi_num = lo_num + c * alo, hi_num + c * ahi
        else:
            lo_num, hi_num = lo_num + c * ahi, hi_num + c * alo
    from autosched.lower.arith import Affine

    lo = simplify(Affine(sym, int(lo_num)).to_expr())
    return lo, int(hi_num - lo_num)


def _union(items: list[tuple[Expr, int] | None]) -> tuple[Expr, int] | None:
    if not items or any(x is None for x in items):
        return None
    lo0, span0 = items[0]
    lo_off, hi_off = 0, span0
    for lo, span in items[1:]:
        d = simplify(BinOp("-", lo, lo0, I32))
        if not isinstance(d, Const):
            return None
        lo_off = min(lo_off, d.value)
        hi_off = max(hi_off, d.value + span)
    lo = simplify(BinOp("+", lo0, _c(lo_off), I32)) if lo_off else lo0
    return lo, hi_off - lo_off


def _simplify_stmt(s: ir.Stmt, bounds) -> ir.Stmt:
    """Simplify expressions and drop guards that are always true (or whole always-false ones)."""
    if isinstance(s, ir.Seq):
        kids: list[ir.Stmt] = []
        for c in s.stmts:
            k = _simplify_stmt(c, bounds)
            if k is None or (
                isinstance(k, ir.Barrier) and kids and isinstance(kids[-1], ir.Barrier)
            ):
                continue  # drop empty statements and a barrier right after a barrier
            kids.append(k)
        return ir.seq(kids) if kids else None
    if isinstance(s, ir.For):
        body = _simplify_stmt(s.body, bounds)
        return ir.For(s.var, s.extent, s.kind, body) if body is not None else None
    if isinstance(s, ir.IfThenElse):
        c = _distinct_conjuncts(simplify(s.cond, bounds))
        if isinstance(c, Const):
            branch = s.then_case if c.value else s.else_case
            return _simplify_stmt(branch, bounds) if branch is not None else None
        then = _simplify_stmt(s.then_case, bounds)
        els = _simplify_stmt(s.else_case, bounds) if s.else_case is not None else None
        return ir.IfThenElse(c, then, els) if then is not None or els is not None else None
    return ir.map_exprs(s, lambda e: simplify(e, bounds))


def _distinct_conjuncts(cond: Expr) -> Expr:
    """`cond` with repeated `&&` terms dropped (guards that simplify to the same test)."""
    terms: list[Expr] = []
    todo = [cond]
    while todo:
        e = todo.pop()
        if isinstance(e, BinOp) and e.op == "&&":
            todo += [e.b, e.a]
        else:
            terms.append(e)
    unique = list({t._key: t for t in terms}.values())
    if len(unique) == len(terms):
        return cond
    out = unique[0]
    for t in unique[1:]:
        out = BinOp("&&", out, t, "bool")
    return out


def lower(state: State) -> ir.Program:
    """Lower a complete State to a Program of CUDA-shaped kernels."""
    return Lowerer(state).run()
