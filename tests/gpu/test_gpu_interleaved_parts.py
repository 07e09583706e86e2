"""On the GPU: sampled states of the interleaved cross-block sketches
(`CrossBlockReduction.interleaved`: each block reads every P-th chunk) of the memory-bound
benchmark's full sum, 2-norm and few long rows, at their full sizes on the device's SMs,
compared with numpy; those in one kernel launched twice in a row (the arrival counter back to
zero) and equal bit for bit.

Marked `gpu`: tests/conftest.py skips them where no device is usable. Run with

    python -m pytest -q -n 0 -m gpu -s tests/gpu/test_gpu_interleaved_parts.py
"""

from __future__ import annotations

import numpy as np
import pytest

from autosched import build
from autosched.sketch import SketchSampler, generate_sketches
from autosched.task.evaluate import evaluate
from tests.gpu.test_gpu_single_pass import launched_twice
from tests.sketch.test_cross_block import row_sums
from tests.sketch.test_cross_block_parts import full_sum, interleaved, norm2, partial_sums
from tests.sketch.test_single_pass import single_pass

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "dag, shape",
    [
        (full_sum(16384, 4096), (16384, 4096)),
        (norm2(4096, 4096), (4096, 4096)),
        (row_sums((8, 1 << 21)), (8, 1 << 21)),
    ],
    ids=["sum_16384x4096", "norm2_4096x4096", "row_sum_8x2M"],
)
def test_interleaved_states_match_numpy(dag, shape):
    torch = pytest.importorskip("torch")
    sketches = [
        s
        for s in interleaved(generate_sketches(dag))
        if any(it.annotation == "vectorize" for it in partial_sums(s).iters)
    ]
    sampler = SketchSampler(sketches)
    states = sampler.sample(4, 0)
    assert states, sampler.rejected
    a = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    (name,) = [t.name for t in dag.outputs]
    want = evaluate(dag, {"A": a})[name]
    for state in states:
        kernel = build(dag, state)
        got = launched_twice(torch, kernel, a, name, want.shape)
        np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-6 * a.size)
        if single_pass(state):
            assert got[0].tobytes() == got[1].tobytes(), "two launches differ"
