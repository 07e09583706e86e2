"""The CPU interpreter's warp-collective Tensor Core statements (`ir.WarpStmt`).

A warp is 32 consecutive thread ids of a block (`tid // 32`). Fragment buffers (scopes in
`ir.FRAGMENT_SCOPES`) are per warp: float32 arrays of shape (warps, tiles, rows, cols), the
tile shape `ir.tile_shape` (16x16; 16x8 / 8x16 for TF32 matrix_a / matrix_b), where `warps`
counts every warp of the launch; matrix_a/matrix_b values are float16/bfloat16 values held
exactly in float32, or float32 values rounded to TF32 on load (`round_tf32`, as the printed
`__float_to_tf32` after `load_matrix_sync`). Fresh fragments hold NaN.

Each warp statement first checks the warp rules (`warp_lanes`): every warp with an active lane
has all 32 lanes active (else a divergent warp op), and the 32 lanes agree on every expression;
then it runs once per active warp, vectorized over those warps with numpy. Tiles of memory are
bounds-checked and alignment-checked (offset a multiple of 32 bytes, ldm of 16 bytes); shared
memory accesses go through the interpreter's race tracker, the warp's lane 0 standing for the
warp as writer and reader (a read records the whole warp as readers).

`FragmentMma` computes `a @ b + acc` in float64 and rounds once to float32: the fp16/bf16/TF32
products are exact either way, and one rounding per mma makes the result independent of the
summation order (Tensor Cores sum in at least float32 precision, in an unspecified order).

That is the "wmma" flavour, whose fragments are opaque. Fragments of the "mma" flavour
(`ir.Buffer.fragment_flavour`) are per-lane registers in the PTX layouts; their statements run
in `interpret_mma.py`; both build on `warp_context.py` (`register_warp_handlers` dispatches
on the statement's flavour).

The handlers take the interpreter's kernel run (`interpreter._KernelRun`) as `run`; they use its
launch indices, buffers, race trackers and error helpers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.lower.dispatch import TypeTable
from autosched.lower.interpret_mma import MMA_HANDLERS
from autosched.lower.warp_context import WarpContext, fill_fragment, track_warp_read
from autosched.te.dtype import from_storage, round_tf32

# matrix fragment dtype -> what a load does to the values it reads (float32: TF32 rounding)
LOAD_CONVERSIONS = {ir.TF32_OPERAND_DTYPE: round_tf32}


def fragment_storage(buffer: ir.Buffer, warps: int) -> np.ndarray:
    """A fresh fragment buffer for `warps` warps: NaN tiles of (warps, tiles, rows, cols), or
    of (warps, tiles, lanes, values per lane) for the mma flavour."""
    rows, cols = ir.tile_shape(buffer)
    tiles = buffer.size // (rows * cols)
    if buffer.fragment_flavour == "mma":
        return np.full(
            (warps, tiles, ir.WARP_SIZE, (rows * cols) // ir.WARP_SIZE), np.nan, np.float32
        )
    return np.full((warps, tiles, rows, cols), np.nan, np.float32)


def _load(run: Any, s: ir.FragmentLoad, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    ((arr, tiles),) = ctx.tiles()
    buf, mem, idx = ctx.memory(s.src, "read")
    if buf.dtype != s.frag.dtype:
        ctx.fail(f"loads {buf.dtype} {buf.name} into a {s.frag.dtype} fragment")
    if buf.scope == "global":
        vals = mem[idx]
    else:
        keys = (ctx.blocks[:, None, None] * buf.size + idx).reshape(-1)
        track_warp_read(run, ctx, buf, keys)
        vals = mem[ctx.blocks[:, None, None], idx]
    vals = from_storage(vals, buf.dtype).astype(np.float32)
    convert = LOAD_CONVERSIONS.get(s.frag.dtype)
    arr[ctx.warps, tiles] = vals if convert is None else convert(vals)


def _store(run: Any, s: ir.FragmentStore, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    ((arr, tiles),) = ctx.tiles()
    buf, mem, idx = ctx.memory(s.dst, "write")
    if buf.dtype != "float32":
        ctx.fail(f"stores a float32 accumulator into {buf.dtype} {buf.name}")
    vals = arr[ctx.warps, tiles]
    if buf.scope == "global":
        mem[idx] = vals
        return
    keys = (ctx.blocks[:, None, None] * buf.size + idx).reshape(-1)
    vals = vals.reshape(-1)
    lanes = np.repeat(ctx.lane0, keys.size // ctx.lane0.size)
    run._track_write(buf, mem, keys, vals, lanes, False)
    mem.reshape(-1)[keys] = vals


def _mma(run: Any, s: ir.FragmentMma, mask: Any) -> None:
    ctx = WarpContext(run, s, mask)
    (acc, acc_tiles), (a, a_tiles), (b, b_tiles) = ctx.tiles()
    if s.a.dtype != s.b.dtype:
        ctx.fail(f"multiplies {s.a.dtype} {s.a.name} by {s.b.dtype} {s.b.name}")
    w = ctx.warps
    product = np.matmul(a[w, a_tiles].astype(np.float64), b[w, b_tiles].astype(np.float64))
    acc[w, acc_tiles] = (product + acc[w, acc_tiles]).astype(np.float32)


# the wmma flavour's handler of each warp statement type (handler(run, statement, lane mask))
WMMA_HANDLERS: dict[type, Any] = {
    ir.FragmentFill: fill_fragment,
    ir.FragmentLoad: _load,
    ir.FragmentStore: _store,
    ir.FragmentMma: _mma,
}


def register_warp_handlers(table: TypeTable[ir.Stmt, [Any], None], run: Any) -> None:
    """Register the warp statements' handlers, bound to the kernel run `run`, in its
    statement table (statement, lane mask): each runs the handler of the statement's flavour."""
    by_flavour = {"wmma": WMMA_HANDLERS, "mma": MMA_HANDLERS}

    def handle(s: ir.WarpStmt, mask: Any) -> None:
        by_flavour[s.flavour()][type(s)](run, s, mask)

    for stmt_type in WMMA_HANDLERS:
        table.register(stmt_type, handle)


__all__ = ["WMMA_HANDLERS", "fragment_storage", "register_warp_handlers"]
