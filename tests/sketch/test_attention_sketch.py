"""Sketches of the attention DAG (topi/attention.py): both products on the Tensor Cores for
half-precision inputs; the softmax computed in the second product's kernel, as a kernel of its
own (KeepFetchedNormalization, softmax_fusion.py) or in the product's shared-memory fetch; and
a sampled state of every sketch run on the CPU interpreter against the numpy evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from autosched import te
from autosched.lower.interpreter import run_program
from autosched.lower.passes import device_program
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.stage import ATTACHED, INLINED, ROOT
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.softmax_fusion import WARP
from autosched.task.evaluate import evaluate
from autosched.te.dtype import from_storage, to_storage
from autosched.topi.attention import attention
from tests.sketch.test_sketch import sketches_text
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


# the kernels of the softmax's two kept forms: in the second product's Tensor Core kernel, or
# a kernel of its own (the second product's kernel is named after its epilogue, the output)
TWO_KERNELS = {"T_attention_scores", "T_attention"}
THREE_KERNELS = TWO_KERNELS | {"T_attention_probs"}


def kernels(state) -> set[str]:
    """The names of the stages computed at root (a kernel each), placeholders aside."""
    return {s.name for s in state.stages if s.compute_at == ROOT and not s.is_placeholder}


def attached_to(state, name: str) -> tuple[str, str]:
    """(stage, loop) a stage is computed at."""
    stage = next(s for s in state.stages if s.name == name)
    assert stage.compute_at == ATTACHED
    return state.stages[stage.attach[0]].name, stage.attach[1]


@pytest.mark.parametrize("name", list(CASES))
def test_the_softmax_schedules(name):
    """KeepFetchedNormalization's forms beside the inlined one: the probabilities a kernel of
    their own computing the row max and sum at their row loop; for a Tensor Core product, all
    three computed at its block loop (two kernels in all); inlined into the product's fetch,
    the max and the sum kernels of their own."""
    sketches = generate_sketches(attention_dag(*CASES[name]))
    by_kernels = {frozenset(kernels(s)): s for s in sketches}
    kept = by_kernels[frozenset(THREE_KERNELS)]
    for row in ("T_attention_max", "T_attention_sum"):
        assert attached_to(kept, row) == ("T_attention_probs", "i")
    fetched = [
        s for s in sketches if s.stages[s.stage_index("T_attention_probs")].compute_at == INLINED
    ]
    assert fetched
    for sketch in fetched:
        stages = {s.name: s for s in sketch.stages}
        for inlined in ("T_attention_logits", "T_attention_exp", "T_attention_probs"):
            assert stages[inlined].compute_at == INLINED
        assert "T_attention_probs.shared" in stages
    fused = by_kernels.get(frozenset(TWO_KERNELS))
    if CASES[name][0] == "float32":  # no Tensor Core kernel to compute the softmax in
        assert fused is None
        return
    block = next(s for s in fused.stages if s.name == "T_attention").iters[0]
    assert block.annotation == "blockIdx.x"
    assert attached_to(fused, "T_attention_probs") == ("T_attention", block.name)
    for row in ("T_attention_max", "T_attention_sum"):
        assert attached_to(fused, row) == ("T_attention_probs", "i_i")
    probs = {
        it.name: it for it in next(s for s in fused.stages if s.name == "T_attention_probs").iters
    }
    assert probs["i_i"].annotation == "threadIdx.y"
    assert probs["j_i"].annotation == "threadIdx.x" and probs["j_i"].extent == WARP


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


def test_sketches_golden(golden):
    """The fp16 causal DAG's sketches as tests/golden/sketch_attention_fp16.txt holds them
    (after a rule change: pytest --update-golden, then review the diff)."""
    golden(
        "sketch_attention_fp16.txt",
        sketches_text(generate_sketches(attention_dag(*CASES["fp16_causal"]))),
    )
