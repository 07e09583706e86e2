"""Timing PyTorch baselines the way ANCHORS.md does: CUDA events around back-to-back calls."""

from __future__ import annotations

import statistics


def time_torch(fn, number: int = 100, repeat: int = 20, warmup: int = 10) -> float:
    """Median seconds per call of `fn` (events around `number` back-to-back calls)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / number)
    return statistics.median(times)


def torch_conv2d_bias_relu(N, H, W, CO, CI, KH, KW, stride, padding, tf32: bool = False):
    import torch

    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    x = torch.randn(N, CI, H, W, device="cuda")
    w = torch.randn(CO, CI, KH, KW, device="cuda")
    b = torch.randn(CO, device="cuda")
    return lambda: torch.relu(torch.nn.functional.conv2d(x, w, b, stride=stride, padding=padding))
