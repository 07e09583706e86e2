"""On the GPU: sampled single-pass states (sketch/single_pass.py, lower/single_pass.py) of the
full sum and the 2-norm of a 4096 x 4096 matrix, launched twice in a row on the same buffers
(the arrival counter must be back to zero after each launch) and compared with numpy; the two
launches must agree bit for bit (the last block sums the partials in a fixed order).

Marked `gpu`: tests/conftest.py skips them where no device is usable. Run with

    python -m pytest -q -n 0 -m gpu -s tests/gpu/test_gpu_single_pass.py
"""

from __future__ import annotations

import numpy as np
import pytest

from autosched import build
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.params import SketchParams
from autosched.task.evaluate import evaluate
from tests.sketch.test_cross_block import parts, sum_of_squares
from tests.sketch.test_single_pass import full_sum, single_pass

pytestmark = pytest.mark.gpu

ALWAYS = SketchParams(cross_block_single_pass=1)
N = 4096


def launched_twice(torch, kernel, a: np.ndarray, name: str, shape) -> list[np.ndarray]:
    """The output `name` of `kernel` run twice in a row on input A = `a` (NaN before each run)."""
    out = torch.empty(shape, dtype=torch.float32, device="cuda")
    tensors = {"A": torch.from_numpy(a).cuda(), name: out}
    launch = kernel.launcher(*(tensors[arg.name] for arg in kernel.tensor_args))
    got = []
    for _ in range(2):
        out.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        got.append(out.cpu().numpy().copy())
    return got


@pytest.mark.parametrize("make", [full_sum, sum_of_squares])
def test_single_pass_states_twice_in_a_row(make):
    torch = pytest.importorskip("torch")
    dag = make(N, N)
    sketches = [s for s in generate_sketches(dag, params=ALWAYS) if parts(s)]
    sampler = SketchSampler(sketches, params=ALWAYS)
    states = [s for s in sampler.sample(4, 0) if single_pass(s)]
    assert states, sampler.rejected
    a = np.random.default_rng(0).uniform(-1, 1, (N, N)).astype(np.float32)
    (name,) = [t.name for t in dag.outputs]
    want = evaluate(dag, {"A": a})[name]
    for state in states:
        kernel = build(dag, state)
        assert any(arg.zeroed for arg in kernel.args)
        got = launched_twice(torch, kernel, a, name, want.shape)
        np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-6 * N * N)
        assert got[0].tobytes() == got[1].tobytes(), "two launches differ"
