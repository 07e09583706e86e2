"""Timing on the GPU the way ANCHORS.md does, for PyTorch and our kernels alike: CUDA events around
back-to-back calls, warm-up first, median of repeats, inputs rotated over several copies so that
small problems are not timed from a warm L2 cache only.

Each workload's PyTorch equivalent takes the kernel's own input tensors (the DAG's argument order)
and returns the output, so the two are checked against each other on the same data.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

L2_FLUSH_BYTES = 128 << 20  # rotate through at least this many bytes of inputs (H200 L2: 50 MB)
MAX_COPIES = 16


def _conv2d_bias_relu(args):
    N, H, W, CO, CI, KH, KW, stride, pad = args
    import torch.nn.functional as F

    return lambda x, w, b: F.relu(F.conv2d(x, w, b.reshape(-1), stride=stride, padding=pad))


def _conv2d(args):
    N, H, W, CO, CI, KH, KW, stride, pad = args
    import torch.nn.functional as F

    return lambda x, w: F.conv2d(x, w, stride=stride, padding=pad)


def _depthwise(args):
    N, C, H, W, KH, KW, stride, pad = args
    import torch.nn.functional as F

    return lambda x, w: F.conv2d(x, w, stride=stride, padding=pad, groups=C)


def _matmul(args):
    return lambda a, b: a @ b


def _batch_matmul(args):
    return lambda a, b: a @ b.transpose(1, 2)


def _dense_bias(args):
    import torch.nn.functional as F

    return lambda x, w, b: F.linear(x, w, b)


def _softmax(args):
    import torch

    return lambda x: torch.softmax(x, dim=-1)


# registered workload name -> (workload args -> function of the input tensors returning the output)
TORCH_EQUIVALENTS: dict[str, Callable] = {
    "conv2d_bias_relu": _conv2d_bias_relu,
    "conv2d": _conv2d,
    "depthwise_conv2d": _depthwise,
    "matmul": _matmul,
    "batch_matmul": _batch_matmul,
    "dense_bias": _dense_bias,
    "softmax": _softmax,
}


def set_tf32(enabled: bool) -> None:
    """TF32 for cuDNN convolutions and cuBLAS matmuls on or off."""
    import torch

    torch.backends.cudnn.allow_tf32 = enabled
    torch.backends.cuda.matmul.allow_tf32 = enabled


def rotation_copies(bytes_per_set: int) -> int:
    """How many copies of the inputs to rotate through so that they outgrow the L2 cache."""
    return max(1, min(MAX_COPIES, -(-L2_FLUSH_BYTES // max(1, bytes_per_set))))


def time_calls(
    calls: list[Callable[[], object]], number: int = 100, repeat: int = 20, warmup: int = 10
) -> float:
    """Median seconds per call: CUDA events around `number` back-to-back calls, cycling through
    `calls` (one per input copy), `repeat` times, after `warmup` calls."""
    import torch

    for k in range(warmup):
        calls[k % len(calls)]()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for k in range(number):
            calls[k % len(calls)]()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / number)
    return statistics.median(times)


def time_torch(fn, number: int = 100, repeat: int = 20, warmup: int = 10) -> float:
    """Median seconds per call of a zero-argument `fn` (no rotation)."""
    return time_calls([fn], number, repeat, warmup)


def compare_with_torch(workload: str, args, kernel, seed: int = 0, tolerance: float = 1e-3) -> dict:
    """Run `kernel` (a BuiltKernel of registered workload `workload` with `args`) and PyTorch's
    equivalent on the same random inputs, check ours against PyTorch fp32, then time ours, PyTorch
    fp32 (TF32 off) and PyTorch TF32 with the same method. Times in µs."""
    import numpy as np
    import torch

    temps = {b.name for b in kernel.program.temps}
    inputs = [a for a in kernel.args if not a.is_output and a.name not in temps]
    outputs = [a for a in kernel.args if a.is_output]
    rng = np.random.default_rng(seed)
    host = [rng.uniform(-1, 1, a.shape).astype(a.dtype) for a in inputs]
    set_bytes = sum(h.nbytes for h in host) + sum(int(np.prod(a.shape)) * 4 for a in outputs)
    copies = rotation_copies(set_bytes)
    sets = [
        (
            [torch.from_numpy(h).cuda() for h in host],
            [torch.empty(a.shape, dtype=getattr(torch, a.dtype), device="cuda") for a in outputs],
        )
        for _ in range(copies)
    ]
    fn = TORCH_EQUIVALENTS[workload](args)
    launchers = [kernel.launcher(*ins, *outs) for ins, outs in sets]

    set_tf32(False)
    expected = fn(*sets[0][0])
    sets[0][1][0].fill_(float("nan"))
    launchers[0]()
    torch.cuda.synchronize()
    got = sets[0][1][0]
    scale = float(expected.abs().max()) or 1.0
    err = float((got - expected).abs().max()) / scale
    ok = bool(torch.isfinite(got).all()) and err <= tolerance
    ours = time_calls(launchers)
    torch_calls = [lambda ins=ins: fn(*ins) for ins, _ in sets]
    fp32 = time_calls(torch_calls)
    # ANCHORS.md's method exactly (the same inputs every call, L2-warm), for comparison with it
    ours_warm, fp32_warm = time_calls(launchers[:1]), time_calls(torch_calls[:1])
    set_tf32(True)
    tf32 = time_calls(torch_calls)
    set_tf32(False)
    return {
        "ours_us": ours * 1e6,
        "torch_fp32_us": fp32 * 1e6,
        "torch_tf32_us": tf32 * 1e6,
        "ours_warm_us": ours_warm * 1e6,
        "torch_fp32_warm_us": fp32_warm * 1e6,
        "max_rel_err_vs_torch": err,
        "matches_torch": ok,
        "input_copies": copies,
    }
