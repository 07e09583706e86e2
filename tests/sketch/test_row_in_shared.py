"""A normalisation's row kept in shared memory (sketch/row_in_shared.py `RowInSharedMemory`):
the block-per-row sketches of softmax, layer norm and RMSNorm also read the row once, into a
shared cache at the output's row loop cut as the output's last axis, and every pass reads it
there; DoubleBuffer's mark makes that fetch a `cp.async` copy. The kernels compute the DAG on
the interpreter."""

from __future__ import annotations

import pytest

from autosched import te, topi
from autosched.codegen.cuda import codegen_program
from autosched.lower import ir
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.steps import print_python_schedule, replay
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.launch_bounds import row_cache_bytes
from autosched.sketch.params import SketchParams
from measure.hardware import HardwareParams
from tests.interpreter_check import interpret_and_compare
from tests.sketch.test_cross_block import rms_norm


def softmax(m: int, n: int) -> ComputeDAG:
    x = te.placeholder((m, n), name="x")
    return ComputeDAG([x, topi.softmax(x)])


def layer_norm(m: int, n: int) -> ComputeDAG:
    x = te.placeholder((m, n), name="x")
    gamma, beta = te.placeholder((n,), name="gamma"), te.placeholder((n,), name="beta")
    return ComputeDAG([x, gamma, beta, topi.layer_norm(x, gamma, beta)])


def row_kept(sketch) -> bool:
    return any(st.name == "x.shared" for st in sketch.stages)


def global_reads_of_x(kernel: ir.Kernel) -> int:
    """The statements of the kernel that load from the input x (a global buffer)."""
    count = 0
    for s in ir.iter_stmts(kernel.body):
        if isinstance(s, ir.Store):
            count += "x[" in str(s.value) and "x_shared" not in str(s.value)
    return count


@pytest.mark.parametrize("dag", [softmax(4, 256), layer_norm(4, 256), rms_norm(4, 256)])
def test_block_per_row_sketches_also_read_the_row_once_into_shared_memory(dag):
    kept = [s for s in generate_sketches(dag) if row_kept(s)]
    assert len(kept) == 2  # threads reading one float each, or a 16-byte vector
    sampler = SketchSampler(kept)
    states = sampler.sample(6, 0)
    assert states, sampler.rejected
    asynchronous = 0
    for state in states:
        program = sampler.programs[state.key()]
        (kernel,) = program.kernels
        cache = next(b for b in kernel.allocs if b.name == "x_shared")
        assert cache.scope == "shared" and cache.size == 256  # one row
        source = codegen_program(program)
        asynchronous += cache.async_copy
        assert ("as_cp_async_" in source) == cache.async_copy
        interpret_and_compare(dag, program, rtol=1e-4)
        assert 's.cache_read(x, "shared"' in print_python_schedule(state)
        assert replay(dag, state.steps) == state
        root = len(state.stages) - 1
        assert row_cache_bytes(state, root) == 256 * 4
    assert 0 < asynchronous < len(states)  # DoubleBuffer's even odds: both come up


def test_the_row_is_read_from_global_memory_by_the_fetch_alone():
    dag = softmax(4, 256)
    (plain, kept) = [s for s in generate_sketches(dag) if s is not None][:2]
    assert not row_kept(plain) and row_kept(kept)
    for sketch, reads in ((plain, 3), (kept, 1)):
        sampler = SketchSampler([sketch])
        (state,) = sampler.sample(1, 0)
        (kernel,) = sampler.programs[state.key()].kernels
        # max, sum of exp and the output each read x, or the fetch alone does
        assert global_reads_of_x(kernel) == reads


def test_a_row_larger_than_shared_memory_is_not_kept():
    small = HardwareParams(max_shared_memory_per_block_optin=4096)
    assert any(row_kept(s) for s in generate_sketches(softmax(4, 512), small))  # 2 KB
    whole_rows = SketchParams(row_cluster_sizes=())  # a cluster block keeps a part of the row
    assert not any(row_kept(s) for s in generate_sketches(softmax(4, 2048), small, whole_rows))
