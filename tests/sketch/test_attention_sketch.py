"""Sketches of the attention DAG (topi/attention.py): both products on the Tensor Cores for
half-precision inputs, the softmax as one kernel (KeepFetchedNormalization) or computed in the
second product's shared-memory fetch, and a sampled state of every sketch run on the CPU
interpreter against the numpy evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from autosched import te
from autosched.lower.interpreter import run_program
from autosched.lower.passes import device_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import ATTACHED, INLINED, ROOT
from autosched.sketch import SketchSampler, generate_sketches
from autosched.task.evaluate import evaluate
from autosched.te.dtype import from_storage, to_storage
from autosched.topi.attention import attention
from tests.te.test_topi_attention import TOLERANCE, padding_mask

# (dtype, BH, Sq, Skv, D, causal, mask): sequence lengths that are not multiples of 16
CASES = {
    "fp16_causal": ("float16", 2, 40, 40, 16, True, False),
    "bf16_mask": ("bfloat16", 2, 24, 40, 16, False, True),
    "fp32_causal_mask": ("float32", 2, 24, 40, 16, True, True),
}
N_STATES = 1  # per sketch


def attention_dag(dtype, bh, sq, skv, d, causal, with_mask):
    q = te.placeholder((bh, sq, d), dtype, "q")
    k = te.placeholder((bh, skv, d), dtype, "k")
    v = te.placeholder((bh, skv, d), dtype, "v")
    mask = te.placeholder((bh, sq, skv), "float32", "mask") if with_mask else None
    out = attention(q, k, v, scale=0.25, causal=causal, mask=mask)
    return ComputeDAG([q, k, v] + ([mask] if mask is not None else []) + [out])


def accumulators(state) -> set[str]:
    return {s.name for s in state.stages if s.name.endswith(".wmma.accumulator")}


@pytest.mark.parametrize("name", ["fp16_causal", "bf16_mask"])
def test_both_products_use_tensor_cores(name):
    sketches = generate_sketches(attention_dag(*CASES[name]))
    assert sketches
    for sketch in sketches:
        assert accumulators(sketch) == {
            "T_attention_scores.wmma.accumulator",
            "T_attention_pv.wmma.accumulator",
        }


# the fused softmax's kernels: the first product, the softmax, the second product (whose kernel
# is named after its epilogue, the output)
THREE_KERNELS = {"T_attention_scores", "T_attention_probs", "T_attention"}


def kernels(state) -> set[str]:
    """The names of the stages computed at root (a kernel each), placeholders aside."""
    return {s.name for s in state.stages if s.compute_at == ROOT and not s.is_placeholder}


@pytest.mark.parametrize("name", list(CASES))
def test_softmax_in_one_kernel_or_in_the_product_fetch(name):
    """Two families: the probabilities kept as a kernel that also computes the row max and sum
    (KeepFetchedNormalization: three kernels), or computed in the second product's fetch of its
    shared probability tile (the max and the sum then two kernels of their own)."""
    sketches = generate_sketches(attention_dag(*CASES[name]))
    kept = [s for s in sketches if "T_attention_probs" in kernels(s)]
    fetched = [s for s in sketches if s not in kept]
    assert kept and fetched
    fused = [s for s in kept if kernels(s) == THREE_KERNELS]
    assert len(fused) == 1  # CrossThreadReduction also leaves either reduction a kernel
    stages = {s.name: s for s in fused[0].stages}
    for row in ("T_attention_max", "T_attention_sum"):
        assert stages[row].compute_at == ATTACHED
        assert fused[0].stages[stages[row].attach[0]].name == "T_attention_probs"
    for sketch in fetched:
        stages = {s.name: s for s in sketch.stages}
        for inlined in ("T_attention_logits", "T_attention_exp", "T_attention_probs"):
            assert stages[inlined].compute_at == INLINED
        assert "T_attention_probs.shared" in stages


@pytest.mark.parametrize("name", list(CASES))
def test_sampled_states_compute_attention(name):
    dtype, bh, sq, skv, d, causal, with_mask = CASES[name]
    dag = attention_dag(*CASES[name])
    rng = np.random.default_rng(1)
    inputs = {
        t.name: to_storage(rng.uniform(-2, 2, t.shape), dtype)
        for t in dag.tensors
        if t.name in ("q", "k", "v")
    }
    if with_mask:
        inputs["mask"] = padding_mask(bh, sq, skv)
    expected = evaluate(dag, inputs)
    out = dag.outputs[0]
    want = from_storage(expected[out.name], dtype).astype(np.float64)
    for sketch in generate_sketches(dag):
        sampler = SketchSampler([sketch])
        for state in sampler.sample(N_STATES, 0):
            check_program(device_program(sampler.programs[state.key()]), inputs, out, want)


def check_program(program, inputs, out, want) -> None:
    """Run `program` on copies of `inputs`, every other buffer NaN at first, and compare its
    output with `want` at the output dtype's tolerance."""
    arrays = {k: a.copy() for k, a in inputs.items()}
    for b in program.params:
        if b.name not in arrays:
            arrays[b.name] = to_storage(np.full(b.shape, np.nan), b.dtype)
    run_program(program, arrays)
    got = from_storage(arrays[out.name], out.dtype).astype(np.float64)
    tol = TOLERANCE[out.dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
