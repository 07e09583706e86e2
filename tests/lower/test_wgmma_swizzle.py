"""The 128-byte swizzle in sampled wgmma states (`lower/wgmma_operands.py`): a K-major shared
operand (or an N-major B) whose rows are whole 128-byte lines is stored as wgmma's swizzled
atoms, fetched by
16-byte cp.async at the swizzled addresses, described by a 128B descriptor; sampled float16 /
bfloat16 matmul and batch_matmul states run on the CPU interpreter against numpy (which reads
the operands through the descriptors) and compile for sm_90a without spills.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched.lower import ir
from autosched.lower import wgmma_ir as wi
from autosched.lower import wgmma_layout as wl
from autosched.lower.interpreter import InterpreterError
from autosched.lower.wgmma_operands import swizzle_of, swizzled_index
from autosched.schedule.compute_dag import ComputeDAG
from autosched.te.expr import Var
from autosched.te.npeval import eval_expr
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.lower import test_tensorize as tz
from tests.lower.test_warpgroup_mma import WGMMA_ONLY, sample
from tests.lower.test_wgmma_mainloop import batch_matmul_dag, matmul_dag  # B K-major: swizzled


def swizzles(program: ir.Program) -> dict[str, str]:
    """Operand buffer name -> the swizzle its wgmmas read it with."""
    return {
        op.buffer.name: op.swizzle
        for s in ir.iter_stmts(program.kernels[0].body)
        if isinstance(s, wi.WgmmaMma)
        for op in (s.a, s.b)
    }


def widest(program: ir.Program) -> int:
    return max(s.n for s in ir.iter_stmts(program.kernels[0].body) if isinstance(s, wi.WgmmaMma))


# the threads' cp.async fetch of swizzled tiles (a TMA-fed stage is filled by box copies instead)
CP_ASYNC_WGMMA = dataclasses.replace(WGMMA_ONLY, operand_copies=("cp.async",))


def swizzled_states(dag: ComputeDAG, operand: str, seeds=range(4, 8), n: int = 16):
    """(state, program) of the sampled wgmma states whose `operand` tiles are swizzled and
    whose wgmmas reach N = `n`."""
    for seed in seeds:
        sampler, _, drawn = sample(dag, CP_ASYNC_WGMMA, n=4, seed=seed)
        for s in drawn:
            program = sampler.programs[s.key()]
            if swizzles(program).get(operand) == "128B" and widest(program) >= n:
                yield s, program


def swizzled(dag: ComputeDAG, operand: str, seeds=range(4, 8), n: int = 16):
    """(state, program) of the first of `swizzled_states`."""
    for found in swizzled_states(dag, operand, seeds, n):
        return found
    raise AssertionError(f"no sampled state swizzles {operand}")


def test_the_swizzled_index_is_the_128_byte_swizzle_of_the_row_major_line():
    r, c = Var("r"), Var("c")
    flat = swizzled_index(r, c, rows=16)
    for rv in range(16):
        for cv in range(128):
            got = eval_expr(flat, {id(r): rv, id(c): cv}, None, None)
            atom, line = divmod(cv, 64)
            address = wl.swizzle_128b(np.int64(rv * 128 + line * 2))  # bytes within the atom
            assert got == atom * 16 * 64 + int(address) // 2


def test_a_swizzled_tile_is_where_its_descriptor_reads_it():
    """The K-major 128B descriptor of a 16-wide K slice at (r0, k0) reads element (r, k) where
    the fetch stored element (r0 + r, k0 + k)."""
    r, c = Var("r"), Var("c")
    flat = swizzled_index(r, c, rows=64)
    row, k = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
    for k0 in (0, 16, 48, 64, 112):
        start = eval_expr(flat, {id(r): 0, id(c): k0}, None, None) * 2
        d = wl.decode(wl.encode(int(start), 16, 1024, "128B"))
        read = wl.element_address(d, "k", row, k) // 2
        stored = [
            [eval_expr(flat, {id(r): int(i), id(c): k0 + int(j)}, None, None) for j in range(16)]
            for i in range(64)
        ]
        np.testing.assert_array_equal(read, stored)


def test_only_whole_unpadded_lines_of_k_major_tiles_or_n_major_b_are_swizzled():
    assert swizzle_of(64, 64, 64, contiguous_is_k=True, is_b=False) == "128B"
    assert swizzle_of(64, 128, 128, contiguous_is_k=True, is_b=True) == "128B"
    assert swizzle_of(64, 128, 128, contiguous_is_k=False, is_b=True) == "128B"  # N-major B
    assert swizzle_of(64, 72, 64, contiguous_is_k=True, is_b=False) == "none"  # padded rows
    assert swizzle_of(64, 32, 32, contiguous_is_k=True, is_b=False) == "none"  # half a line
    assert swizzle_of(64, 64, 64, contiguous_is_k=False, is_b=False) == "none"  # M-major A


@pytest.mark.parametrize(
    "make, operand",
    [
        (lambda: matmul_dag("float16"), "A_shared"),
        (lambda: matmul_dag("bfloat16"), "A_shared"),
        (lambda: matmul_dag("float16"), "B_shared"),
        (batch_matmul_dag, "B_shared"),
    ],
)
def test_sampled_swizzled_states_compute_the_dag(make, operand):
    dag = make()
    _, program = swizzled(dag, operand)
    kernel = program.kernels[0]
    (buf,) = [b for b in kernel.allocs if b.name == operand]
    assert buf.size * 2 % 1024 == 0  # whole swizzle patterns
    tz.run_and_compare(dag, program)


def test_an_n_major_b_swizzled_across_atoms_computes_the_dag():
    """A wgmma of N = 128 reads two 64-column atoms of its N-major B tile, LBO apart."""
    dag = matmul_dag("float16")
    _, program = swizzled(dag, "B_shared", seeds=range(6, 8), n=128)
    tz.run_and_compare(dag, program)


def test_a_swizzled_tile_read_without_the_swizzle_computes_a_wrong_product():
    dag = matmul_dag("float16")
    _, program = swizzled(dag, "A_shared")
    for s in ir.iter_stmts(program.kernels[0].body):
        if isinstance(s, wi.WgmmaMma) and s.a.swizzle == "128B":  # canonical fields instead
            s.a = dataclasses.replace(s.a, swizzle="none", lbo=8 * 1024, sbo=1024)
    with pytest.raises((AssertionError, InterpreterError)):
        tz.run_and_compare(dag, program)


@needs_nvcc
@pytest.mark.parametrize(
    "operand, seeds, n", [("A_shared", range(4, 8), 16), ("B_shared", range(4, 6), 128)]
)
def test_a_swizzled_state_compiles_for_sm_90a_without_spills(operand, seeds, n):
    from autosched import build

    dag = matmul_dag("float16")
    fetch = f"as_cp_async_16(&{operand}["  # 16-byte fetches at swizzled addresses
    sources = (build(dag, s).source for s, _ in swizzled_states(dag, operand, seeds, n))
    source = next((text for text in sources if fetch in text), "")
    assert fetch in source
    assert "__align__(1024)" in source
    (res,) = compile_resources(source, arch="sm_90").values()
    assert res.spill_bytes == 0


@pytest.mark.gpu
@pytest.mark.parametrize(
    "make, operand, seeds, n",
    [
        (lambda: matmul_dag("float16"), "A_shared", range(4), 16),
        (lambda: matmul_dag("float16"), "B_shared", range(6, 8), 128),
        (batch_matmul_dag, "B_shared", range(4), 16),
    ],
)
def test_gpu_swizzled_states_match_numpy(make, operand, seeds, n):
    from tests.gpu.test_gpu_kernels import run_on_gpu

    dag = make()
    state, _ = swizzled(dag, operand, seeds, n)
    run_on_gpu(dag, state, rtol=1e-2, atol=1e-2)
