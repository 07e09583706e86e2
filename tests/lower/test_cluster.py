"""Thread-block clusters in the IR (`lower/cluster_ir.py`): the CPU interpreter's cluster loads
and cluster barriers against numpy, the races it flags, the verifier's rules, the CUDA text,
and (with nvcc) that the kernel compiles for sm_90 without spills."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autosched.codegen.cuda import codegen_program
from autosched.errors import LoweringError
from autosched.lower import cluster_ir as ci
from autosched.lower import ir
from autosched.lower.interpreter import InterpreterError, run_program
from autosched.lower.ir_text import program_text
from autosched.lower.verify import verify_program
from autosched.te.expr import Const, Var, binary
from measure import compile_resources
from tests.compilers import needs_nvcc
from tests.lower.cluster_programs import cluster_softmax_program, softmax_reference


def run(program: ir.Program, rows: int = 4, n: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).standard_normal((rows, n)).astype(np.float32) * 4
    y = np.full_like(x, np.nan)
    run_program(program, {"X": x, "Y": y})
    return y, softmax_reference(x)


def with_kernel(program: ir.Program, **changes) -> ir.Program:
    (kernel,) = program.kernels
    return ir.Program([dataclasses.replace(kernel, **changes)], program.params, program.outputs)


@pytest.mark.parametrize(("cluster", "threads"), [(2, 128), (4, 128), (8, 64)])
def test_interpreter_runs_a_row_over_a_cluster_like_numpy(cluster, threads):
    program = cluster_softmax_program(cluster=cluster, threads=threads)
    verify_program(program)
    y, ref = run(program)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-7)


# ---- what the interpreter flags -----------------------------------------------------------


def test_read_without_a_cluster_barrier_after_the_write_is_a_race():
    with pytest.raises(InterpreterError, match=r"race on shared buffer part_max.*barrier\.cluster"):
        run(cluster_softmax_program(max_barrier=False))


def test_overwriting_what_another_block_may_still_read_is_a_race():
    with pytest.raises(
        InterpreterError, match="overwrites element .0. that .* through its cluster"
    ):
        run(cluster_softmax_program(reuse_partials=True))


def test_ending_before_the_others_read_is_an_error():
    with pytest.raises(InterpreterError, match="ends while .* a barrier.cluster must follow"):
        run(cluster_softmax_program(final_barrier=False))


def test_rank_outside_the_cluster_is_an_error():
    with pytest.raises(InterpreterError, match="rank 4 .* outside its cluster of 4 blocks"):
        run(cluster_softmax_program(rank_offset=1))


def test_cluster_barrier_reached_by_part_of_a_cluster_is_divergent():
    program = cluster_softmax_program(rows=1, n=256, cluster=2, threads=128)
    (kernel,) = program.kernels
    first_block = binary("==", ir.THREAD_VARS["blockIdx.x"], ir.int32(0))
    body = ir.seq([ir.IfThenElse(first_block, ci.ClusterBarrier()), kernel.body])
    with pytest.raises(InterpreterError, match="barrier.cluster reached by only 128 of 256"):
        run(with_kernel(program, body=body), rows=1, n=256)


def test_grid_not_a_whole_number_of_clusters_is_an_error():
    program = with_kernel(cluster_softmax_program(cluster=4), grid=(6, 4, 1))
    with pytest.raises(InterpreterError, match="not a whole number of clusters of 4"):
        run(program)


def test_a_kernel_without_clusters_runs_as_before():
    program = cluster_softmax_program(cluster=2)
    assert ci.uses_cluster(program.kernels[0])
    plain = ir.Kernel("k", (2, 1, 1), (4, 1, 1), [], ir.Barrier())
    assert not ci.uses_cluster(plain)


# ---- the verifier -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("switch", "message"),
    [
        ({"max_barrier": False}, "cluster load of part_max after its write by an allreduce"),
        ({"final_barrier": False}, "no cluster barrier follows the last cluster load"),
        ({"reuse_partials": True}, "allreduce into part_max after another block's cluster load"),
        ({"rank_offset": 1}, r"rank \(r \+ 1\) ranges over 1..4, beyond the cluster's 4"),
    ],
)
def test_verifier_rejects_unordered_cluster_accesses(switch, message):
    with pytest.raises(LoweringError, match=message):
        verify_program(cluster_softmax_program(**switch))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cluster": 3}, "cluster of 3 blocks, not 1 or one of"),
        ({"grid": (6, 4, 1)}, "grid x extent 6 is not a multiple of its cluster of 4"),
        ({"cluster": 1}, "variable 'cluster_rank' is not bound"),
    ],
)
def test_verifier_rejects_bad_cluster_launches(changes, message):
    with pytest.raises(LoweringError, match=message):
        verify_program(with_kernel(cluster_softmax_program(cluster=4), **changes))


def test_verifier_rejects_a_cluster_barrier_without_clusters():
    kernel = ir.Kernel("k", (2, 1, 1), (32, 1, 1), [], ci.ClusterBarrier())
    x = ir.Buffer("X", (8,), "float32")
    with pytest.raises(LoweringError, match="barrier.cluster in a kernel launched without"):
        verify_program(ir.Program([kernel], [x], [x]))


def test_verifier_rejects_a_cluster_load_from_global_memory():
    X, Y = (ir.Buffer(name, (8,), "float32") for name in "XY")
    got = ir.Buffer("got", (1,), "float32", "local")
    body = ir.seq(
        [ci.ClusterLoad(got, ir.int32(0), X, ir.int32(0), ir.int32(0)), ci.ClusterBarrier()]
    )
    kernel = ir.Kernel("k", (2, 1, 1), (32, 1, 1), [got], body, cluster=2)
    with pytest.raises(LoweringError, match="reads a global buffer; only shared memory"):
        verify_program(ir.Program([kernel], [X, Y], [Y]))


def test_verifier_rejects_a_cluster_barrier_some_blocks_skip():
    program = cluster_softmax_program(cluster=2, threads=128, n=256, rows=1)
    (kernel,) = program.kernels
    first = binary("==", ci.CLUSTER_RANK, ir.int32(0))
    body = ir.seq([ir.IfThenElse(first, ir.Barrier(), ci.ClusterBarrier()), kernel.body])
    with pytest.raises(LoweringError, match=r"block-dependent condition \(cluster_rank == 0\)"):
        verify_program(with_kernel(program, body=body))


def test_verifier_rejects_a_divergent_cluster_barrier():
    program = cluster_softmax_program(cluster=2, threads=128, n=256, rows=1)
    (kernel,) = program.kernels
    lane0 = binary("==", ir.THREAD_VARS["threadIdx.x"], ir.int32(0))
    body = ir.seq([ir.IfThenElse(lane0, ci.ClusterBarrier()), kernel.body])
    with pytest.raises(LoweringError, match="barrier.cluster under the thread-dependent"):
        verify_program(with_kernel(program, body=body))


# ---- text ---------------------------------------------------------------------------------


def test_cuda_text_declares_the_cluster_and_reads_through_mapa():
    source = codegen_program(cluster_softmax_program(cluster=4))
    assert "__launch_bounds__(128, 1) __cluster_dims__(4, 1, 1) cluster_softmax(" in source
    assert "const int cluster_rank = as_cluster_rank();" in source
    assert "%%cluster_ctarank" in source
    assert "got[0] = as_cluster_load(&part_max[0], r);" in source
    for ptx in (
        "mapa.shared::cluster.u32",
        "ld.shared::cluster.b32",
        "barrier.cluster.arrive.release.aligned",
        "barrier.cluster.wait.acquire.aligned",
    ):
        assert ptx in source
    assert source.count("as_cluster_sync();") == 3


def test_cuda_text_of_a_kernel_without_clusters_has_none_of_it():
    x = ir.Buffer("X", (4,), "float32")
    kernel = ir.Kernel(
        "k", (1, 1, 1), (1, 1, 1), [], ir.Store(x, ir.int32(0), Const(1.0, "float32"))
    )
    source = codegen_program(ir.Program([kernel], [x], [x]))
    assert "cluster" not in source


def test_ir_text_shows_the_cluster_statements():
    text = program_text(cluster_softmax_program(cluster=2))
    assert "cluster=2" in text.splitlines()[0]
    assert "got[0] = part_max[0] of cluster block r" in text
    assert "barrier.cluster" in text


def test_cluster_load_expressions_map_like_other_statements():
    from autosched.lower.stmt_walk import map_exprs

    got = ir.Buffer("got", (2,), "float32", "local")
    part = ir.Buffer("part", (2,), "float32", "shared")
    i = Var("i")
    load = ci.ClusterLoad(got, i, part, i, ci.CLUSTER_RANK)
    mapped = map_exprs(load, lambda e: binary("+", e, ir.int32(1)) if e is i else e)
    assert isinstance(mapped, ci.ClusterLoad)
    assert repr(mapped.dst_index) == repr(mapped.src_index) == "(i + 1)"
    assert mapped.rank is ci.CLUSTER_RANK and mapped.src is part


@needs_nvcc
def test_compiles_for_sm_90_without_spills():
    resources = compile_resources(codegen_program(cluster_softmax_program()), arch="sm_90")
    (res,) = resources.values()
    assert res.spill_bytes == 0 and res.stack_bytes == 0
