"""On the GPU (sm_90 or later): thread-block cluster kernels against numpy. The hand-built
cluster softmax (`tests/lower/cluster_programs.py`) for each cluster size and a long row, and
sampled states of the sketch rule that splits normalisations' rows over a cluster
(sketch/row_cluster.py) for softmax, layer norm (both forms) and RMSNorm, and sampled states
that keep the rows (or a cluster block's part) in registers (a thread-private cache), with
clusters and without, and softmax over clusters with one (max, sum) exchange
(`online_exchange`), clusters of 16 blocks (non-portable), and the register states that keep the
row's operands beside it.

    python -m pytest -q -n 0 -m gpu -s tests/gpu/test_gpu_cluster.py
"""

from __future__ import annotations

import numpy as np
import pytest

from autosched.schedule.stage import CLUSTER_RANK_TAG
from autosched.sketch import SketchParams, SketchSampler, generate_sketches
from autosched.sketch.online_exchange import online_candidates
from tests.gpu.test_gpu_kernels import run_on_gpu
from tests.lower.cluster_programs import cluster_softmax_program, softmax_reference
from tests.sketch.test_row_cluster import layer_norm
from tests.sketch.test_row_in_shared import rms_norm, softmax

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    ("rows", "n", "cluster", "threads"),
    [
        (4, 2048, 2, 128),
        (4, 2048, 4, 128),
        (4, 2048, 8, 64),
        (8, 32768, 8, 512),
        (2, 32768, 16, 512),  # non-portable: gpu_call allows it before the launch
    ],
)
def test_hand_built_cluster_softmax_matches_numpy(rows, n, cluster, threads):
    from autosched.codegen.build import build_program

    program = cluster_softmax_program(rows=rows, n=n, cluster=cluster, threads=threads)
    x = np.random.default_rng(0).standard_normal((rows, n)).astype(np.float32) * 4
    y = np.full_like(x, np.nan)
    build_program(program)(x, y)
    np.testing.assert_allclose(y, softmax_reference(x), rtol=1e-5, atol=1e-7)


SKETCHED = {
    "softmax": lambda: softmax(16, 16384),
    "layer_norm": lambda: layer_norm(16, 16384, moments=False),
    "layer_norm_moments": lambda: layer_norm(16, 16384, moments=True),
    "rms_norm": lambda: rms_norm(16, 16384),
}


@pytest.mark.parametrize("name", list(SKETCHED))
def test_rows_over_clusters_match_numpy(name):
    dag = SKETCHED[name]()
    params = SketchParams(row_cluster_sizes=(2, 4, 8))
    sketches = [
        s
        for s in generate_sketches(dag, params=params)
        if any(it.annotation == CLUSTER_RANK_TAG for st in s.stages for it in st.iters)
    ]
    sampler = SketchSampler(sketches, params=params)
    states = sampler.sample(6, 0)
    assert states, sampler.rejected
    for state in states:
        kernel = run_on_gpu(dag, state)
        assert "__cluster_dims__(" in kernel.source


@pytest.mark.parametrize("clusters", [(), (2, 4, 8)], ids=["whole_rows", "clusters"])
@pytest.mark.parametrize("name", list(SKETCHED))
def test_rows_in_registers_match_numpy(name, clusters):
    dag = SKETCHED[name]()
    params = SketchParams(row_cluster_sizes=clusters)
    sketches = [
        s
        for s in generate_sketches(dag, params=params)
        if any(st.name == "x.local" for st in s.stages)
        and bool(clusters)
        == any(it.annotation == CLUSTER_RANK_TAG for st in s.stages for it in st.iters)
    ]
    sampler = SketchSampler(sketches, params=params)
    states = sampler.sample(4, 0)
    assert states, sampler.rejected
    for state in states:
        kernel = run_on_gpu(dag, state)
        assert "x_local[" in kernel.source


def test_softmax_with_one_exchange_matches_numpy():
    dag = SKETCHED["softmax"]()
    params = SketchParams(row_cluster_sizes=(2, 4, 8))
    sketches = [
        s
        for s in generate_sketches(dag, params=params)
        if any(it.annotation == CLUSTER_RANK_TAG for st in s.stages for it in st.iters)
    ]
    sampler = SketchSampler(sketches, params=params)
    states = sampler.sample(6, 1)
    assert states, sampler.rejected
    for state in states:
        (i,) = online_candidates(state)
        kernel = run_on_gpu(dag, state.pragma(i, 0, "online_exchange", 1))
        assert kernel.source.count("as_cluster_sync();") == 2  # one exchange, and the last


def test_rows_over_clusters_of_16_match_numpy():
    """2 rows over clusters of 16 blocks, above the portable 8: the launch allows it first."""
    dag = rms_norm(2, 16384)
    params = SketchParams(row_cluster_sizes=(16,))
    sketches = [
        s
        for s in generate_sketches(dag, params=params)
        if any(it.annotation == CLUSTER_RANK_TAG for st in s.stages for it in st.iters)
    ]
    sampler = SketchSampler(sketches, params=params)
    sources = [run_on_gpu(dag, state).source for state in sampler.sample(4, 0)]
    assert any("__cluster_dims__(16" in source for source in sources), sampler.rejected


@pytest.mark.parametrize("name", ["layer_norm", "layer_norm_moments", "rms_norm"])
def test_row_operands_in_registers_match_numpy(name):
    dag = SKETCHED[name]()
    params = SketchParams(row_cluster_sizes=(2, 4, 8))
    sketches = [
        s
        for s in generate_sketches(dag, params=params)
        if sum(st.name.endswith(".local") for st in s.stages) > 1
    ]
    sampler = SketchSampler(sketches, params=params)
    states = sampler.sample(4, 0)
    assert states, sampler.rejected
    for state in states:
        kernel = run_on_gpu(dag, state)
        assert "x_local[" in kernel.source
