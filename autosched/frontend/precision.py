"""Which float32 tasks may use TF32 Tensor Cores: where PyTorch itself would.

PyTorch decides per operator family: convolutions follow cuDNN's flag
(`torch.backends.cudnn.allow_tf32`, on by default; `torch.backends.cudnn.conv.fp32_precision`
in the newer API), matrix products follow cuBLAS's (`torch.backends.cuda.matmul.allow_tf32` /
`torch.set_float32_matmul_precision("high")`, off by default;
`torch.backends.cuda.matmul.fp32_precision`). A float32 task gets `allow_tf32=True` exactly when
its anchor's family has TF32 on; half-precision tasks never need it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _cudnn_conv_tf32() -> bool:
    precision = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", "none")
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    return bool(torch.backends.cudnn.allow_tf32)


def _cublas_tf32() -> bool:
    precision = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return torch.get_float32_matmul_precision() != "highest"
    except RuntimeError:  # legacy and new settings mixed: the legacy flag decides
        return bool(torch.backends.cuda.matmul.allow_tf32)


# anchor kind -> the PyTorch setting its float32 products follow
TF32_POLICY: dict[str, Callable[[], bool]] = {
    "conv2d": _cudnn_conv_tf32,
    "depthwise_conv2d": _cudnn_conv_tf32,
    "group_conv2d": _cudnn_conv_tf32,
    "dense": _cublas_tf32,
    "matmul": _cublas_tf32,
    "batch_matmul": _cublas_tf32,
    "attention": _cublas_tf32,
}


def allows_tf32(anchor_kind: str, dtype: str) -> bool:
    """Whether PyTorch would run this float32 anchor on TF32 Tensor Cores."""
    policy = TF32_POLICY.get(anchor_kind)
    return dtype == "float32" and policy is not None and policy()
