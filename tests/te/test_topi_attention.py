"""topi.attention (topi/attention.py): the DAG's values against the numpy reference for every
input dtype, causal and padding masks (rows masked everywhere included), Sq != Skv; the bad
inputs it names; the registered workloads."""

from __future__ import annotations

import re

import numpy as np
import pytest

from autosched import te
from autosched.errors import TEError
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.attention_workloads import ATTENTION_SUITE
from autosched.task.evaluate import evaluate
from autosched.task.workload_registry import make_workload_key, workload_tensors
from autosched.te.dtype import from_storage, to_storage
from autosched.topi import testing as ref
from autosched.topi.attention import attention

# the output's tolerance per dtype: fp32 sums, then the probabilities rounded to the input
# dtype for the second product and the output rounded to it
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def padding_mask(bh: int, sq: int, skv: int) -> np.ndarray:
    """0 where a key is visible, -inf past a per-head length; query row 1 sees nothing."""
    mask = np.zeros((bh, sq, skv), np.float32)
    for b in range(bh):
        mask[b, :, skv - 3 - 5 * b :] = -np.inf
    mask[:, 1, :] = -np.inf
    return mask


def check_attention(dtype, bh, sq, skv, d, dv, causal=False, with_mask=False, out_dtype=None):
    rng = np.random.default_rng(0)
    q = te.placeholder((bh, sq, d), dtype, "q")
    k = te.placeholder((bh, skv, d), dtype, "k")
    v = te.placeholder((bh, skv, dv), dtype, "v")
    mask = te.placeholder((bh, sq, skv), "float32", "mask") if with_mask else None
    scale = 1.0 / np.sqrt(d)
    out = attention(q, k, v, scale=scale, causal=causal, mask=mask, out_dtype=out_dtype)
    dag = ComputeDAG([q, k, v] + ([mask] if mask is not None else []) + [out])
    inputs = {t.name: to_storage(rng.uniform(-2, 2, t.shape), dtype) for t in (q, k, v)}
    values = {name: from_storage(a, dtype) for name, a in inputs.items()}
    if mask is not None:
        inputs["mask"] = padding_mask(bh, sq, skv)
    got = from_storage(evaluate(dag, inputs)[out.name], out.dtype).astype(np.float64)
    want = ref.attention_python(
        values["q"], values["k"], values["v"], scale, causal, inputs.get("mask")
    )
    assert out.shape == (bh, sq, dv) and out.dtype == (out_dtype or dtype)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    return got


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("causal, with_mask", [(False, False), (True, False), (True, True)])
def test_attention_matches_numpy(dtype, causal, with_mask):
    check_attention(dtype, 2, 24, 40, 16, 8, causal, with_mask)


def test_fully_masked_rows_give_zero():
    got = check_attention("float32", 2, 24, 16, 8, 8, with_mask=True)
    assert not got[:, 1].any()
    # causal with more queries than keys: the first Sq - Skv queries see no key
    got = check_attention("float16", 1, 24, 16, 8, 8, causal=True)
    assert not got[:, :8].any() and got[:, 8:].any()


def test_out_dtype_and_a_mask_shared_by_heads():
    check_attention("float16", 2, 16, 16, 16, 16, out_dtype="float32")
    q = te.placeholder((3, 16, 8), "float16", "q")
    mask = te.placeholder((1, 16, 16), "float16", "mask")
    out = attention(q, q, q, scale=0.5, mask=mask)
    assert "mask[0, i, j]" in str(ComputeDAG([out]))


@pytest.mark.parametrize(
    "args, message",
    [
        (((2, 16, 8), (2, 16, 4), (2, 16, 8)), "k has shape"),
        (((2, 16, 8), (2, 16, 8), (2, 12, 8)), "v has shape"),
        (((2, 16, 8), (2, 16, 8), (2, 16, 8), (2, 16, 12)), "mask has shape"),
        (((2, 16), (2, 16, 8), (2, 16, 8)), "q (batch*heads, Sq, D) must have 3 dimensions"),
    ],
)
def test_bad_shapes_are_named(args, message):
    tensors = [te.placeholder(s, "float16", n) for s, n in zip(args, "qkvm", strict=False)]
    mask = tensors[3] if len(tensors) > 3 else None
    with pytest.raises(TEError, match=re.escape(message)):
        attention(*tensors[:3], scale=1.0, mask=mask)


def test_mixed_dtypes_are_named():
    q = te.placeholder((2, 16, 8), "float16", "q")
    k = te.placeholder((2, 16, 8), "float32", "k")
    with pytest.raises(TEError, match="q is float16 but k is float32"):
        attention(q, k, k, scale=1.0)


@pytest.mark.parametrize("name", list(ATTENTION_SUITE))
def test_registered_workloads_build(name):
    workload, full, small = ATTENTION_SUITE[name]
    for args in (small, full):
        tensors = workload_tensors(make_workload_key(workload, args))
        bh, sq, _, d, _ = args
        assert tensors[-1].shape == (bh, sq, d)
    ComputeDAG(workload_tensors(make_workload_key(workload, full)))
