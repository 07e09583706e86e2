"""Structural checks of a lowered program (`autosched.lower.ir.Program`), on in tests.

`verify_program` raises `LoweringError` naming the kernel and the offending statement when a
program is not something the CUDA printer and the interpreter can run as intended: unbound
variables, buffers that are neither params nor the kernel's allocations, bad loop extents or
kinds, dtype mismatches, barriers (or AllReduces) under thread-dependent conditions, shared or
local buffers reused across kernels, launch sizes beyond the device's limits
(`measure.HardwareParams`), and the rules of the warp-collective Tensor Core statements
(docs/TENSOR_CORES.md; `_WarpRules`), of the warpgroup statements (`verify_wgmma.py`), of
thread-block clusters (`verify_cluster.py`) and of TMA copies and mbarriers (`verify_tma.py`).

`verify_every_lowering(True)` makes `lower` and `device_program` verify every program they
return, without the launch limits (the tests turn it on for the whole session).
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower.arith import expr_bounds, is_multiple
from autosched.lower.dispatch import TypeTable
from autosched.lower.narrow_tile import narrowed
from autosched.lower.shared_alias import overlay_problem
from autosched.lower.verify_cluster import (
    ClusterRules,
    check_cluster_barriers,
    check_cluster_launch,
    check_cluster_order,
)
from autosched.lower.verify_roles import RoleRules
from autosched.lower.verify_single_pass import SinglePassRules, check_single_pass
from autosched.lower.verify_streaming import streaming_problems
from autosched.lower.verify_tma import TmaRules
from autosched.lower.verify_wgmma import WarpgroupRules
from autosched.lower.verify_wgmma_order import check_async_reads
from autosched.lower.wgmma_ir import WARPGROUP_STMTS, ProxyFence
from autosched.te.dtype import BYTES, DTYPES, is_int
from autosched.te.expr import Expr, Load, Var
from autosched.te.expr_text import expr_str
from autosched.te.visitor import free_vars, walk
from measure import HardwareParams

REDUCERS = ("sum", "max", "min")
# fragment scope -> the dtypes its buffers may have
FRAGMENT_DTYPES = {
    "wmma.matrix_a": tuple(sorted(ir.WMMA_K)),  # float32: TF32
    "wmma.matrix_b": tuple(sorted(ir.WMMA_K)),
    "wmma.accumulator": ("float32",),
}
_IDENT = re.compile(r"^[A-Za-z_]\w*$")

# Whether `lower` and `device_program` verify what they return when not told either way.
_every_lowering = {"enabled": False}


def verify_every_lowering(enabled: bool) -> bool:
    """Make every `lower` / `device_program` call verify its program (or stop); returns the
    previous setting, so a caller can restore it."""
    previous = _every_lowering["enabled"]
    _every_lowering["enabled"] = bool(enabled)
    return previous


def verifying_every_lowering() -> bool:
    """Whether `verify_every_lowering` is on."""
    return _every_lowering["enabled"]


def check(cond: Any, message: str) -> None:
    """Raise LoweringError(message) unless `cond`."""
    if not cond:
        raise LoweringError(message)


class _KernelVerifier:
    """Walks one kernel's statements with the set of variables bound at each point."""

    def __init__(self, kernel: ir.Kernel, params: list[ir.Buffer]) -> None:
        self.k = kernel
        self.buffers = {id(b) for b in params} | {id(b) for b in kernel.allocs}
        self.bound: set[int] = {id(v) for v in ir.THREAD_VARS.values()}
        launch = zip(ir.LAUNCH_TAGS, (*kernel.grid, *kernel.block), strict=True)
        self.ranges = {id(ir.THREAD_VARS[tag]): (0, n - 1) for tag, n in launch}
        self.lane_guard: str | None = None  # the innermost condition that uses threadIdx.x
        self.vector_loop: str | None = None  # the enclosing vectorize loop's variable
        self.loaded: set[int] = set()  # ids of the buffers the kernel's expressions load
        self.warp = _WarpRules(self)
        # statement type -> check(statement, divergent condition)
        self.table: TypeTable[ir.Stmt, [str | None], None] = TypeTable()
        self.table.register(ir.Seq, self._seq)
        self.table.register(ir.Store, self._store)
        self.table.register(ir.For, self._for)
        self.table.register(ir.IfThenElse, self._if)
        self.table.register(ir.Barrier, self._barrier)
        self.table.register(ir.AsyncCommit, self._async_group)
        self.table.register(ir.AsyncWait, self._async_group)
        self.table.register(ir.AllReduce, self._allreduce)
        for warp_stmt in ir.WARP_STMTS:
            self.table.register(warp_stmt, self.warp.check)
        warpgroup = WarpgroupRules(self)
        for stmt_type in (*WARPGROUP_STMTS, ProxyFence):
            self.table.register(stmt_type, warpgroup.check)
        ClusterRules(self).register(self.table)
        self.roles = RoleRules(self)
        self.roles.register(self.table)
        TmaRules(self).register(self.table)
        SinglePassRules(self).register(self.table)

    def fail(self, what: str) -> NoReturn:
        raise LoweringError(f"kernel {self.k.name}: {what}")

    def expr(self, e: Expr, where: str, want: str | None = None) -> None:
        if not isinstance(e, Expr):
            self.fail(f"{where}: {e!r} is not an expression")
        if want == "int" and not is_int(e.dtype):
            self.fail(f"{where}: index {expr_str(e)} has dtype {e.dtype}, not an integer")
        if want == "bool" and e.dtype != "bool":
            self.fail(f"{where}: condition {expr_str(e)} has dtype {e.dtype}, not bool")
        for v in free_vars(e):
            if id(v) not in self.bound:
                self.fail(
                    f"{where}: variable {v.name!r} is not bound (no enclosing loop) "
                    f"in {expr_str(e)}"
                )
        for node in walk(e):
            if isinstance(node, Load):
                self.buffer(node.buffer, where)
                self.loaded.add(id(node.buffer))
                if len(node.indices) != 1:
                    self.fail(
                        f"{where}: load {expr_str(node)} has {len(node.indices)} indices, "
                        "not one flat index"
                    )
                self.expr(node.indices[0], where, "int")

    def tile_number(self, frag: Any, tile: Expr, where: str) -> None:
        """`tile`, a tile of fragment `frag`, is an int expression within its tiles over the
        loop extents (warp and warpgroup statements alike)."""
        self.expr(tile, where, "int")
        tiles = frag.size // ir.tile_elems(frag)
        lo, hi = expr_bounds(tile, self.ranges)
        if lo < 0 or hi >= tiles:
            self.fail(
                f"{where}: tile number {expr_str(tile)} of {frag.name} ranges over {lo}..{hi}, "
                f"beyond its {tiles} tiles"
            )

    def buffer(self, b: Any, where: str, fragment: bool = False) -> None:
        """`b` is a param or allocation of the kernel; a fragment only where `fragment`."""
        if not isinstance(b, ir.Buffer):
            self.fail(
                f"{where}: {getattr(b, 'name', b)!r} is a {type(b).__name__}, not an ir.Buffer"
            )
        if id(b) not in self.buffers:
            self.fail(f"{where}: buffer {b.name!r} is neither a param nor allocated by this kernel")
        if not fragment and b.scope in ir.FRAGMENT_SCOPES:
            self.fail(f"{where}: fragment {b.name} is accessed element-wise (only warp statements)")

    def stmt(self, s: ir.Stmt, divergent: str | None) -> None:
        fn = self.table.handler(s)
        if fn is None:
            self.fail(f"unknown statement {type(s).__name__}")
        fn(s, divergent)

    def _seq(self, s: ir.Seq, divergent: str | None) -> None:
        for c in s.stmts:
            self.stmt(c, divergent)

    def _store(self, s: ir.Store, divergent: str | None) -> None:
        where = f"store to {getattr(s.buffer, 'name', s.buffer)}"
        self.buffer(s.buffer, where)
        self.expr(s.index, where, "int")
        self.expr(s.value, where)
        if s.value.dtype != s.buffer.dtype:
            self.fail(
                f"{where}: value {expr_str(s.value)} is {s.value.dtype} "
                f"but the buffer is {s.buffer.dtype}"
            )

    def _for(self, s: ir.For, divergent: str | None) -> None:
        where = f"loop {getattr(s.var, 'name', s.var)}"
        if not isinstance(s.var, Var) or not is_int(s.var.dtype):
            self.fail(f"{where}: the loop variable must be an integer Var")
        if id(s.var) in self.bound:
            self.fail(
                f"{where}: variable already bound (by an enclosing loop or as a thread index)"
            )
        if not isinstance(s.extent, int) or isinstance(s.extent, bool) or s.extent <= 0:
            self.fail(f"{where}: extent {s.extent!r} is not a positive int")
        if s.kind not in ir.LOOP_KINDS:
            self.fail(f"{where}: unknown loop kind {s.kind!r} (expected one of {ir.LOOP_KINDS})")
        self.bound.add(id(s.var))
        self.ranges[id(s.var)] = (0, s.extent - 1)
        outer_vector = self.vector_loop
        if s.kind == "vectorize":
            self.vector_loop = s.var.name
        self.stmt(s.body, divergent)
        self.vector_loop = outer_vector
        self.bound.discard(id(s.var))

    def _if(self, s: ir.IfThenElse, divergent: str | None) -> None:
        self.expr(s.cond, "if", "bool")
        if self.roles.split(s, divergent):
            return
        if divergent is None and any(id(v) in self._varying for v in free_vars(s.cond)):
            divergent = expr_str(s.cond)
        outer_guard = self.lane_guard
        if any(v is ir.THREAD_VARS["threadIdx.x"] for v in free_vars(s.cond)):
            self.lane_guard = expr_str(s.cond)
        self.stmt(s.then_case, divergent)
        if s.else_case is not None:
            self.stmt(s.else_case, divergent)
        self.lane_guard = outer_guard

    @property
    def _varying(self) -> set[int]:
        """Thread indices that differ between threads of a block (launched extent > 1)."""
        launched = zip(ir.THREAD_TAGS, self.k.block, strict=True)
        return {id(ir.THREAD_VARS[tag]) for tag, n in launched if n > 1}

    def _barrier(self, s: ir.Barrier, divergent: str | None) -> None:
        divergent = self.roles.whole_block(divergent)
        if divergent is not None:
            self.fail(
                f"__syncthreads() under the thread-dependent condition {divergent} "
                "(divergent barrier)"
            )

    def _async_group(self, s: ir.AsyncGroupStmt, divergent: str | None) -> None:
        """cp.async group statements: reached by every thread, as a barrier (the interpreter
        counts groups per block), and a wait's count of pending groups a small constant."""
        what = type(s).__name__
        divergent = self.roles.whole_block(divergent)
        if divergent is not None:
            self.fail(f"{what} under the thread-dependent condition {divergent}")
        if isinstance(s, ir.AsyncWait) and not (isinstance(s.pending, int) and 0 <= s.pending < 8):
            self.fail(f"AsyncWait({s.pending!r}): the pending groups must be an int in 0..7")

    def _allreduce(self, s: ir.AllReduce, divergent: str | None) -> None:
        where = f"allreduce into {getattr(s.buffer, 'name', s.buffer)}"
        divergent = self.roles.whole_block(divergent)
        if divergent is not None:
            self.fail(
                f"{where} under the thread-dependent condition {divergent}; "
                "every thread must reach it"
            )
        check(
            s.reducer in REDUCERS, f"kernel {self.k.name}: {where}: unknown reducer {s.reducer!r}"
        )
        if s.thread_tag not in ir.THREAD_TAGS:
            self.fail(f"{where}: {s.thread_tag!r} is not a threadIdx tag")
        axis = ir.THREAD_TAGS.index(s.thread_tag)
        if s.extent != self.k.block[axis]:
            self.fail(
                f"{where}: extent {s.extent} differs from the launched "
                f"{s.thread_tag} = {self.k.block[axis]}"
            )
        self.buffer(s.buffer, where)
        self.expr(s.index, where, "int")
        self.expr(s.value, where)
        if s.cond is not None:
            self.expr(s.cond, where, "bool")
        if s.value.dtype != s.buffer.dtype:
            self.fail(f"{where}: value is {s.value.dtype} but the buffer is {s.buffer.dtype}")


class _WarpRules:
    """The rules of warp statements (docs/TENSOR_CORES.md), checked within a _KernelVerifier:
    blockDim.x == 32; no threadIdx.x in their expressions and no guard that uses it (all 32
    lanes of a warp run them, with the same arguments); not in a vectorize loop; operand
    scopes and dtypes; tile numbers provably in range (over the loops' ranges); memory tiles in
    global or shared memory with a known layout, `ldm` a multiple of 16 bytes and `offset`
    provably a multiple of 32 bytes; one layout per matrix_a / matrix_b buffer; one wmma
    shape (K) per accumulator buffer, over the multiply-accumulates that use it.

    Fragments of the "mma" flavour (`ir.Buffer.fragment_flavour`): the fragments of a statement
    are of one flavour; a load reads shared memory only
    (ldmatrix), and a memory tile's offset is provably a multiple of 16 bytes (with `ldm` a
    multiple of 16 bytes, every ldmatrix row address is then 16-byte aligned)."""

    def __init__(self, kv: _KernelVerifier) -> None:
        self.kv = kv
        self.layouts: dict[int, str] = {}  # id(fragment) -> the layout it is loaded with
        self.acc_k: dict[int, int] = {}  # id(accumulator) -> the K of its multiply-accumulates

    def check(self, s: ir.WarpStmt, divergent: str | None) -> None:
        kv, lane = self.kv, ir.THREAD_VARS["threadIdx.x"]
        where = s.describe()
        if kv.k.block[0] != ir.WARP_SIZE:
            kv.fail(f"{where}: a kernel with warp statements needs blockDim.x == {ir.WARP_SIZE}")
        if kv.lane_guard is not None:
            kv.fail(f"{where} under the lane-dependent condition {kv.lane_guard} (divergent warp)")
        if kv.vector_loop is not None:
            kv.fail(f"{where} inside the vectorize loop {kv.vector_loop}")
        for e in s.exprs():
            kv.expr(e, where)
            if any(v is lane for v in free_vars(e)):
                kv.fail(f"{where}: {expr_str(e)} uses threadIdx.x (the lanes must agree)")
        for frag, tile, scopes in s.fragments():
            self.fragment(frag, tile, scopes, where)
        self.flavour(s, where)
        if s.MEMORY_TILE is not None:
            self.memory_tile(s, s.memory_tile(), where)
        if isinstance(s, ir.FragmentFill) and s.value.dtype != "float32":
            kv.fail(f"{where}: the fill value is {s.value.dtype}, not float32")
        if isinstance(s, ir.FragmentMma):
            self.mma_shape(s, where)

    def flavour(self, s: ir.WarpStmt, where: str) -> None:
        """One instruction family for the statement's fragments (every fragment dtype has an
        mma shape: `mma_layout.SHAPES`)."""
        flavours = {frag.fragment_flavour for frag, _, _ in s.fragments()}
        if len(flavours) != 1:
            self.kv.fail(f"{where}: fragments of the flavours {sorted(flavours)} in one statement")

    def mma_shape(self, s: ir.FragmentMma, where: str) -> None:
        """Operands of one dtype; the accumulator used with one K throughout the kernel (its
        declaration names the shape)."""
        if s.a.dtype != s.b.dtype:
            self.kv.fail(f"{where}: matrix_a is {s.a.dtype} but matrix_b is {s.b.dtype}")
        k = ir.operand_k(s.a.dtype)
        first = self.acc_k.setdefault(id(s.acc), k)
        if first != k:
            self.kv.fail(f"{where}: {s.acc.name} is used with K = {k} here and {first} elsewhere")

    def fragment(self, frag: Any, tile: Expr, scopes: tuple[str, ...], where: str) -> None:
        kv = self.kv
        kv.buffer(frag, where, fragment=True)
        if frag.scope not in scopes:
            kv.fail(f"{where}: {frag.name} has scope {frag.scope}, expected one of {scopes}")
        kv.tile_number(frag, tile, where)

    def memory_tile(self, s: ir.WarpStmt, m: Any, where: str) -> None:
        kv = self.kv
        if not isinstance(m, ir.MatrixTile):
            kv.fail(f"{where}: {m!r} is not an ir.MatrixTile")
        kv.buffer(m.buffer, where)
        b, frag = m.buffer, s.fragments()[0][0]
        flavour = s.flavour()
        scopes = ir.MEMORY_TILE_SCOPES if s.writes_memory() else ir.LOAD_TILE_SCOPES[flavour]
        if b.scope not in scopes:
            kv.fail(f"{where}: {flavour} tile of {b.name} in {b.scope} memory ({scopes} only)")
        if m.layout not in ir.MATRIX_LAYOUTS:
            kv.fail(f"{where}: layout {m.layout!r} is not one of {ir.MATRIX_LAYOUTS}")
        kv.expr(m.offset, where, "int")
        eb = BYTES[b.dtype]
        if not isinstance(m.ldm, int) or m.ldm <= 0 or m.ldm * eb % ir.LDM_ALIGN_BYTES:
            kv.fail(
                f"{where}: ldm {m.ldm!r} of {b.name} is not a multiple of "
                f"{ir.LDM_ALIGN_BYTES} bytes"
            )
        align = ir.TILE_OFFSET_ALIGN_BYTES[flavour]
        step = align // eb
        if not is_multiple(m.offset, step, kv.ranges):
            kv.fail(
                f"{where}: offset {expr_str(m.offset)} into {b.name} is not provably a "
                f"multiple of {align} bytes ({step} elements)"
            )
        narrow = flavour == "mma" and narrowed(b)  # rounded to 16 bits as stored
        if s.writes_memory() and b.dtype != "float32" and not narrow:
            kv.fail(f"{where}: stores the float32 accumulator into {b.dtype} {b.name}")
        if not s.writes_memory():
            if b.dtype != frag.dtype:
                kv.fail(f"{where}: loads {b.dtype} {b.name} into {frag.dtype} {frag.name}")
            first = self.layouts.setdefault(id(frag), m.layout)
            if first != m.layout:
                kv.fail(f"{where}: {frag.name} is loaded {m.layout} here and {first} elsewhere")


def _check_fragment(b: ir.Buffer, owner: str) -> None:
    """A fragment allocation's dtype and size (whole tiles of its shape, `ir.tile_shape`)."""
    dtypes = FRAGMENT_DTYPES[b.scope]
    wgmma_accumulator = b.scope == ir.ACCUMULATOR_SCOPE and b.fragment_flavour == ir.WGMMA_FLAVOUR
    check(
        b.fragment_flavour in ir.FRAGMENT_FLAVOURS or wgmma_accumulator,
        f"{owner}: fragment {b.name} has flavour {b.fragment_flavour!r}, not one of "
        f"{ir.FRAGMENT_FLAVOURS} (or {ir.WGMMA_FLAVOUR!r} for an accumulator)",
    )
    check(b.dtype in dtypes, f"{owner}: {b.scope} {b.name} is {b.dtype}, not one of {dtypes}")
    elems = ir.tile_elems(b)
    check(
        b.size % elems == 0,
        f"{owner}: fragment {b.name} has {b.size} elements, not a multiple of {elems}",
    )


def _check_launch(k: ir.Kernel, hardware: HardwareParams | None) -> None:
    """The kernel's name and launch shape, and its sizes within `hardware`'s limits if given."""
    check(_IDENT.match(k.name or ""), f"kernel name {k.name!r} is not a C identifier")
    for what, dims in (("grid", k.grid), ("block", k.block)):
        check(
            len(dims) == 3 and all(isinstance(d, int) and d > 0 for d in dims),
            f"kernel {k.name}: {what} {tuple(dims)} must be 3 positive ints",
        )
    check_cluster_launch(k, check)
    if hardware is None:
        return
    limits = (("grid", k.grid, hardware.max_grid_dims), ("block", k.block, hardware.max_block_dims))
    for what, dims, most in limits:
        check(
            all(d <= m for d, m in zip(dims, most, strict=True)),
            f"kernel {k.name}: {what} {tuple(dims)} is beyond the limits {most}",
        )
    most_threads = hardware.max_threads_per_block
    check(
        k.threads_per_block <= most_threads,
        f"kernel {k.name}: {k.threads_per_block} threads per block > {most_threads}",
    )


def _check_buffer(b: Any, scopes: tuple[str, ...], owner: str) -> None:
    check(isinstance(b, ir.Buffer), f"{owner}: {b!r} is not an ir.Buffer")
    check(b.scope in scopes, f"{owner}: buffer {b.name} has scope {b.scope!r}, expected {scopes}")
    check(b.dtype in DTYPES, f"{owner}: buffer {b.name} has unknown dtype {b.dtype!r}")
    check(_IDENT.match(b.name or ""), f"{owner}: buffer name {b.name!r} is not a C identifier")
    check(
        all(isinstance(d, int) and d > 0 for d in b.shape),
        f"{owner}: buffer {b.name} has shape {b.shape}",
    )


def verify_program(
    program: ir.Program, hardware: HardwareParams | None = None, launch_limits: bool = True
) -> None:
    """Check `program`'s structure and, with `launch_limits`, its launch sizes against
    `hardware` (default: HardwareParams()); raise LoweringError naming the first problem.

    `lower` and `device_program` verify without launch limits: a well-formed program too large
    for the device is an invalid candidate, which `sketch.validity` rejects with its own reason.
    """
    limits = (hardware or HardwareParams()) if launch_limits else None
    names: set[str] = set()
    for b in program.params:
        _check_buffer(b, ("global",), "params")
        check(b.name not in names, f"params: two buffers are named {b.name!r}")
        names.add(b.name)
    param_ids = {id(b) for b in program.params}
    for what, bufs in (
        ("outputs", program.outputs),
        ("temps", program.temps),
        ("workspaces", program.workspaces),
    ):
        for b in bufs:
            check(id(b) in param_ids, f"{what}: buffer {getattr(b, 'name', b)!r} is not a param")
    check(program.kernels, "the program has no kernels")
    owner: dict[int, str] = {}
    kernel_names: set[str] = set()
    for k in program.kernels:
        _check_launch(k, limits)
        check(k.name not in kernel_names, f"two kernels are named {k.name!r}")
        kernel_names.add(k.name)
        local_names = set(names)
        for b in k.allocs:
            _check_buffer(b, ("shared", "local", *ir.FRAGMENT_SCOPES), f"kernel {k.name}")
            if b.scope in ir.FRAGMENT_SCOPES:
                _check_fragment(b, f"kernel {k.name}")
            check(
                b.name not in local_names, f"kernel {k.name}: buffer name {b.name!r} is used twice"
            )
            local_names.add(b.name)
            check(
                id(b) not in owner,
                f"kernel {k.name}: buffer {b.name} is also allocated by kernel {owner.get(id(b))}",
            )
            owner[id(b)] = k.name
        verifier = _KernelVerifier(k, program.params)
        verifier.stmt(k.body, None)
        problems = streaming_problems(k, program.params, verifier.loaded)
        check(not problems, "; ".join(problems))
        check_cluster_order(k, verifier.fail)
        check_cluster_barriers(k, verifier.fail)
        check_async_reads(k)
        _check_shared_aliases(k)
        check_single_pass(k, program.workspaces, verifier.fail)


def _check_shared_aliases(k: ir.Kernel) -> None:
    """Each alias lays a shared allocation of the kernel over others, no buffer in two places,
    and `shared_alias.overlay_problem` proves their live ranges apart."""
    shared = {id(b) for b in k.allocs if b.scope == "shared"}
    seen: set[int] = set()
    for alias in k.shared_aliases:
        members = (alias.tile, *alias.hosts)
        check(alias.hosts, f"kernel {k.name}: {alias.tile.name} is laid over no buffer")
        for b in members:
            check(id(b) in shared, f"kernel {k.name}: alias of {b.name}, no shared allocation")
            check(id(b) not in seen, f"kernel {k.name}: {b.name} is in two shared aliases")
            seen.add(id(b))
        problem = overlay_problem(k, alias)
        check(problem is None, f"kernel {k.name}: {alias.tile.name} may not alias: {problem}")


__all__ = ["check", "verify_every_lowering", "verify_program", "verifying_every_lowering"]
