"""The `OperandCopy` init rule: whether a pipelined wgmma stage's shared operand tiles are copied
by every thread's cp.async or by one thread's TMA box copies (`State.operand_copy`;
lower/tma_fetch.py).

The rule draws uniformly from `SketchParams.operand_copies` (default: both) for each
group where TMA applies (`tma_fits`; a large conv's on sm_90, `tensor_core_instruction.
hopper_sized`, takes TMA wherever it applies and "tma" is among the choices): a wgmma stage on
sm_90 whose shared operands are all double-buffered over more than one K tile (or over the
window-fused loop of a conv's taps), copied from the inputs or an implicit GEMM's gather that
TMA copies (`TensorCoreGroup.gather_copies`: a 1x1, stride-1 unpadded one as boxes of its input
seen as [pixels, channels]; with `SketchParams.tma_im2col`, others as im2col copies where one
loop pipelines them), K-major (or an N-major B) and whose drawn tiles are whole 128-byte
lines: the contiguous dimension a multiple of 64 halfs, the other at most a TMA box's 256 rows.
A TMA tile is stored unpadded (the copy engine's 128-byte swizzle spreads the banks), whatever
the row padding draw was. Only "tma" is recorded, on every shared stage of the group. It runs after
every rule whose draws it reads, so their draws are those they would be without it.
"""

from __future__ import annotations

from collections.abc import Sequence

from autosched.lower.tma_ir import BOX_MAX
from autosched.lower.wgmma_operands import GROUP, SWIZZLE_COLUMNS
from autosched.schedule.loop_state import State
from autosched.sketch.factorization import pick
from autosched.sketch.fragment_double_buffer import group_lengths
from autosched.sketch.init_base import InitRule
from autosched.sketch.tensor_core_instruction import WGMMA, WGMMA_ARCHS, hopper_sized
from autosched.sketch.tensor_core_plan import IM2COL, ROWS, TensorCoreGroup
from measure.hardware import HardwareParams

CP_ASYNC, TMA = "cp.async", "tma"
MATRIX_A = "wmma.matrix_a"


def _tile_extents(lengths: Sequence[tuple[int, ...]]) -> dict[str, int]:
    """The block tile's extent along M, N and K from the group's split lengths."""
    (wm, rm, m16), (wn, rn, n16), (chunk, k_tile) = lengths
    return {"m": wm * rm * m16, "n": wn * rn * n16, "k": chunk * k_tile}


def _other_axis(role: str, contiguous: str) -> str:
    """The tile axis of a shared operand stage that is not its contiguous one."""
    if role == MATRIX_A:
        return "m" if contiguous == "k" else "k"
    return "k" if contiguous == "n" else "n"


def tma_fits(
    hw: HardwareParams,
    g: TensorCoreGroup,
    lengths: Sequence[tuple[int, ...]],
    instruction: str,
    buffered: set[int],
    im2col: bool = False,
) -> bool:
    """Whether group `g`'s shared operand tiles, with these split lengths, may be fetched by
    TMA (see the module docstring); lowering checks the boxes again and keeps cp.async where
    they do not hold."""
    if hw.arch not in WGMMA_ARCHS or instruction != WGMMA or g.operand_bytes != 2:
        return False
    if not g.shared or not set(g.shared) <= buffered:
        return False
    copies = g.gather_copies or ("",) * len(g.shared)
    allowed = {ROWS, IM2COL} if im2col else {ROWS}
    if any(gather and c not in allowed for gather, c in zip(g.gathers, copies, strict=False)):
        return False
    if g.tiles[2] <= lengths[2][0] and g.window_steps == 1:  # the pipeline's loop runs once
        return False
    ext = _tile_extents(lengths)
    for role, contiguous in zip(g.roles, g.row_axes, strict=True):
        if contiguous is None or (role == MATRIX_A and contiguous != "k"):
            return False
        rows = ext[_other_axis(role, contiguous)]
        if ext[contiguous] % SWIZZLE_COLUMNS or rows % GROUP or rows > BOX_MAX:
            return False
    return True


class OperandCopy(InitRule):
    """Draws cp.async or TMA for the shared operands of every wgmma stage TMA fits."""

    def apply(self, ctx, plan, state: State, rng):
        choices = ctx.params.operand_copies
        if TMA not in choices:
            return state
        buffered = {i for i, s in enumerate(state.stages) if s.double_buffer}
        for g in plan.tensor_core:
            instruction = state.stages[g.acc].tensor_core_instruction
            lengths = group_lengths(state, g)
            fits = tma_fits(ctx.hardware, g, lengths, instruction, buffered, ctx.params.tma_im2col)
            if fits and (hopper_sized(ctx, state, g) or pick(choices, rng) == TMA):
                for c in g.shared:
                    state = state.operand_copy(c, TMA)
        return state


__all__ = ["CP_ASYNC", "TMA", "OperandCopy", "tma_fits"]
