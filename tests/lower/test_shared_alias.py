"""The epilogue tile laid over the operand tiles (lower/shared_alias.py): recorded where a
barrier separates their live ranges, with the shared bytes, the printed layout and the
interpreter's results to match; refused (and rejected by the verifier) where none does."""

from __future__ import annotations

import dataclasses

import pytest

from autosched.codegen.cuda import codegen_program
from autosched.codegen.shared_memory import dynamic_shared_bytes, shared_layout
from autosched.errors import LoweringError
from autosched.lower import ir
from autosched.lower import tma_ir as ti
from autosched.lower.device_passes import device_program
from autosched.lower.lowering import lower
from autosched.lower.shared_alias import epilogue_overlay, overlay_problem
from autosched.lower.verify import verify_program
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.utils import SketchParams
from autosched.te.dtype import BYTES
from measure.hardware import HardwareParams
from tests.lower import test_tensorize as tz
from tests.sketch.test_warpgroup_tile import matmul_dag

TMA_ONLY = SketchParams(tensor_core_instructions=("wgmma",), operand_copies=("tma",))


def nbytes(b: ir.Buffer) -> int:
    return b.size * BYTES[b.dtype]


def epilogue_state(double_buffered: bool):
    """(dag, state): a 64^3 wmma matmul whose cast epilogue reads the product from a shared
    tile, its operand caches double-buffered or not."""
    dag, state = tz.matmul_state(epilogue=True)
    if double_buffered:
        state = state.double_buffer("A.shared").double_buffer("B.shared")
    return dag, state


def test_a_double_buffered_wmma_kernel_lays_its_epilogue_tile_over_its_operands():
    dag, state = epilogue_state(double_buffered=True)
    program = lower(state)
    (kernel,) = program.kernels
    (alias,) = kernel.shared_aliases
    assert alias.tile.name == "T_matmul"
    assert [b.name for b in alias.hosts] == ["A_shared", "B_shared"]
    operands = sum(map(nbytes, alias.hosts))
    assert kernel.shared_bytes == max(nbytes(alias.tile), operands) < nbytes(alias.tile) + operands
    offsets, _, total = shared_layout(kernel)
    assert offsets[id(alias.tile)] == offsets[id(alias.hosts[0])] == 0
    assert offsets[id(alias.hosts[1])] == nbytes(alias.hosts[0])
    assert total == dynamic_shared_bytes(kernel) == kernel.shared_bytes  # dynamic below 48 KB
    source = codegen_program(device_program(program))
    assert "extern __shared__" in source
    assert "T_matmul = (float*)(as_dynamic_shared + 0);" in source
    assert "A_shared = (half*)(as_dynamic_shared + 0);" in source
    tz.run_and_compare(dag, program)


def test_without_a_barrier_after_the_main_loop_the_tile_stays_apart():
    """Single-buffered, the accumulators are stored right after the last multiply: no barrier
    separates the tile from the operands, so the kernel keeps them apart; an alias forced onto
    it fails the verifier."""
    dag, state = epilogue_state(double_buffered=False)
    program = lower(state)
    (kernel,) = program.kernels
    assert not kernel.shared_aliases
    assert kernel.shared_bytes == sum(nbytes(b) for b in kernel.allocs if b.scope == "shared")
    alias = epilogue_overlay(kernel)
    assert alias is not None and "no __syncthreads()" in (overlay_problem(kernel, alias) or "")
    forced = dataclasses.replace(kernel, shared_aliases=(alias,))
    with pytest.raises(LoweringError, match="T_matmul may not alias"):
        verify_program(ir.Program([forced], program.params, program.outputs))
    tz.run_and_compare(dag, program)


def test_a_pipelined_tma_kernel_reuses_its_slots_for_the_cast_epilogue():
    """A sampled TMA-fed wgmma state of an fp16 matmul with a cast: the float32 tile over the
    operand slots (offset 0), the mbarriers past both; the interpreter matches numpy."""
    dag = matmul_dag(128, 128, 256, cast=True)
    hw = HardwareParams()
    sampler = SketchSampler(generate_sketches(dag, hw, TMA_ONLY), hw, TMA_ONLY)
    program = next(
        sampler.programs[s.key()]
        for s in sampler.sample(8, 0)
        if ti.uses_tma(sampler.programs[s.key()].kernels[0])
        and any(st.pipeline_stages for st in s.stages)
    )
    (kernel,) = program.kernels
    (alias,) = kernel.shared_aliases
    offsets, _, total = shared_layout(kernel)
    assert offsets[id(alias.tile)] == offsets[id(alias.hosts[0])] == 0
    (bars,) = [b for b in kernel.allocs if b.dtype == ti.MBARRIER_DTYPE]
    assert offsets[id(bars)] >= max(nbytes(alias.tile), sum(map(nbytes, alias.hosts)))
    assert kernel.shared_bytes <= total
    tz.run_and_compare(dag, program)
