"""softmax_fusion.py on a softmax written with topi, cast to fp16 and multiplied on the Tensor
Cores: which stages KeepFetchedNormalization takes (only when nothing else reads the row
reductions), and the one-kernel sketch it makes, run on the CPU interpreter."""

from __future__ import annotations

import numpy as np

from autosched import te, topi
from autosched.lower.interpreter import run_program
from autosched.lower.passes import device_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import ROOT
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.softmax_fusion import find_normalization
from autosched.task.evaluate import evaluate
from autosched.te.dtype import from_storage, to_storage


def softmax_product(expose_sum: bool = False) -> ComputeDAG:
    """fp16(fp16(softmax(x)) @ v); with `expose_sum` the row sum is an output as well."""
    x = te.placeholder((2, 32, 48), "float32", "x")
    v = te.placeholder((2, 48, 16), "float16", "v")
    soft = topi.softmax(x)
    probs = te.compute(soft.shape, lambda b, i, j: te.cast(soft[b, i, j], "float16"), name="P")
    product = topi.batch_matmul(probs, v, transpose_b=False, out_dtype="float32")
    outs = [topi.cast(product, "float16")]
    if expose_sum:
        outs.append(soft.op.input_tensors[1])  # T_softmax_expsum
    return ComputeDAG([x, v, *outs])


def roots(state) -> set[str]:
    return {s.name for s in state.stages if s.compute_at == ROOT and not s.is_placeholder}


def test_a_normalisation_read_only_by_the_fetch_is_found():
    state = softmax_product().get_init_state()
    p = state.stage_index("P")
    assert find_normalization(state, p) is None  # read by the product itself, not a cache
    state = state.cache_read(p, "shared", [state.stage_index("T_batch_matmul_NN")])
    norm = find_normalization(state, p)
    assert norm is not None and norm.cache == p + 1
    assert {op.name for op in norm.reductions} == {"T_softmax_maxelem", "T_softmax_expsum"}


def test_reductions_read_elsewhere_are_left_alone():
    exposed = generate_sketches(softmax_product(expose_sum=True))
    assert all("T_softmax_expsum" in roots(s) for s in exposed)
    assert not any(roots(s) <= {"T_cast", "T_softmax_expsum"} for s in exposed)


def test_softmax_and_product_in_one_kernel():
    dag = softmax_product()
    one = [s for s in generate_sketches(dag) if roots(s) == {"T_cast"}]
    assert one  # the softmax at the Tensor Core kernel's block loop: one kernel in all
    rng = np.random.default_rng(0)
    inputs = {
        "x": rng.uniform(-3, 3, (2, 32, 48)).astype("float32"),
        "v": to_storage(rng.uniform(-1, 1, (2, 48, 16)), "float16"),
    }
    want = from_storage(evaluate(dag, inputs)["T_cast"], "float16").astype(np.float64)
    sampler = SketchSampler(one)
    for state in sampler.sample(2, 0):
        program = device_program(sampler.programs[state.key()])
        assert len(program.kernels) == 1
        arrays = {k: a.copy() for k, a in inputs.items()}
        for b in program.params:
            arrays.setdefault(b.name, to_storage(np.full(b.shape, np.nan), b.dtype))
        run_program(program, arrays)
        got = from_storage(arrays["T_cast"], "float16").astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
