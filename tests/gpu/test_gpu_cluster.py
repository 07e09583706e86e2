"""On the GPU (sm_90 or later): the hand-built thread-block cluster softmax
(`tests/lower/cluster_programs.py`) against numpy, for each cluster size, and a long row.

    python -m pytest -q -n 0 -m gpu -s tests/gpu/test_gpu_cluster.py
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.lower.cluster_programs import cluster_softmax_program, softmax_reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    ("rows", "n", "cluster", "threads"),
    [(4, 2048, 2, 128), (4, 2048, 4, 128), (4, 2048, 8, 64), (8, 32768, 8, 512)],
)
def test_cluster_softmax_matches_numpy(rows, n, cluster, threads):
    from autosched.codegen.build import build_program

    program = cluster_softmax_program(rows=rows, n=n, cluster=cluster, threads=threads)
    x = np.random.default_rng(0).standard_normal((rows, n)).astype(np.float32) * 4
    y = np.full_like(x, np.nan)
    build_program(program)(x, y)
    np.testing.assert_allclose(y, softmax_reference(x), rtol=1e-5, atol=1e-7)
