"""Long rows split over a thread-block cluster (sketch/row_cluster.py `RowOverCluster`): with
`SketchParams.row_cluster_sizes` (default 2, 4, 8 and, for rows too few for 8, 16; empty: off), the
block-per-row sketches of softmax, layer norm (centred and moments forms) and RMSNorm with few rows
also split each row over C blocks of a cluster, which exchange their partial statistics through
distributed shared memory, each block's part read from global memory by every pass or once into
shared memory. The sampled kernels compute the DAG on the interpreter, replay from their steps,
print as a Python schedule and (with nvcc) compile for sm_90 without spills."""

from __future__ import annotations

import json

import pytest

from autosched import te, topi
from autosched.codegen.build import build
from autosched.errors import LoweringError
from autosched.lower import cluster_ir as ci
from autosched.lower import ir
from autosched.lower.lowering import lower
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import CLUSTER_RANK_TAG
from autosched.schedule.steps import print_python_schedule, replay
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.launch_bounds import launch_shape, row_cache_bytes
from autosched.sketch.params import SketchParams
from measure import compile_resources
from measure.hardware import HardwareParams
from tests.compilers import needs_nvcc
from tests.interpreter_check import interpret_and_compare
from tests.sketch.test_cross_block import rms_norm
from tests.sketch.test_row_in_shared import softmax
from tests.sketch.test_sketch import sketches_text

CLUSTERS = SketchParams(row_cluster_sizes=(2, 4))


def layer_norm(m: int, n: int, moments: bool) -> ComputeDAG:
    x = te.placeholder((m, n), name="x")
    gamma, beta = te.placeholder((n,), name="gamma"), te.placeholder((n,), name="beta")
    return ComputeDAG([x, gamma, beta, topi.layer_norm(x, gamma, beta, moments=moments)])


DAGS = {
    "softmax": lambda: softmax(4, 2048),
    "layer_norm": lambda: layer_norm(4, 2048, moments=False),
    "layer_norm_moments": lambda: layer_norm(4, 2048, moments=True),
    "rms_norm": lambda: rms_norm(4, 2048),
}


def cluster_sizes(sketch) -> set[int]:
    """The extents of the sketch's iterators bound to the cluster rank."""
    return {
        it.extent for st in sketch.stages for it in st.iters if it.annotation == CLUSTER_RANK_TAG
    }


def clustered(sketches) -> list:
    return [s for s in sketches if cluster_sizes(s)]


@pytest.mark.parametrize("name", list(DAGS))
def test_rows_over_clusters_compute_the_dag(name):
    dag = DAGS[name]()
    assert clustered(generate_sketches(dag))  # on by default (sm_90)
    assert not clustered(generate_sketches(dag, params=SketchParams(row_cluster_sizes=())))
    sketches = clustered(generate_sketches(dag, params=CLUSTERS))
    assert {frozenset(cluster_sizes(s)) for s in sketches} == {frozenset({2}), frozenset({4})}
    # (the streaming twins of the register states: test_row_in_registers.py)
    sketches = [s for s in sketches if not any(st.stream_reads for st in s.stages)]
    sampler = SketchSampler(sketches, params=CLUSTERS)
    states = sampler.sample(6, 0)
    assert states, sampler.rejected
    cached: set[int] = set()  # the parts kept in shared memory, times the cluster size
    for state in states:
        kernel = build(dag, state)
        (k,) = kernel.program.kernels
        assert k.cluster in (2, 4) and k.grid[0] == 4 * k.cluster
        loads = [s for s in ir.iter_stmts(k.body) if isinstance(s, ci.ClusterLoad)]
        assert loads and all(s.src.scope == "shared" for s in loads)
        cached.update(b.size * k.cluster for b in k.allocs if b.name == "x_shared")
        root = len(state.stages) - 1
        if any(b.name == "x_shared" for b in k.allocs):  # what LaunchBounds counts per block
            assert row_cache_bytes(state, root) == 2048 * 4 // max(cluster_sizes(state))
        if any(b.async_copy for b in k.allocs):  # copies land before the cluster barrier too
            assert "as_cp_async_wait_all();\n  as_cluster_sync();" in kernel.source
        interpret_and_compare(dag, kernel.program, rtol=1e-4)
        assert 'te.thread_axis("clusterCtaIdx.x")' in print_python_schedule(state)
        records = json.loads(json.dumps([step.to_record() for step in state.steps]))
        assert replay(dag, records) == state
        assert launch_shape(state, root)[0] == 4 * max(cluster_sizes(state))
    assert cached == {2048}  # a block keeps its part of the row, no more


def test_cluster_sketches_golden(golden):
    """The cluster sketches of layer norm's moments form, as tests/golden holds them."""
    sketches = clustered(generate_sketches(DAGS["layer_norm_moments"](), params=CLUSTERS))
    golden("sketch_row_cluster_layer_norm_moments.txt", sketches_text(sketches))


def test_only_cross_thread_reductions_bind_a_reduction_to_the_cluster_rank():
    dag = softmax(4, 2048)
    state = dag.get_init_state()
    i = next(k for k, st in enumerate(state.stages) if st.name == "T_softmax_maxelem")
    state = state.split(i, "k", [2], inner_to_outer=False).bind(i, "k_o", CLUSTER_RANK_TAG)
    state = state.bind(i, "i0", "blockIdx.x")
    with pytest.raises(LoweringError, match="binds k_o to the cluster rank, which only"):
        lower(state)


def test_no_clusters_before_hopper():
    ampere = HardwareParams(arch="sm_80")
    assert not clustered(generate_sketches(softmax(4, 2048), ampere, CLUSTERS))


def test_no_clusters_for_rows_too_short_to_split():
    assert not clustered(generate_sketches(softmax(4, 512), params=CLUSTERS))
    four_only = clustered(generate_sketches(softmax(4, 1024), params=CLUSTERS))
    assert {frozenset(cluster_sizes(s)) for s in four_only} == {frozenset({2})}


def test_no_clusters_where_rows_already_fill_the_sms():
    two_sms = HardwareParams(num_sms=2)
    assert clustered(generate_sketches(softmax(4, 2048), two_sms, CLUSTERS))  # 2 rows per SM
    assert not clustered(generate_sketches(softmax(8, 2048), two_sms, CLUSTERS))  # 4 per SM


def test_clusters_of_16_only_for_rows_too_few_for_8():
    """Clusters of 16 blocks (above the portable 8) are drawn for 2 rows, which clusters of 8
    leave on 16 of 132 SMs, and compute the DAG; 32 rows fill more SMs than there are with
    clusters of 8 and keep the portable sizes."""
    dag = rms_norm(2, 8192)  # a part of 512 floats a block at 16
    sizes = set().union(*map(cluster_sizes, generate_sketches(dag)))
    assert sizes == {2, 4, 8, 16}
    assert 16 not in set().union(*map(cluster_sizes, generate_sketches(rms_norm(32, 8192))))
    only_16 = SketchParams(row_cluster_sizes=(16,))
    sketches = clustered(generate_sketches(dag, params=only_16))
    # (a thread count above a part's 512 / 4 vectors leaves the rank's loop fewer than 16)
    states = SketchSampler(sketches, params=only_16).sample(4, 0)
    kernels = [build(dag, s) for s in states]
    kernel = next(x for x in kernels if x.program.kernels[0].cluster == 16)
    assert kernel.program.kernels[0].grid[0] == 32
    assert kernel.launches[0].cluster_blocks == 16
    assert "__cluster_dims__(16, 1, 1)" in kernel.source
    interpret_and_compare(dag, kernel.program, rtol=1e-4)


def test_cluster_sizes_are_checked():
    with pytest.raises(ValueError, match="row_cluster_sizes must be among"):
        SketchParams(row_cluster_sizes=(3,))


@needs_nvcc
@pytest.mark.parametrize("name", list(DAGS))
def test_cluster_kernels_compile_for_sm_90_without_spills(name):
    dag = DAGS[name]()
    sampler = SketchSampler(clustered(generate_sketches(dag, params=CLUSTERS)), params=CLUSTERS)
    for state in sampler.sample(2, 1):
        source = build(dag, state).source
        assert "__cluster_dims__(" in source and "ld.shared::cluster" in source
        (res,) = compile_resources(source, arch="sm_90").values()
        assert res.spill_bytes == 0 and res.stack_bytes == 0
