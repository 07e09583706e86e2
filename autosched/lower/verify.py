"""Structural checks of a lowered program (`autosched.lower.ir.Program`), on in tests.

`verify_program` raises `LoweringError` naming the kernel and the offending statement when a
program is not something the CUDA printer and the interpreter can run as intended: unbound
variables, buffers that are neither params nor the kernel's allocations, bad loop extents or
kinds, dtype mismatches, barriers (or AllReduces) under thread-dependent conditions, shared or
local buffers reused across kernels, launch sizes beyond the device's limits
(`measure.HardwareParams`).

`verify_every_lowering(True)` makes `lower` and `device_program` verify every program they
return, without the launch limits (the tests turn it on for the whole session).
"""

from __future__ import annotations

import re
from typing import Any

from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.te.dtype import DTYPES, is_int
from autosched.te.expr import Expr, Load, Var, expr_str
from autosched.te.visitor import free_vars, walk
from measure import HardwareParams

REDUCERS = ("sum", "max", "min")
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
        self.table = {
            ir.Seq: self._seq,
            ir.Store: self._store,
            ir.For: self._for,
            ir.IfThenElse: self._if,
            ir.Barrier: self._barrier,
            ir.AllReduce: self._allreduce,
        }

    def fail(self, what: str) -> None:
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
                if len(node.indices) != 1:
                    self.fail(
                        f"{where}: load {expr_str(node)} has {len(node.indices)} indices, "
                        "not one flat index"
                    )
                self.expr(node.indices[0], where, "int")

    def buffer(self, b: Any, where: str) -> None:
        if not isinstance(b, ir.Buffer):
            self.fail(
                f"{where}: {getattr(b, 'name', b)!r} is a {type(b).__name__}, not an ir.Buffer"
            )
        if id(b) not in self.buffers:
            self.fail(f"{where}: buffer {b.name!r} is neither a param nor allocated by this kernel")

    def stmt(self, s: ir.Stmt, divergent: str | None) -> None:
        fn = self.table.get(type(s))
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
        self.stmt(s.body, divergent)
        self.bound.discard(id(s.var))

    def _if(self, s: ir.IfThenElse, divergent: str | None) -> None:
        self.expr(s.cond, "if", "bool")
        if divergent is None and any(id(v) in self._varying for v in free_vars(s.cond)):
            divergent = expr_str(s.cond)
        self.stmt(s.then_case, divergent)
        if s.else_case is not None:
            self.stmt(s.else_case, divergent)

    @property
    def _varying(self) -> set[int]:
        """Thread indices that differ between threads of a block (launched extent > 1)."""
        launched = zip(ir.THREAD_TAGS, self.k.block, strict=True)
        return {id(ir.THREAD_VARS[tag]) for tag, n in launched if n > 1}

    def _barrier(self, s: ir.Barrier, divergent: str | None) -> None:
        if divergent is not None:
            self.fail(
                f"__syncthreads() under the thread-dependent condition {divergent} "
                "(divergent barrier)"
            )

    def _allreduce(self, s: ir.AllReduce, divergent: str | None) -> None:
        where = f"allreduce into {getattr(s.buffer, 'name', s.buffer)}"
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


def _check_launch(k: ir.Kernel, hardware: HardwareParams | None) -> None:
    """The kernel's name and launch shape, and its sizes within `hardware`'s limits if given."""
    check(_IDENT.match(k.name or ""), f"kernel name {k.name!r} is not a C identifier")
    for what, dims in (("grid", k.grid), ("block", k.block)):
        check(
            len(dims) == 3 and all(isinstance(d, int) and d > 0 for d in dims),
            f"kernel {k.name}: {what} {tuple(dims)} must be 3 positive ints",
        )
    if hardware is None:
        return
    limits = (("grid", k.grid, hardware.max_grid_dims), ("block", k.block, hardware.max_block_dims))
    for what, dims, most in limits:
        check(
            all(d <= m for d, m in zip(dims, most, strict=True)),
            f"kernel {k.name}: {what} {tuple(dims)} is beyond the limits {most}",
        )
    most = hardware.max_threads_per_block
    check(
        k.threads_per_block <= most,
        f"kernel {k.name}: {k.threads_per_block} threads per block > {most}",
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
    for what, bufs in (("outputs", program.outputs), ("temps", program.temps)):
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
            _check_buffer(b, ("shared", "local"), f"kernel {k.name}")
            check(
                b.name not in local_names, f"kernel {k.name}: buffer name {b.name!r} is used twice"
            )
            local_names.add(b.name)
            check(
                id(b) not in owner,
                f"kernel {k.name}: buffer {b.name} is also allocated by kernel {owner.get(id(b))}",
            )
            owner[id(b)] = k.name
        _KernelVerifier(k, program.params).stmt(k.body, None)


__all__ = ["check", "verify_every_lowering", "verify_program", "verifying_every_lowering"]
