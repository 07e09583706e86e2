"""Warpgroup statements: Hopper's asynchronous warpgroup MMA (`wgmma`) in the lowered IR.

A warpgroup is 4 consecutive warps (128 threads; in a kernel with these statements
blockDim.x == 32 and blockDim.y is a multiple of 4, so warpgroup g is threadIdx.y / 4 == g).
Its accumulator is a fragment buffer of flavour `ir.WGMMA_FLAVOUR`: shape (tiles, 64, N), float32,
each 64 x N tile spread over the warpgroup's registers as the PTX ISA says
(`wgmma_layout.accumulator_position`). Operands are tiles of shared memory that the statement
reads through matrix descriptors (`SharedOperand`). The statements' expressions must agree over
the 128 threads of a warpgroup, and all 128 execute each statement.

- `WgmmaFill`: every value of an accumulator tile := value (ordinary register writes: a
  `WgmmaFence` must follow before a wgmma uses the tile).
- `WgmmaMma`: `acc[tile] += A @ B` (64 x 16 x N), issued asynchronously: the registers hold the
  result only once a `WgmmaWait` covers the group it was committed in.
- `WgmmaFence`, `WgmmaCommit`, `WgmmaWait(pending)`: `wgmma.fence`, `wgmma.commit_group`,
  `wgmma.wait_group pending`.
- `WgmmaStore`: each thread writes its values of an accumulator tile into a 64 x N tile of
  global or shared float32 memory (`ir.MatrixTile`, row- or column-major).
- `ProxyFence`: `fence.proxy.async.shared::cta`, which makes a thread's ordinary shared-memory
  stores visible to the wgmma unit (before the barrier that precedes the wgmma).

The CPU interpreter runs them in `interpret_wgmma.py`, the CUDA printer in `codegen/wgmma.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autosched.lower import ir
from autosched.lower import wgmma_layout as wl
from autosched.te.expr import Expr


@dataclass(eq=False)
class SharedOperand:
    """A wgmma operand tile in shared memory, as its matrix descriptor describes it: the tile
    starts `offset` elements into `buffer` (the descriptor's start address), is `major`
    ("k": K contiguous in 16-byte rows, "mn": M or N contiguous), and its core matrices are
    `lbo` / `sbo` bytes apart (`wgmma_layout`), in the `swizzle` mode ("none" or "128B")."""

    buffer: ir.Buffer
    offset: Expr
    major: str
    lbo: int
    sbo: int
    swizzle: str = "none"

    def descriptor_fields(self) -> int:
        """The descriptor's bits other than the start address."""
        return wl.encode(0, self.lbo, self.sbo, self.swizzle)


class WarpgroupStmt(ir.Stmt):
    """Base of the statements a warpgroup's 128 threads execute together. `exprs()` lists the
    statement's expressions, `with_exprs(new)` rebuilds it with others (same order),
    `buffers()` the buffers it reads or writes."""

    ASYNC_ORDER: ClassVar[bool] = False  # fence / commit / wait: no operands

    def exprs(self) -> list[Expr]:
        return []

    def with_exprs(self, new: list[Expr]) -> WarpgroupStmt:
        return self

    def buffers(self) -> list[ir.Buffer]:
        return []

    def describe(self) -> str:
        names = ", ".join(b.name for b in self.buffers())
        return f"{type(self).__name__}({names})"


@dataclass(eq=False)
class WgmmaFill(WarpgroupStmt):
    """Every value of accumulator tile `acc[tile]` := `value`."""

    acc: ir.Buffer
    tile: Expr
    value: Expr

    def exprs(self):
        return [self.tile, self.value]

    def with_exprs(self, new):
        return WgmmaFill(self.acc, new[0], new[1])

    def buffers(self):
        return [self.acc]


@dataclass(eq=False)
class WgmmaMma(WarpgroupStmt):
    """`acc[acc_tile] += a @ b`: `wgmma.mma_async.sync.aligned.m64nNk16.f32.<t>.<t>`, A (64 x 16)
    and B (16 x N, described as N rows of 16 k) read from shared memory through their
    descriptors. The accumulator is either a warpgroup accumulator (`ir.WGMMA_FLAVOUR`, N its
    tile width) or an accumulator of the "mma" flavour, whose per-warp 16x16 tiles `acc_tile`
    .. `acc_tile + N / 16 - 1` of the warpgroup's 4 warps hold, register for register, what
    wgmma's m64nN accumulator holds (warp w: rows 16w .. 16w + 15): so the mma flavour's fill,
    stores and epilogues work on what the wgmma computed."""

    acc: ir.Buffer
    acc_tile: Expr
    a: SharedOperand
    b: SharedOperand
    n: int

    def macs(self) -> int:
        return wl.M * self.n * wl.K

    def exprs(self):
        return [self.acc_tile, self.a.offset, self.b.offset]

    def with_exprs(self, new):
        a = SharedOperand(
            self.a.buffer, new[1], self.a.major, self.a.lbo, self.a.sbo, self.a.swizzle
        )
        b = SharedOperand(
            self.b.buffer, new[2], self.b.major, self.b.lbo, self.b.sbo, self.b.swizzle
        )
        return WgmmaMma(self.acc, new[0], a, b, self.n)

    def buffers(self):
        return [self.acc, self.a.buffer, self.b.buffer]


@dataclass(eq=False)
class WgmmaStore(WarpgroupStmt):
    """The 64 x N tile `dst` := accumulator tile `acc[tile]`, each thread storing its values."""

    dst: ir.MatrixTile
    acc: ir.Buffer
    tile: Expr

    def exprs(self):
        return [self.dst.offset, self.tile]

    def with_exprs(self, new):
        dst = ir.MatrixTile(self.dst.buffer, new[0], self.dst.ldm, self.dst.layout)
        return WgmmaStore(dst, self.acc, new[1])

    def buffers(self):
        return [self.dst.buffer, self.acc]


@dataclass(eq=False)
class WgmmaFence(WarpgroupStmt):
    """`wgmma.fence.sync.aligned`: orders earlier register and shared-memory accesses before
    the wgmmas that follow."""

    ASYNC_ORDER = True


@dataclass(eq=False)
class WgmmaCommit(WarpgroupStmt):
    """`wgmma.commit_group.sync.aligned`: the wgmmas issued since the last commit form a group."""

    ASYNC_ORDER = True


@dataclass(eq=False)
class WgmmaWait(WarpgroupStmt):
    """`wgmma.wait_group.sync.aligned pending`: wait until at most the newest `pending` groups
    are incomplete; the older groups' results are then in the registers."""

    ASYNC_ORDER = True

    pending: int = 0


@dataclass(eq=False)
class WgmmaOperandTile(WarpgroupStmt):
    """Lowering's stand-in for the load of tile `tile` of a matrix fragment that wgmmas read
    (flavour `ir.WGMMA_FLAVOUR`): the 16x16 tile of shared memory it stands for, as a
    descriptor sees it. The `warpgroup_mma` pass turns the multiply-accumulates that read such
    fragments into wgmmas and removes these; no printed or interpreted program has one."""

    frag: ir.Buffer
    tile: Expr
    operand: SharedOperand

    def exprs(self):
        return [self.tile, self.operand.offset]

    def with_exprs(self, new):
        op = self.operand
        return WgmmaOperandTile(
            self.frag,
            new[0],
            SharedOperand(op.buffer, new[1], op.major, op.lbo, op.sbo, op.swizzle),
        )

    def buffers(self):
        return [self.frag, self.operand.buffer]


@dataclass(eq=False)
class ProxyFence(ir.Stmt):
    """`fence.proxy.async.shared::cta`: the executing thread's earlier shared-memory stores
    become visible to the async proxy (wgmma's operand reads), after the next barrier."""


WARPGROUP_STMTS = (WgmmaFill, WgmmaMma, WgmmaStore, WgmmaFence, WgmmaCommit, WgmmaWait)


def uses_wgmma(kernel: ir.Kernel) -> bool:
    """Whether `kernel` has warpgroup statements or a warpgroup accumulator."""
    return any(b.fragment_flavour == ir.WGMMA_FLAVOUR for b in kernel.allocs) or any(
        isinstance(s, WarpgroupStmt) for s in ir.iter_stmts(kernel.body)
    )


def wgmma_accumulators(kernel: ir.Kernel) -> list[ir.Buffer]:
    """The accumulators wgmmas write (either flavour), in allocation order."""
    used = {id(s.acc) for s in ir.iter_stmts(kernel.body) if isinstance(s, WgmmaMma)}
    return [
        b
        for b in kernel.allocs
        if id(b) in used
        or (b.scope == ir.ACCUMULATOR_SCOPE and b.fragment_flavour == ir.WGMMA_FLAVOUR)
    ]


def wgmma_operands(kernel: ir.Kernel) -> dict[int, str]:
    """The shared buffers wgmmas read (by id) and the swizzle of their tiles, for alignment."""
    out: dict[int, str] = {}
    for s in ir.iter_stmts(kernel.body):
        if isinstance(s, WgmmaMma):
            for op in (s.a, s.b):
                if out.get(id(op.buffer)) != "128B":
                    out[id(op.buffer)] = op.swizzle
    return out


__all__ = [
    "WARPGROUP_STMTS",
    "ProxyFence",
    "SharedOperand",
    "WarpgroupStmt",
    "WgmmaCommit",
    "WgmmaFence",
    "WgmmaFill",
    "WgmmaMma",
    "WgmmaOperandTile",
    "WgmmaStore",
    "WgmmaWait",
    "uses_wgmma",
    "wgmma_accumulators",
    "wgmma_operands",
]
