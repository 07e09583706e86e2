"""Lock-step CPU execution of lowered programs (`autosched.lower.ir.Program`), for tests
without a GPU.

Every thread of every block of a kernel is one *lane*; a kernel's statements run once for all
lanes at once under an active-lane mask (thread and block indices are int vectors, `local`
buffers have a lane axis, `shared` buffers a block axis, `IfThenElse` narrows the mask, `For`
loops run in Python). Expressions are evaluated by `autosched.te.npeval`.

Lock-step execution hides missing barriers, so shared memory is checked for races: per element,
the threads that wrote or read it since the last `Barrier`; reading what another thread of the
block wrote, or overwriting (with a different value) what another thread read or wrote, raises
`InterpreterError`. So do out-of-bounds accesses by active lanes and barriers that only some
threads of a block reach. Untaken `Select` sides are not evaluated where their lanes are inactive,
so padded loads are legal. Freshly allocated `shared`/`local`/temporary buffers hold NaN (floats)
or a poison integer, so reading uninitialised memory shows in the results.

Warp-collective Tensor Core statements (`ir.WarpStmt`) and their per-warp fragment buffers are
run by `autosched.lower.interpret_warp`, the warpgroup statements (`lower/wgmma_ir.py`) and
their per-warpgroup accumulators by `autosched.lower.interpret_wgmma`; their handlers are
registered in the statement table. Thread-block clusters (`lower/cluster_ir.py`): the blocks of
a cluster run together like all others, and `autosched.lower.interpret_cluster` runs their
distributed-shared-memory reads and cluster barriers and flags a read or an overwrite that no
cluster barrier orders.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from autosched.errors import AutoschedError
from autosched.lower import ir
from autosched.lower.cluster_ir import uses_cluster
from autosched.lower.dispatch import TypeTable
from autosched.lower.interpret_cluster import register_cluster_handlers
from autosched.lower.interpret_hoist import Hoister, Let
from autosched.lower.interpret_roles import register_role_handlers
from autosched.lower.interpret_single_pass import register_single_pass_handlers
from autosched.lower.interpret_tma import register_tma_handlers
from autosched.lower.interpret_warp import fragment_storage, register_warp_handlers
from autosched.lower.interpret_wgmma import accumulator_storage, register_wgmma_handlers
from autosched.lower.tma_ir import uses_tma
from autosched.lower.wgmma_ir import uses_wgmma
from autosched.te.dtype import compute_dtype, numpy_dtype, to_storage
from autosched.te.expr import Expr, Load
from autosched.te.npeval import eval_expr
from autosched.te.reduce import BUILTIN_REDUCERS

POISON_INT = -(1 << 30) + 12345
REDUCE_UFUNC = {"sum": np.add, "max": np.maximum, "min": np.minimum}
AXIS_OF_TAG = {"threadIdx.x": 3, "threadIdx.y": 2, "threadIdx.z": 1}  # in (blocks, z, y, x)


class InterpreterError(AutoschedError, RuntimeError):
    """A lowered program did something that is undefined on a GPU (out-of-bounds access, race
    on shared memory, divergent barrier) or was given wrong arrays."""


def _poison(dtype: str) -> Any:
    """The stored value of fresh memory: NaN for floats (as its bit pattern for bfloat16)."""
    if dtype.startswith("float") or dtype == "bfloat16":
        return to_storage(np.float32(np.nan), dtype)[()]
    return False if dtype == "bool" else POISON_INT


@functools.lru_cache(maxsize=64)
def _launch(grid: tuple[int, int, int], block: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """Per-lane index vectors of a launch (read-only, cached): thread/block indices, the lane's
    block id and thread id within its block."""
    T = block[0] * block[1] * block[2]
    L = T * grid[0] * grid[1] * grid[2]
    lane = np.arange(L, dtype=np.int64)
    blk, tid = lane // T, lane % T
    out = {
        "lane": lane,
        "block": blk,
        "tid": tid,
        "threadIdx.x": tid % block[0],
        "threadIdx.y": tid // block[0] % block[1],
        "threadIdx.z": tid // (block[0] * block[1]),
        "blockIdx.x": blk % grid[0],
        "blockIdx.y": blk // grid[0] % grid[1],
        "blockIdx.z": blk // (grid[0] * grid[1]),
    }
    for a in out.values():
        a.flags.writeable = False
    return out


class _SharedTracker:
    """Which threads (ids within the block) wrote / read each element since the last barrier,
    as min and max thread id (-1 / large when none): 'only thread t' is min == max == t."""

    NONE_MIN = np.iinfo(np.int64).max

    def __init__(self, n: int) -> None:
        self.wmin = np.empty(n, np.int64)
        self.wmax = np.empty(n, np.int64)
        self.rmin = np.empty(n, np.int64)
        self.rmax = np.empty(n, np.int64)
        self.clear()

    def clear(self) -> None:
        self.wmin.fill(self.NONE_MIN)
        self.rmin.fill(self.NONE_MIN)
        self.wmax.fill(-1)
        self.rmax.fill(-1)

    @staticmethod
    def others(lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Elements touched by some thread other than `t`."""
        return (hi >= 0) & ~((lo == t) & (hi == t))


class _KernelRun:
    """Executes one kernel for all lanes; statements dispatch through `self.table`."""

    def __init__(
        self,
        kernel: ir.Kernel,
        globals_: dict[int, tuple[ir.Buffer, np.ndarray]],
        arrival_seed: int | None = 0,
    ):
        self.k = kernel
        self.ix = _launch(tuple(kernel.grid), tuple(kernel.block))
        self.L = len(self.ix["lane"])
        self.T = kernel.threads_per_block
        self.nblocks = self.L // self.T
        self.env: dict[int, Any] = {id(v): self.ix[tag] for tag, v in ir.THREAD_VARS.items()}
        self.bufs: dict[int, tuple[ir.Buffer, np.ndarray]] = dict(globals_)
        self.trackers: dict[int, _SharedTracker] = {}
        # cp.async groups (ir.AsyncGroupStmt): in a kernel that has them, a store into an
        # `async_copy` buffer is held back, in the open group, until a wait covers its group
        self.async_groups = any(
            isinstance(x, ir.AsyncGroupStmt) for x in ir.iter_stmts(kernel.body)
        )
        # a held-back store: (storage, keys, values, buffer, lanes)
        self.open_group: list[tuple[np.ndarray, np.ndarray, np.ndarray, ir.Buffer, Any]] = []
        self.committed: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, ir.Buffer, Any]]] = []
        for b in kernel.allocs:
            if b.fragment_flavour == ir.WGMMA_FLAVOUR:  # per warpgroup (see interpret_wgmma)
                self.bufs[id(b)] = (b, accumulator_storage(b, self.L))
                continue
            if b.scope in ir.FRAGMENT_SCOPES:  # per warp (see interpret_warp)
                self.bufs[id(b)] = (b, fragment_storage(b, -(-self.L // ir.WARP_SIZE)))
                continue
            rows = self.L if b.scope == "local" else self.nblocks
            self.bufs[id(b)] = (b, np.full((rows, b.size), _poison(b.dtype), numpy_dtype(b.dtype)))
            if b.scope == "shared":
                self.trackers[id(b)] = _SharedTracker(rows * b.size)
        # statement type -> handler(statement, lane mask)
        self.table: TypeTable[ir.Stmt, [Any], None] = TypeTable()
        self.table.register(ir.Seq, self._seq)
        self.table.register(ir.Store, self._store)
        self.table.register(ir.For, self._for)
        self.table.register(ir.IfThenElse, self._if)
        self.table.register(ir.Barrier, self._barrier)
        self.table.register(ir.AsyncCommit, self._commit)
        self.table.register(ir.AsyncWait, self._wait)
        self.table.register(ir.AllReduce, self._allreduce)
        self.table.register(Let, self._let)
        register_warp_handlers(self.table, self)
        # warpgroup statements (interpret_wgmma): told of every ordinary shared store, which a
        # wgmma may read only after the writer's fence.proxy.async
        wgmma = register_wgmma_handlers(self.table, self)
        self.wgmma = wgmma if uses_wgmma(kernel) else None
        # TMA and mbarrier statements (interpret_tma): told of barriers and shared reads
        tma = register_tma_handlers(self.table, self)
        self.tma = tma if uses_tma(kernel) else None
        # cluster statements (interpret_cluster): told of every shared store, which may race
        # with another block's cluster read
        self.cluster = register_cluster_handlers(self.table, self) if uses_cluster(kernel) else None
        # warp roles (interpret_roles): a role split runs its producer and consumers
        # interleaved, each under its own lanes, whose count the TMA statements expect
        self.roles = register_role_handlers(self.table, self)
        self.role_threads: int | None = None
        # single-pass statements (interpret_single_pass): blocks arrive in a seeded order, and
        # told of every global store and load, which may cross blocks only after the arrivals
        self.single_pass = register_single_pass_handlers(self.table, self, arrival_seed)

    # ---- helpers ---------------------------------------------------------------------------
    def where(self, lane: int) -> str:
        ix = self.ix
        b = tuple(int(ix[tag][lane]) for tag in ir.BLOCK_TAGS)
        t = tuple(int(ix[tag][lane]) for tag in ir.THREAD_TAGS)
        return f"blockIdx{b} threadIdx{t}"

    def eval(self, e: Expr, mask: Any) -> Any:
        return eval_expr(e, self.env, self._load, mask)

    def lanes_of(self, mask: Any) -> np.ndarray:
        return self.ix["lane"] if mask is None else self.ix["lane"][mask]

    def fail(self, message: str) -> None:
        raise InterpreterError(message)

    def bufs_of(self, buf: Any) -> tuple[ir.Buffer, np.ndarray]:
        """(buffer, storage) of a param or allocation of this kernel, fragments included."""
        got = self.bufs.get(id(buf))
        if got is None:
            name = getattr(buf, "name", buf)
            raise InterpreterError(
                f"kernel {self.k.name} accesses buffer {name!r}, which is neither a param nor "
                "one of its allocations"
            )
        return got

    def _buffer(self, buf: Any) -> tuple[ir.Buffer, np.ndarray]:
        """`bufs_of` for loads and stores, which never access a (per-warp) fragment."""
        got = self.bufs_of(buf)
        if got[0].scope in ir.FRAGMENT_SCOPES:
            raise InterpreterError(
                f"kernel {self.k.name} loads or stores fragment {got[0].name} element-wise; "
                "only warp statements access fragments"
            )
        return got

    def _check_bounds(self, buf: ir.Buffer, idx: np.ndarray, lanes: np.ndarray, what: str) -> None:
        if idx.size == 0 or (idx.min() >= 0 and idx.max() < buf.size):
            return
        bad = (idx < 0) | (idx >= buf.size)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise InterpreterError(
                f"out-of-bounds {what} of {buf.scope} buffer {buf.name}[{int(idx[j])}] (size "
                f"{buf.size}) by {self.where(int(lanes[j]))} in kernel {self.k.name}"
            )

    def _race(self, buf: ir.Buffer, key: int, lane: int, action: str, other: str) -> None:
        raise InterpreterError(
            f"race on shared buffer {buf.name}: {self.where(lane)} {action} element "
            f"[{key % buf.size}] that another thread of its block {other} since the last barrier "
            f"(missing __syncthreads?) in kernel {self.k.name}"
        )

    # ---- expressions -----------------------------------------------------------------------
    def _load(self, node: Load, indices: list, mask: Any) -> Any:
        buf, arr = self._buffer(node.buffer)
        if len(indices) != 1:
            raise InterpreterError(f"{node!r}: lowered loads take one flat index")
        idx = np.asarray(indices[0])
        if mask is not None:  # npeval may pass a scalar sub-mask (a Select on loop vars only)
            mask = np.broadcast_to(np.asarray(mask, dtype=bool), (self.L,))
        if idx.ndim == 0 and buf.scope != "shared":  # uniform index: no gather needed
            if not (0 <= idx < buf.size) and (mask is None or np.any(mask)):
                lane = 0 if mask is None else int(np.flatnonzero(mask)[0])
                self._check_bounds(buf, idx.reshape(1), np.array([lane]), "read")
            i = int(np.clip(idx, 0, buf.size - 1))
            if buf.scope == "global" and self.single_pass is not None:
                self.single_pass.read(buf, np.full(1, i), self.lanes_of(mask))
            return arr[i] if buf.scope == "global" else arr[:, i]
        idx = np.broadcast_to(idx, (self.L,))
        if mask is None:
            active, active_idx, safe = self.ix["lane"], idx, idx
        else:
            active = np.flatnonzero(mask)
            active_idx, safe = idx[active], np.where(mask, idx, 0)
        self._check_bounds(buf, active_idx, active, "read")
        if buf.scope == "global":
            if self.single_pass is not None:
                self.single_pass.read(buf, active_idx, active)
            return arr[safe]
        rows = self.ix["lane"] if buf.scope == "local" else self.ix["block"]
        if buf.scope == "shared":
            block_rows = rows if mask is None else rows[active]
            self._track_read(buf, block_rows * buf.size + active_idx, active)
        return arr[rows, safe]

    def _track_read(self, buf: ir.Buffer, keys: np.ndarray, lanes: np.ndarray) -> None:
        tr, t = self.trackers[id(buf)], self.ix["tid"][lanes]
        if self.tma is not None:
            self.tma.check_read(buf, keys, lanes)
        bad = tr.others(tr.wmin[keys], tr.wmax[keys], t)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            self._race(buf, int(keys[j]), int(lanes[j]), "reads", "wrote")
        np.minimum.at(tr.rmin, keys, t)
        np.maximum.at(tr.rmax, keys, t)

    # ---- statements ------------------------------------------------------------------------
    def run(self) -> None:
        self.stmt(Hoister().scoped(self.k.body, 0), None)
        if self.cluster is not None:
            self.cluster.finish()
        if self.tma is not None:
            self.tma.finish()

    def _let(self, s: Let, mask: Any) -> None:
        self.env[id(s.var)] = self.eval(s.value, None)

    def stmt(self, s: ir.Stmt, mask: Any) -> None:
        fn = self.table.handler(s)
        if fn is None:
            raise InterpreterError(f"cannot interpret a {type(s).__name__} statement")
        fn(s, mask)

    def _seq(self, s: ir.Seq, mask: Any) -> None:
        for c in s.stmts:
            self.stmt(c, mask)

    def _for(self, s: ir.For, mask: Any) -> None:
        key = id(s.var)
        for i in range(s.extent):
            self.env[key] = i
            self.stmt(s.body, mask)
        self.env.pop(key, None)

    def _if(self, s: ir.IfThenElse, mask: Any) -> None:
        if self.roles.split(s, mask):
            return
        cond = np.asarray(self.eval(s.cond, mask), dtype=bool)
        if cond.ndim == 0:
            branch = s.then_case if cond else s.else_case
            if branch is not None:
                self.stmt(branch, mask)
            return
        cond = np.broadcast_to(cond, (self.L,))
        then_mask = cond if mask is None else mask & cond
        if then_mask.any():
            self.stmt(s.then_case, then_mask)
        if s.else_case is not None:
            else_mask = ~cond if mask is None else mask & ~cond
            if else_mask.any():
                self.stmt(s.else_case, else_mask)

    def _uniform(self, mask: Any, what: str, threads: int | None = None) -> None:
        """Raise unless every block has all or none of its threads active (or, given
        `threads`, that many or none: the threads of a warp role)."""
        if mask is None:
            return
        threads = threads or self.T
        count = mask.reshape(self.nblocks, self.T).sum(axis=1)
        partial = np.flatnonzero((count > 0) & (count != threads))
        if partial.size:
            lane = int(partial[0]) * self.T
            raise InterpreterError(
                f"{what} reached by {int(count[partial[0]])} of {threads} threads of the "
                f"block of {self.where(lane)} in kernel {self.k.name} (divergent barrier)"
            )

    def _barrier(self, s: ir.Barrier, mask: Any) -> None:
        self._uniform(mask, "__syncthreads()")
        self.release()
        if self.tma is not None:
            self.tma.barrier()

    def release(self) -> None:
        """What a barrier orders: every access so far before every one after it."""
        for tr in self.trackers.values():
            tr.clear()
        if self.wgmma is not None:
            self.wgmma.barrier()

    def _commit(self, s: ir.AsyncCommit, mask: Any) -> None:
        self._uniform(mask, "cp.async.commit_group")
        self.committed.append(self.open_group)
        self.open_group = []

    def _wait(self, s: ir.AsyncWait, mask: Any) -> None:
        """The committed groups but the newest `s.pending` complete: their stores land."""
        self._uniform(mask, f"cp.async.wait_group {s.pending}")
        done = max(0, len(self.committed) - s.pending)
        for group in self.committed[:done]:
            for arr, keys, val, buf, lanes in group:
                arr.reshape(-1)[keys] = val
                if self.wgmma is not None:  # landed: now the writers' fences cover it
                    self.wgmma.shared_written(buf, keys, lanes)
        del self.committed[:done]

    def _store(self, s: ir.Store, mask: Any) -> None:
        idx = self.eval(s.index, mask)
        self._write(s.buffer, idx, self.eval(s.value, mask), mask, shared_owner=False)

    def _write(self, buffer: Any, idx: Any, val: Any, mask: Any, shared_owner: bool) -> None:
        buf, arr = self._buffer(buffer)
        val = to_storage(val, buf.dtype)  # rounds half values (bfloat16 to bit patterns)
        if mask is None and buf.scope == "local" and np.ndim(idx) == 0:
            if not 0 <= idx < buf.size:
                self._check_bounds(buf, np.reshape(idx, 1), np.zeros(1, int), "write")
            arr[:, int(idx)] = val
            return
        lanes = self.lanes_of(mask)
        idx = np.broadcast_to(np.asarray(idx), (self.L,))
        val = np.broadcast_to(np.asarray(val).astype(arr.dtype, copy=False), (self.L,))
        if mask is not None:
            idx, val = idx[mask], val[mask]
        self._check_bounds(buf, idx, lanes, "write")
        if buf.scope == "global":
            arr[idx] = val
            if self.single_pass is not None:
                self.single_pass.written(buf, idx, lanes)
        elif buf.scope == "local":
            arr[lanes, idx] = val
        else:
            keys = self.ix["block"][lanes] * buf.size + idx
            self._track_write(buf, arr, keys, val, lanes, shared_owner)
            if self.cluster is not None:
                self.cluster.shared_write(buf, arr, keys, val, lanes)
            if self.async_groups and buf.async_copy:
                self.open_group.append((arr, keys, np.array(val), buf, lanes))
                return
            arr.reshape(-1)[keys] = val
            if self.wgmma is not None:
                self.wgmma.shared_written(buf, keys, lanes)

    def _track_write(self, buf, arr, keys, val, lanes, shared_owner: bool) -> None:
        """Race checks of a shared-memory write. Writing the value an element already holds is
        harmless; `shared_owner` (AllReduce results) records no writer, since every thread of the
        group stores the same value itself."""
        tr, t = self.trackers[id(buf)], self.ix["tid"][lanes]
        if keys.size > 1:  # two threads writing different values in one statement
            order = np.argsort(keys, kind="stable")
            ks, ts, vs = keys[order], t[order], val[order]
            clash = (ks[1:] == ks[:-1]) & (ts[1:] != ts[:-1]) & (vs[1:] != vs[:-1])
            if clash.any():
                j = int(np.flatnonzero(clash)[0]) + 1
                self._race(buf, int(ks[j]), int(lanes[order][j]), "writes", "also writes")
        changed = arr.reshape(-1)[keys] != val
        if not changed.any():
            return
        keys, t, lanes = keys[changed], t[changed], lanes[changed]
        if self.wgmma is not None:  # what wgmmas may still read (a cp.async may land now)
            self.wgmma.check_overwrite(buf, keys, lanes)
        for lo, hi, other in ((tr.wmin, tr.wmax, "wrote"), (tr.rmin, tr.rmax, "read")):
            bad = tr.others(lo[keys], hi[keys], t)
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                self._race(buf, int(keys[j]), int(lanes[j]), "overwrites", other)
        if not shared_owner:
            np.minimum.at(tr.wmin, keys, t)
            np.maximum.at(tr.wmax, keys, t)

    def _allreduce(self, s: ir.AllReduce, mask: Any) -> None:
        self._uniform(mask, f"AllReduce over {s.thread_tag}")
        axis = AXIS_OF_TAG.get(s.thread_tag)
        if axis is None:
            raise InterpreterError(f"AllReduce over {s.thread_tag}: not a threadIdx tag")
        dtype = compute_dtype(s.buffer.dtype)
        live = mask
        if s.cond is not None:
            cond = np.broadcast_to(np.asarray(self.eval(s.cond, mask), dtype=bool), (self.L,))
            live = cond if mask is None else mask & cond
        val = np.broadcast_to(np.asarray(self.eval(s.value, live)).astype(dtype), (self.L,))
        if live is not None:
            ident = BUILTIN_REDUCERS[s.reducer].identity(s.buffer.dtype).value
            val = np.where(live, val, dtype.type(ident))
        bx, by, bz = self.k.block
        grid = val.reshape(self.nblocks, bz, by, bx)
        red = REDUCE_UFUNC[s.reducer].reduce(grid, axis=axis, keepdims=True, dtype=dtype)
        out = np.broadcast_to(red, grid.shape).reshape(self.L)
        self._write(s.buffer, self.eval(s.index, mask), out, mask, shared_owner=True)


def run_program(
    program: ir.Program, arrays: dict[str, np.ndarray], arrival_seed: int | None = 0
) -> None:
    """Run every kernel of `program` in order on the CPU, in place.

    `arrays` maps each param's name to a C-contiguous numpy array of its size and dtype; temps
    that are missing are allocated (NaN / poison; zeros for the program's workspaces) and added
    to `arrays`. Raises InterpreterError on undefined GPU behaviour (see the module
    docstring). `arrival_seed` orders the blocks of a single-pass kernel as they arrive
    (`interpret_single_pass.arrival_order`; None: block order).
    """
    temps = {id(b) for b in program.temps}
    zeroed = {id(b) for b in program.workspaces}
    globals_: dict[int, tuple[ir.Buffer, np.ndarray]] = {}
    for b in program.params:
        dtype = numpy_dtype(b.dtype)
        arr = arrays.get(b.name)
        if arr is None:
            if id(b) not in temps:
                raise InterpreterError(f"no array given for the param {b.name!r}")
            fill = 0 if id(b) in zeroed else _poison(b.dtype)
            arr = arrays[b.name] = np.full(b.shape, fill, dtype)
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.size != b.size:
            got = f"{getattr(arr, 'dtype', type(arr).__name__)} of size {getattr(arr, 'size', '?')}"
            raise InterpreterError(
                f"array {b.name!r}: expected {b.dtype} of size {b.size}, got {got}"
            )
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise InterpreterError(f"array {b.name!r} must be C-contiguous and writeable")
        globals_[id(b)] = (b, arr.reshape(-1))
    for kernel in program.kernels:
        _KernelRun(kernel, globals_, arrival_seed).run()


__all__ = ["InterpreterError", "run_program"]
