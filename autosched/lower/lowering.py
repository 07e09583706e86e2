"""Lowering: State -> loop-nest IR (ir.Program).

Passes, in order:
  1. resolve bodies      each stage's expression with cache redirects and inlined stages applied
  2. attach tree         which stages are computed inside which loop (and their loop context)
  3. bound inference     consumers first: the region each attached stage must compute per
                         iteration of its attach loop (shared stages relax threadIdx loops)
                         (bound_inference.py, on the intervals of intervals.py)
  4. leaf extents        iterator extents re-derived from the regions through split/fuse relations
                         (bound_inference.py)
  5. emission            loops, init + update of reductions, guards (guards.py), barriers around
                         shared stages
                         (or one per iteration: a double-buffered stage, double_buffer.py);
                         a reduction bound to threadIdx accumulates per thread, then AllReduces
                         (cross_thread.py); a nest annotated "tensorize" is one warp-collective
                         Tensor Core statement (tensorize.py, which plans fragments first)
  6. simplification      expressions simplified under the loop bounds, settled guards dropped
                         (stmt_simplify.py), around virtual-thread injection (vthread.py)
  7. unrolling           auto_unroll_max_step marks small loop nests `unroll`; after virtual-thread
                         injection every loop whose variable indexes a local array is unrolled
                         (unrolling.py)
One root stage becomes one kernel; kernels run in dataflow order. The result is the analysis
program; `device_passes.device_program` turns it into the program printed and run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from graphlib import TopologicalSorter

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.bound_inference import infer_bounds, root_value_map, tensor_loads
from autosched.lower.cross_thread import cross_thread_tag, emit_cross_thread, partial_of
from autosched.lower.double_buffer import emit_double_buffered, is_double_buffered, slot_shape
from autosched.lower.guards import guards, zero_fills
from autosched.lower.ir import BLOCK_TAGS, I32, LAUNCH_TAGS, THREAD_TAGS, int32
from autosched.lower.stmt_simplify import simplify_stmt
from autosched.lower.storage import storage_shape
from autosched.lower.tensorize import (
    emit_fill,
    emit_tensorized,
    plan_fragments,
    tensorize_position,
)
from autosched.lower.unrolling import auto_unroll, unroll_register_indices
from autosched.lower.verify import verify_program, verifying_every_lowering
from autosched.lower.vthread import inject_virtual_threads
from autosched.schedule.loop_state import State
from autosched.schedule.stage import ATTACHED, INLINED, ROOT, Stage
from autosched.te.expr import BinOp, Const, Expr, Load, Reduce, Select, Var
from autosched.te.tensor import ComputeOp, Tensor
from autosched.te.visitor import rewrite, substitute


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
    fused_limits: list = field(default_factory=list)  # (value, extent) of fused split parts
    buffer: ir.Buffer | None = None


class Lowerer:
    """Lowers one State. Use `lower(state)`. The passes in bound_inference.py and
    cross_thread.py are functions of a Lowerer: they read and fill its per-stage `info`."""

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
        self.block_extent: dict[str, int] = {}  # threadIdx tag -> extent, of the kernel emitted
        self.fragment_dims: dict[int, tuple[int, int]] = {}  # fragment stage: (row, col) dims
        self.mma_plans: dict = {}  # accumulator stage -> tensorize.MmaPlan

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
                        return substitute(inner, dict(zip(src.op.axis, idx, strict=True)))
                    return Load(src.produces.output(0), idx)
                return None

            memo[i] = rewrite(st.op.body, fix)
            return memo[i]

        for i, st in enumerate(self.stages):
            if isinstance(st.op, ComputeOp) and st.compute_at != INLINED:
                b = body(i)
                self.info[i].body = b
                for node in tensor_loads(b):
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
            if anns.intersection(THREAD_TAGS):
                scope = "local"
            else:
                scope = "shared" if anns.intersection(BLOCK_TAGS) else "global"
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
        if ann in LAUNCH_TAGS:
            return ir.THREAD_VARS[ann]
        key = (i, name)
        v = self.loop_vars.get(key)
        if v is None:
            v = self.loop_vars[key] = Var(f"{st.name.replace('.', '_')}_{name}", I32)
        return v

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
                shape = tuple(inf.region)
                if inf.scope == "shared":  # padded rows (storage.py); guards stay on the region
                    shape = slot_shape(self, i, storage_shape(shape, st.storage_align))
                # two slots: filled by asynchronous copies (double_buffer.py)
                slots = is_double_buffered(self, i)
                b = ir.Buffer(unique(st.name), shape, st.op.dtype, inf.scope, async_copy=slots)
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
        shape = inf.buffer.shape[len(inf.buffer.shape) - len(indices) :]  # past any slots
        flat: Expr | None = None
        for d, idx in enumerate(indices):
            if relative and inf.base:
                idx = BinOp("-", idx, inf.base[d], I32)
            flat = (
                idx
                if flat is None
                else BinOp("+", BinOp("*", flat, int32(shape[d]), I32), idx, I32)
            )
        return flat if flat is not None else int32(0)

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

    def store_stmt(self, i: int, init: bool, into: tuple[ir.Buffer, Expr] | None = None) -> ir.Stmt:
        """Stage i's innermost statement: its value (a reduction's init or update), guarded;
        `into` (buffer, index) redirects a reduction's accumulator (cross-thread partials)."""
        inf, st = self.info[i], self.stages[i]
        root_map = root_value_map(self, i)
        buffer, idx = into or (
            inf.buffer,
            self.flat_index(i, [inf.value[a.name] for a in st.op.axis], relative=False),
        )
        body = inf.body
        edges: list[Expr] | None = [] if zero_fills(self, i) else None
        conds = guards(self, i, spatial_only=init, edges=edges)
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
        if edges:  # past the tensor's edge: 0 (guards.zero_fills)
            value = Select(ir.conjunction(edges), value, Const(0, value.dtype))
        return ir.guarded(ir.Store(buffer, idx, value), conds)

    def loop(self, i: int, name: str, body: ir.Stmt) -> ir.Stmt:
        st = self.stages[i]
        it = st.iters[st.iter_index(name)]
        if it.annotation in LAUNCH_TAGS:
            return body
        ext = self.info[i].ext[name]
        var = self.var_of(i, name)
        if ext == 1:
            # No loop: kernel_bounds gives the variable the range [0, 0], so the one
            # simplification pass over the kernel folds it to 0 everywhere.
            return body
        return ir.For(var, ext, self.loop_kind(i, name), body)

    def loop_kind(self, i: int, name: str) -> str:
        """The IR loop kind of stage i's iterator `name` (not bound to a launch index)."""
        annotation = self.stages[i].iters[self.stages[i].iter_index(name)].annotation
        kinds = {"unroll": "unroll", "vectorize": "vectorize", "vthread": ir.VTHREAD_KIND}
        return kinds.get(annotation, "serial")

    def emit(self, i: int) -> ir.Stmt:
        st = self.stages[i]
        iters = st.iters
        is_reduce = isinstance(self.info[i].body, Reduce)
        first_reduce = next((k for k, it in enumerate(iters) if it.kind != "spatial"), len(iters))
        tag = cross_thread_tag(self, i)
        tz = tensorize_position(self, i)  # the tensorized nest: one warp statement
        if tz is not None and tag is not None:
            raise LoweringError(f"stage {st.name!r} is tensorized and reduced across threads")

        def init_nest(k: int) -> ir.Stmt:
            if tz is not None:
                body, outer = emit_fill(self, i, tz), iters[k:tz]
            else:
                body, outer = self.store_stmt(i, init=True), iters[k:]
            for it in reversed(outer):
                if it.kind == "spatial":
                    body = self.loop(i, it.name, body)
            return body

        def nest(k: int) -> ir.Stmt:
            if k == tz:
                inner = emit_tensorized(self, i, tz)
                return ir.seq([init_nest(k), inner]) if is_reduce and first_reduce >= k else inner
            if k == len(iters):
                inner = self.store_stmt(i, init=False, into=partial_of(self, i) if tag else None)
                return ir.seq([init_nest(k), inner]) if is_reduce and first_reduce == k else inner
            it = iters[k]
            attached = self.attached.get((i, it.name), [])
            fetched = [j for j in attached if is_double_buffered(self, j)]
            parts = [self.emit_attached(j) for j in attached if j not in fetched]
            if fetched:
                var, ext = self.var_of(i, it.name), self.info[i].ext[it.name]
                kind = self.loop_kind(i, it.name)
                loop = emit_double_buffered(self, var, ext, kind, fetched, parts, nest(k + 1))
            else:
                loop = self.loop(i, it.name, ir.seq(parts + [nest(k + 1)]))
            if is_reduce and k == first_reduce:
                if tag is not None:
                    return emit_cross_thread(self, i, k, tag, loop)
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

    # ---- driver --------------------------------------------------------------------------------
    def subtree(self, i: int) -> list[int]:
        out = [i]
        for it in self.stages[i].iters:
            for j in self.attached.get((i, it.name), []):
                out.extend(self.subtree(j))
        return out

    def launch_dims(self, root: int) -> tuple[tuple[int, int, int], dict[str, int]]:
        grid = dict.fromkeys(BLOCK_TAGS, 1)
        block = dict.fromkeys(THREAD_TAGS, 1)
        for j in self.subtree(root):
            for it in self.stages[j].iters:
                e = self.info[j].ext[it.name]
                if it.annotation in BLOCK_TAGS:
                    if j != root:
                        raise LoweringError(
                            f"stage {self.stages[j].name!r} binds {it.annotation} "
                            "but is not a root stage"
                        )
                    grid[it.annotation] = e
                elif it.annotation in THREAD_TAGS:
                    block[it.annotation] = max(block[it.annotation], e)
        return tuple(grid[tag] for tag in BLOCK_TAGS), block

    def run(self) -> ir.Program:
        self.resolve_bodies()
        self.build_attach_tree()
        order = self.topo_order()
        self.topo_index = {i: k for k, i in enumerate(order)}
        for key in self.attached:
            self.attached[key].sort(key=lambda j: self.topo_index[j])
        infer_bounds(self)
        params, outputs, temps = self.make_buffers()
        plan_fragments(self)
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
                    tuple(block[tag] for tag in THREAD_TAGS),
                    [b for b in allocs if b.scope != "global"],
                    simplify_stmt(body, bounds),
                )
            )
            if kernel.vthread > 1:  # fold the constants of the copies
                kernel.body = simplify_stmt(kernel.body, bounds)
            kernel.body = unroll_register_indices(kernel.body)
            kernels.append(kernel)
        return ir.Program(kernels, params + temps, outputs, temps)

    def kernel_bounds(self, root: int, grid, block) -> dict[int, tuple[int, int]]:
        bounds = {}
        for tag, e in zip(BLOCK_TAGS, grid, strict=True):
            bounds[id(ir.THREAD_VARS[tag])] = (0, e - 1)
        for tag, e in block.items():
            bounds[id(ir.THREAD_VARS[tag])] = (0, e - 1)
        for j in self.subtree(root):
            for it in self.stages[j].iters:
                if it.annotation not in LAUNCH_TAGS:
                    v = self.var_of(j, it.name)
                    bounds[id(v)] = (0, self.info[j].ext[it.name] - 1)
        return bounds


def lower(state: State, verify: bool | None = None) -> ir.Program:
    """Lower a complete State to a Program of CUDA-shaped kernels.

    This is the analysis program: indices keep the per-axis form bound inference gives them
    (the features read accesses per dimension from it). What is printed and run on a device
    comes from it through `device_passes.device_program`. `verify` runs the IR verifier (no
    launch limits) on the result; None verifies when `verify.verify_every_lowering` turned that
    on (tests do).
    """
    program = Lowerer(state).run()
    if verifying_every_lowering() if verify is None else verify:
        verify_program(program, launch_limits=False)
    return program
