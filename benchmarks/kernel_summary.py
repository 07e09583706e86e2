"""What a tuned Tensor Core kernel uses, in the words of the benchmark's tables: whether it is
tensorized, and its instruction family, pipeline slots, operand copies and epilogue."""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower.narrow_tile import narrow_tile_kernels
from autosched.lower.tma_ir import uses_tma
from autosched.lower.warp_roles_ir import uses_warp_roles
from autosched.lower.wgmma_ir import WgmmaMma
from autosched.sketch.epilogue_vector import vector_epilogue_stages


def tensorized(kernel) -> bool:
    """Does the kernel's program use Tensor Core statements (warp ones, or wgmmas)?"""
    return any(
        isinstance(s, (ir.WarpStmt, WgmmaMma))
        for k in kernel.program.kernels
        for s in ir.iter_stmts(k.body)
    )


def instructions(state, kernel=None) -> str:
    """The Tensor Core instruction family and shared-memory pipeline slots of a state's
    stages ("-" without Tensor Cores), whether its mma fragments are double-buffered in
    registers, whether TMA copies its shared tiles (in its built `kernel`: a stage marked
    for TMA whose tiles do not fit it keeps cp.async) and whether its epilogue stores 16-byte
    vectors (over a tile kept in 16 bits): e.g. "mma, 4 slots", "mma, 4 slots, 2 fragment
    slots", "wgmma, 3 slots, TMA", "wgmma, 3 slots, TMA, warp-specialised", "wgmma, 2 slots,
    16-byte epilogue" or "wgmma, 2 slots, 16-byte epilogue over a 16-bit tile"."""
    families = sorted(
        {st.tensor_core_instruction for st in state.stages if st.scope == "wmma.accumulator"}
    )
    if not families:
        return "-"
    slots = [st.pipeline_stages if st.double_buffer else 1 for st in state.stages]
    shared = [n for n, st in zip(slots, state.stages, strict=True) if st.scope == "shared"]
    doubled = any(st.fragment_double_buffer for st in state.stages)
    fragments = ", 2 fragment slots" if doubled else ""
    fed = kernel is not None and any(uses_tma(k) for k in kernel.program.kernels)
    tma = ", TMA" if fed else ""
    if kernel is not None and any(uses_warp_roles(k) for k in kernel.program.kernels):
        tma = ", TMA, warp-specialised"
    vectors = ", 16-byte epilogue" if vector_epilogue_stages(state) else ""
    if vectors and kernel is not None and narrow_tile_kernels(kernel.program):
        vectors += " over a 16-bit tile"
    return f"{'+'.join(families)}, {max(shared, default=1)} slots{fragments}{tma}{vectors}"
