"""Attention workloads (`topi.attention`), registered so that records, the CLI and the
benchmarks can name them: `attention_fp16`, `attention_bf16` and `attention_fp32`, each
`(BH, Sq, Skv, D, causal)` with Dv = D and scale 1/sqrt(D)."""

from __future__ import annotations

import math

from autosched import te
from autosched.task.workload_registry import register_workload
from autosched.topi.attention import attention


def _attention(dtype: str, bh: int, sq: int, skv: int, d: int, causal: int) -> list[te.Tensor]:
    q = te.placeholder((bh, sq, d), dtype, "q")
    k = te.placeholder((bh, skv, d), dtype, "k")
    v = te.placeholder((bh, skv, d), dtype, "v")
    return [q, k, v, attention(q, k, v, scale=1.0 / math.sqrt(d), causal=bool(causal))]


@register_workload(name="attention_fp16")
def attention_fp16(BH: int, Sq: int, Skv: int, D: int, causal: int = 0) -> list[te.Tensor]:
    """float16 attention: Tensor Core products, float32 softmax, float16 output."""
    return _attention("float16", BH, Sq, Skv, D, causal)


@register_workload(name="attention_bf16")
def attention_bf16(BH: int, Sq: int, Skv: int, D: int, causal: int = 0) -> list[te.Tensor]:
    """bfloat16 attention: Tensor Core products, float32 softmax, bfloat16 output."""
    return _attention("bfloat16", BH, Sq, Skv, D, causal)


@register_workload(name="attention_fp32")
def attention_fp32(BH: int, Sq: int, Skv: int, D: int, causal: int = 0) -> list[te.Tensor]:
    """float32 attention (CUDA-core products unless the task allows TF32)."""
    return _attention("float32", BH, Sq, Skv, D, causal)


# name -> (workload, full-size args, reduced args with the same structure for CPU tests):
# the attention of ViT-B/16 (12 heads, 197 tokens), BERT-base (12 heads, 128 tokens) and a
# causal decoder layer (32 heads, 1024 tokens), head dimension 64.
ATTENTION_SUITE = {
    "attention_vit_fp16": ("attention_fp16", (12, 197, 197, 64, 0), (2, 24, 24, 16, 0)),
    "attention_bert_fp16": ("attention_fp16", (12, 128, 128, 64, 0), (2, 32, 32, 16, 0)),
    "attention_causal_fp16": ("attention_fp16", (32, 1024, 1024, 64, 1), (2, 40, 40, 16, 1)),
    "attention_vit_bf16": ("attention_bf16", (12, 197, 197, 64, 0), (2, 24, 24, 16, 0)),
    "attention_causal_bf16": ("attention_bf16", (32, 1024, 1024, 64, 1), (2, 40, 40, 16, 1)),
    "attention_vit_fp32": ("attention_fp32", (12, 197, 197, 64, 0), (2, 24, 24, 16, 0)),
}
