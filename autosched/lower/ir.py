"""The lowered loop-nest IR: what lowering produces, the CUDA printer prints and the CPU
interpreter runs.

Expressions are te expression nodes (`autosched.te.expr`); a `Load` in the IR reads a `Buffer`
at ONE flat index (lowering flattens multi-dimensional indices). Loops run from 0 to `extent`.
GPU block and thread indices are the Vars in `THREAD_VARS`, shared by every kernel.
"""

from __future__ import annotations

from collections.abc import Iterator as PyIterator
from dataclasses import dataclass, field
from typing import ClassVar

from autosched.lower.shared_bytes import shared_bytes
from autosched.te.expr import BinOp, Const, Expr, Var

# The dtype of loop variables, thread indices and flat indices.
I32 = "int32"
# Tensor Core fragments: per-warp opaque registers holding tiles (`tile_shape`, `WarpStmt`).
OPERAND_SCOPES = ("wmma.matrix_a", "wmma.matrix_b")  # the multiply's operand fragments
ACCUMULATOR_SCOPE = "wmma.accumulator"
FRAGMENT_SCOPES = (*OPERAND_SCOPES, ACCUMULATOR_SCOPE)
SCOPES = ("global", "shared", "local") + FRAGMENT_SCOPES
# wmma fragment shapes: M = N = 16 always; K by the element dtype of the matrix_a / matrix_b
# fragments (m16n16k16 for float16 / bfloat16; float32 operand fragments hold TF32 values,
# m16n16k8). Accumulator tiles are 16x16.
WMMA_TILE = 16
TILE_ELEMS = WMMA_TILE * WMMA_TILE
WMMA_K = {"float16": 16, "bfloat16": 16, "float32": 8}
TF32_OPERAND_DTYPE = "float32"  # the memory dtype of a TF32 matrix_a / matrix_b fragment
# The threads of a warp, which execute a `WarpStmt` together.
WARP_SIZE = 32
# Memory tiles of warp statements (`MatrixTile`): their layouts, the scopes they may be in, and
# the alignment wmma requires (offset a multiple of 32 bytes, ldm a multiple of 16 bytes).
MATRIX_LAYOUTS = ("row_major", "col_major")
MEMORY_TILE_SCOPES = ("global", "shared")
OFFSET_ALIGN_BYTES, LDM_ALIGN_BYTES = 32, 16
# The instruction families a fragment buffer's warp statements become (`Buffer.fragment_flavour`):
# "wmma" (nvcuda::wmma fragments, opaque layout) or "mma" (per-lane registers in the documented
# PTX layouts, loaded by `ldmatrix` from shared memory and multiplied by `mma.sync` m16n8k16;
# float16 / bfloat16 operands only). `lower/mma_layout.py` holds the mma layouts.
FRAGMENT_FLAVOURS = ("wmma", "mma")
DEFAULT_FLAVOUR = "wmma"
# The flavour of a warpgroup accumulator (`lower/wgmma_ir.py`): a 64 x N tile of float32 values
# spread over the registers of a warpgroup's 128 threads, written by `wgmma.mma_async`. Its
# statements are `WarpgroupStmt`s, not warp statements, so it is not among FRAGMENT_FLAVOURS.
WGMMA_FLAVOUR = "wgmma"
WGMMA_M = 64
# per flavour, the alignment of a memory tile's offset: wmma's pointers, or the 16 bytes of an
# ldmatrix row address (the ldm and the 8-element steps between rows keep the rest aligned)
TILE_OFFSET_ALIGN_BYTES = {"wmma": OFFSET_ALIGN_BYTES, "mma": 16}
# per flavour, the scopes its memory tiles may be in (ldmatrix reads shared memory only; the
# store of an accumulator may write either)
LOAD_TILE_SCOPES: dict[str, tuple[str, ...]] = {"wmma": MEMORY_TILE_SCOPES, "mma": ("shared",)}
LOOP_KINDS = ("serial", "unroll", "vectorize")
# The kind lowering gives a loop bound to `vthread`; `vthread.inject_virtual_threads` removes
# every such loop, so it is not in LOOP_KINDS (the verifier, printer and interpreter never see it).
VTHREAD_KIND = "vthread"
# The launch's index variables, by tag: BLOCK_TAGS index the grid, THREAD_TAGS the block.
BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
LAUNCH_TAGS = BLOCK_TAGS + THREAD_TAGS
# One Var per launch tag (blockIdx.* and threadIdx.*), shared by every kernel.
THREAD_VARS: dict[str, Var] = {tag: Var(tag, "int32") for tag in LAUNCH_TAGS}


def int32(value: int) -> Const:
    """An int32 literal: an index, an extent, an offset."""
    return Const(value, I32)


@dataclass(eq=False)
class Buffer:
    """A named array: kernel argument (global), per-block (shared) or per-thread (local)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"
    # shared only: stores of global loads into it may complete asynchronously, by the next
    # Barrier (cp.async); its readers read it only after a Barrier (double buffering)
    async_copy: bool = False
    # fragment scopes only: the instruction family its warp statements print as (one of
    # FRAGMENT_FLAVOURS); set by lowering from the multiply-accumulate that uses the fragment
    fragment_flavour: str = DEFAULT_FLAVOUR
    # mma operand fragments only: held in two register slots across the warp's k-steps (set by
    # lowering from the accumulator stage; lower/fragment_double_buffer.py)
    fragment_double_buffer: bool = False
    # local only: a thread-private cache, each thread's share of a region its block holds
    # (lower/thread_private.py), kept in registers
    thread_private: bool = False

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype}, {self.scope})"


class Stmt:
    """Base class of statements."""


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False)
class For(Stmt):
    var: Var
    extent: int
    kind: str  # one of LOOP_KINDS (or VTHREAD_KIND inside lowering)
    body: Stmt


@dataclass(eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(eq=False)
class Seq(Stmt):
    stmts: list[Stmt]


@dataclass(eq=False)
class Barrier(Stmt):
    """__syncthreads(): every thread of the block waits here."""


class AsyncGroupStmt(Stmt):
    """Base of the statements that group a thread's asynchronous copies (`cp.async`) into
    buffers marked `async_copy`: in a kernel that has them, such a copy is visible (to its own
    thread; to others after a Barrier as well) only once an `AsyncWait` covers its group.
    Like a Barrier, the threads of a block run them together (no thread-dependent guard)."""


@dataclass(eq=False)
class AsyncCommit(AsyncGroupStmt):
    """`cp.async.commit_group`: the copies the thread issued since its last commit form a group."""


@dataclass(eq=False)
class AsyncWait(AsyncGroupStmt):
    """`cp.async.wait_group pending`: wait until at most the newest `pending` committed groups
    of the thread are incomplete; every older group's copies are then visible."""

    pending: int


@dataclass(eq=False)
class AllReduce(Stmt):
    """Cross-thread reduction over `thread_tag` (e.g. threadIdx.x, extent `extent`): every
    thread contributes `value` (the reducer's identity where `cond` is false), and every thread
    then stores the combined result to `buffer[index]`. Threads that differ in other thread
    indices reduce separately. `reducer` is 'sum', 'max' or 'min'."""

    reducer: str
    value: Expr
    cond: Expr | None
    buffer: Buffer
    index: Expr
    thread_tag: str
    extent: int
    # run once per thread (in no loop): its shared scratch is never written again, so the
    # printer waits at no barrier after reading it (lower/idle_barriers.py)
    once: bool = False


def operand_k(dtype: str) -> int:
    """The K of the wmma shape whose matrix_a / matrix_b fragments hold `dtype`."""
    return WMMA_K[dtype]


def is_tf32(b: Buffer) -> bool:
    """Whether `b` is a matrix_a / matrix_b fragment of TF32 values (float32 in memory)."""
    return b.scope in OPERAND_SCOPES and b.dtype == TF32_OPERAND_DTYPE


def tile_shape(b: Buffer) -> tuple[int, int]:
    """(rows, columns) of one tile of fragment `b`: M x K for matrix_a, K x N for matrix_b,
    M x N for an accumulator."""
    if b.scope == "wmma.matrix_a":
        return WMMA_TILE, operand_k(b.dtype)
    if b.scope == "wmma.matrix_b":
        return operand_k(b.dtype), WMMA_TILE
    if b.fragment_flavour == WGMMA_FLAVOUR:  # shape (tiles, 64, N)
        return WGMMA_M, b.shape[-1]
    return WMMA_TILE, WMMA_TILE


def tile_elems(b: Buffer) -> int:
    """Elements of one tile of fragment `b` (its `size // tile_elems(b)` tiles)."""
    rows, cols = tile_shape(b)
    return rows * cols


@dataclass(eq=False)
class MatrixTile:
    """A tile of a `global` or `shared` buffer, of the shape of the statement's fragment tile
    (`tile_shape`): element (r, c) is at `offset + r * ldm + c` (layout "row_major") or
    `offset + r + c * ldm` ("col_major")."""

    buffer: Buffer
    offset: Expr
    ldm: int
    layout: str


@dataclass(eq=False)
class WarpStmt(Stmt):
    """A warp-collective Tensor Core operation (wmma): the 32 threads of a warp execute it
    together, all active, with the same arguments. Fragment operands are a fragment-scope
    Buffer (its `size // tile_elems(buffer)` tiles, numbered by lowering) and a tile number Expr.
    `exprs()` lists the statement's expressions, `with_exprs(new)` rebuilds it with others
    (same order), `buffers()` the buffers it reads and writes.

    Each subclass declares its operands: `FRAGMENTS`, one (buffer field, tile field, allowed
    scopes) per fragment operand, the written one first unless `MEMORY_TILE` is "dst";
    `MEMORY_TILE`, the field of its `MatrixTile` ("src": read, "dst": written; None: none);
    `ACCUMULATES`, whether it also reads the fragment it writes; `macs()`, its multiply-adds."""

    FRAGMENTS: ClassVar[tuple[tuple[str, str, tuple[str, ...]], ...]] = ()
    MEMORY_TILE: ClassVar[str | None] = None
    ACCUMULATES: ClassVar[bool] = False

    def macs(self) -> int:
        """Multiply-adds of one execution (per warp)."""
        return 0

    def exprs(self) -> list[Expr]:
        raise NotImplementedError

    def with_exprs(self, new: list[Expr]) -> WarpStmt:
        raise NotImplementedError

    def buffers(self) -> list[Buffer]:
        raise NotImplementedError

    def fragments(self) -> list[tuple[Buffer, Expr, tuple[str, ...]]]:
        """(fragment buffer, tile number, allowed scopes) of each fragment operand."""
        return [(getattr(self, b), getattr(self, t), scopes) for b, t, scopes in self.FRAGMENTS]

    def memory_tile(self) -> MatrixTile | None:
        """The tile of global or shared memory the statement reads or writes, if any."""
        return None if self.MEMORY_TILE is None else getattr(self, self.MEMORY_TILE)

    def writes_memory(self) -> bool:
        """Whether the statement writes its memory tile (else it writes a fragment)."""
        return self.MEMORY_TILE == "dst"

    def written(self) -> Buffer:
        """The buffer the statement writes."""
        tile = self.memory_tile()
        if tile is not None and self.writes_memory():
            return tile.buffer
        return getattr(self, self.FRAGMENTS[0][0])

    def read_fragments(self) -> list[tuple[Buffer, Expr, tuple[str, ...]]]:
        """The fragment operands the statement reads (as `fragments()`)."""
        frags = self.fragments()
        return frags if self.writes_memory() or self.ACCUMULATES else frags[1:]

    def reads(self) -> list[Buffer]:
        """The buffers the statement reads: fragments, then a memory tile's buffer."""
        out = [b for b, _, _ in self.read_fragments()]
        tile = self.memory_tile()
        if tile is not None and not self.writes_memory():
            out.append(tile.buffer)
        return out

    def flavour(self) -> str:
        """The instruction family of the statement's fragments (`Buffer.fragment_flavour`);
        the verifier checks that the fragments of one statement agree."""
        return str(self.fragments()[0][0].fragment_flavour)

    def describe(self, detail: str | None = None) -> str:
        """The statement's name and buffers (then `; detail` if given), for messages."""
        names = ", ".join(getattr(b, "name", "?") for b in self.buffers())
        more = "" if detail is None else f"; {detail}"
        return f"{type(self).__name__}({names}{more})"


_ACC = ("wmma.accumulator",)


@dataclass(eq=False)
class FragmentFill(WarpStmt):
    """Every element of accumulator tile `frag[tile]` := `value`."""

    FRAGMENTS = (("frag", "tile", _ACC),)

    frag: Buffer
    tile: Expr
    value: Expr

    def exprs(self):
        return [self.tile, self.value]

    def with_exprs(self, new):
        return FragmentFill(self.frag, new[0], new[1])

    def buffers(self):
        return [self.frag]


@dataclass(eq=False)
class FragmentLoad(WarpStmt):
    """`frag[tile]` := the tile `src` (rows: M for matrix_a, K for matrix_b; `tile_shape`).
    A TF32 fragment rounds each loaded float32 value to TF32."""

    FRAGMENTS = (("frag", "tile", ("wmma.matrix_a", "wmma.matrix_b")),)
    MEMORY_TILE = "src"

    frag: Buffer
    tile: Expr
    src: MatrixTile

    def exprs(self):
        return [self.tile, self.src.offset]

    def with_exprs(self, new):
        src = MatrixTile(self.src.buffer, new[1], self.src.ldm, self.src.layout)
        return FragmentLoad(self.frag, new[0], src)

    def buffers(self):
        return [self.frag, self.src.buffer]


@dataclass(eq=False)
class FragmentStore(WarpStmt):
    """The 16x16 tile `dst` := accumulator tile `frag[tile]` (rows M, columns N)."""

    FRAGMENTS = (("frag", "tile", _ACC),)
    MEMORY_TILE = "dst"

    dst: MatrixTile
    frag: Buffer
    tile: Expr

    def exprs(self):
        return [self.dst.offset, self.tile]

    def with_exprs(self, new):
        dst = MatrixTile(self.dst.buffer, new[0], self.dst.ldm, self.dst.layout)
        return FragmentStore(dst, self.frag, new[1])

    def buffers(self):
        return [self.dst.buffer, self.frag]


@dataclass(eq=False)
class FragmentMma(WarpStmt):
    """`acc[acc_tile] := a[a_tile] @ b[b_tile] + acc[acc_tile]` (16x16xK, K by the operands'
    dtype, float32 sums)."""

    FRAGMENTS = (
        ("acc", "acc_tile", _ACC),
        ("a", "a_tile", ("wmma.matrix_a",)),
        ("b", "b_tile", ("wmma.matrix_b",)),
    )
    ACCUMULATES = True

    acc: Buffer
    acc_tile: Expr
    a: Buffer
    a_tile: Expr
    b: Buffer
    b_tile: Expr

    def macs(self) -> int:
        return WMMA_TILE * WMMA_TILE * operand_k(self.a.dtype)

    def exprs(self):
        return [self.acc_tile, self.a_tile, self.b_tile]

    def with_exprs(self, new):
        return FragmentMma(self.acc, new[0], self.a, new[1], self.b, new[2])

    def buffers(self):
        return [self.acc, self.a, self.b]


WARP_STMTS = (FragmentFill, FragmentLoad, FragmentStore, FragmentMma)


@dataclass(eq=False)
class SharedAlias:
    """Shared buffer `tile` over the bytes of shared buffers `hosts` (packed in order from the
    first host's offset): disjoint live ranges a block barrier separates (`lower/shared_alias.py`
    proves it, the verifier again). `shared_bytes` counts the larger of the two; the
    interpreter keeps their storage apart (their values never meet)."""

    tile: Buffer
    hosts: tuple[Buffer, ...]


@dataclass(eq=False)
class Kernel:
    """One `__global__` function: launch config, buffers it allocates, its body. `vthread`:
    virtual threads per thread (product of nested vthread extents). `unit_vars`: variables of
    loops that run once (no loop emitted; each folds to 0). `min_blocks_per_sm`: the second
    argument of its `__launch_bounds__` (ptxas caps each thread's registers to fit them).
    `cluster`: blocks of one thread-block cluster along x (1: none; `lower/cluster_ir.py`).
    `stream_reads` / `stream_writes`: cache hints the values do not depend on (read-only
    buffers loaded, write-only ones stored, streaming). `fast_exp`: fast float32 exponentials
    (`lower/fast_exp.py`). `shared_aliases`: shared buffers over others' bytes.
    `warp_specialized`: a producer warpgroup feeds its TMA pipeline (`lower/warp_specialize.py`).
    `single_pass`: the kernel summing this one's partials runs in its last block to finish
    (`lower/single_pass.py`). `narrow_tiles`: shared accumulator tiles kept in 16 bits
    (`lower/narrow_tile.py`)."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    allocs: list[Buffer]
    body: Stmt
    vthread: int = 1
    unit_vars: tuple[Var, ...] = ()
    min_blocks_per_sm: int = 1
    cluster: int = 1
    stream_reads: bool = False
    stream_writes: bool = False
    fast_exp: bool = False
    shared_aliases: tuple[SharedAlias, ...] = ()
    warp_specialized: bool = False
    single_pass: bool = False
    narrow_tiles: tuple[str, ...] = ()

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def shared_bytes(self) -> int:
        """Bytes of shared memory the kernel allocates, a buffer laid over others counted once
        (`lower/shared_bytes.py`)."""
        return shared_bytes(self.allocs, [(a.tile, a.hosts) for a in self.shared_aliases])


@dataclass(eq=False)
class Program:
    """Kernels launched in order. Every kernel takes `params` (the DAG's tensors, then global
    temporaries) as pointer arguments in this order. `workspaces`: the temporaries that are
    zeroed once, when they are allocated, and that the kernels leave zeroed (counters)."""

    kernels: list[Kernel]
    params: list[Buffer]
    outputs: list[Buffer]
    temps: list[Buffer] = field(default_factory=list)
    workspaces: list[Buffer] = field(default_factory=list)


def iter_stmts(s: Stmt) -> PyIterator[Stmt]:
    """All statements of a tree, parents first."""
    yield s
    if isinstance(s, Seq):
        for c in s.stmts:
            yield from iter_stmts(c)
    elif isinstance(s, For):
        yield from iter_stmts(s.body)
    elif isinstance(s, IfThenElse):
        yield from iter_stmts(s.then_case)
        if s.else_case is not None:
            yield from iter_stmts(s.else_case)


def seq(stmts: list[Stmt]) -> Stmt:
    """A Seq, flattened; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(flat)


def conjunction(conds: list[Expr]) -> Expr:
    """`conds[0] && conds[1] && ...` (at least one condition), left to right."""
    out = conds[0]
    for c in conds[1:]:
        out = BinOp("&&", out, c, "bool")
    return out


def guarded(stmt: Stmt, conds: list[Expr]) -> Stmt:
    """`stmt` under the conjunction of `conds` (each distinct condition once)."""
    conds = list({c._key: c for c in conds}.values())
    return IfThenElse(conjunction(conds), stmt) if conds else stmt
