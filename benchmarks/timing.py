"""Timing on the GPU, for PyTorch and our kernels alike, two ways:

- GPU time (`time_graph`, the headline): `number` calls captured in one CUDA graph on one stream
  (PyTorch's CUDAGraph, our launches on the same stream), replays timed between CUDA events,
  median of repeats. No host launch cost is included, so small operators are timed as the GPU
  runs them, as our search's runner times candidates (measure/_worker.py).
- eager (`time_calls`, ANCHORS.md's method): CUDA events around back-to-back calls; for small
  operators this is bounded by the host's dispatch cost (PyTorch's, or pycuda's launch path).

Both warm up first and rotate the inputs over several copies so that small problems are not
timed from a warm L2 cache only.

Each workload's PyTorch equivalent takes the kernel's own input tensors (the DAG's argument order)
and returns the output, so the two are checked against each other on the same data.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable

import numpy as np


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


def kernel_rotation_copies(kernel) -> int:
    """How many sets of a kernel's buffers (every argument, temporaries included) to rotate
    through: as many as the search's runner cycles through (measure.rotation), so that a
    benchmark's time and a search record measure the same thing."""
    from measure.rotation import rotation_copies

    return rotation_copies(sum(a.nbytes for a in kernel.args))


def time_calls(
    calls: list[Callable[[], object]], number: int = 100, repeat: int = 20, warmup: int = 10
) -> float:
    """Median seconds per call, eager: CUDA events around `number` back-to-back calls (at least
    one per call in `calls`), cycling through `calls` (one per input copy), `repeat` times,
    after `warmup` calls."""
    import torch

    settle_launch_state()
    number = max(number, len(calls))  # every copy used: fewer would leave the rest L2-warm

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


def shared_stream():
    """(pycuda Stream, the same stream as a torch.cuda.ExternalStream): our launchers take the
    first (`launcher(stream)`), PyTorch runs on the second, so both are captured alike."""
    import torch

    from autosched.codegen.gpu_call import new_stream
    from measure.cuda_graph import stream_handle

    stream = new_stream()
    return stream, torch.cuda.ExternalStream(stream_handle(stream))


@functools.cache
def _settling_side_stream():
    """The side stream `settle_launch_state` launches on, kept for the process."""
    import torch

    return torch.cuda.Stream()


def settle_launch_state(stream=None) -> None:
    """Put this process's CUDA context in the state the runner's worker times in
    (measure.launch_state says why it matters: each kernel of a replayed graph takes about a
    third of a microsecond more once a context's side streams have run a few kernels): a few
    dozen tiny PyTorch kernels on the current stream, on a side stream kept for the process, and
    on `stream` (the stream about to capture and replay), before every timing, as the worker
    settles before every candidate's."""
    import torch

    from measure.launch_state import SETTLE_LAUNCHES

    x = torch.zeros(1, device="cuda")
    for target in (torch.cuda.current_stream(), _settling_side_stream(), stream):
        if target is None:
            continue
        target.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(target):
            for _ in range(SETTLE_LAUNCHES):
                x.add_(1.0)
        target.synchronize()


def time_graph(
    calls: list[Callable[[], object]],
    number: int = 100,
    repeat: int = 20,
    warmup: int = 3,
    stream=None,
    capture_error_mode: str = "global",
) -> float:
    """Median seconds per call of GPU time: `number` calls (at least one per call in `calls`),
    cycling through `calls`, captured in one CUDA graph on `stream` (a torch.cuda.Stream;
    default a new one), then `repeat` replays, each between CUDA events. Each call must enqueue
    its work on `stream`: PyTorch ops do (it is the current stream while capturing); our
    launchers must be bound to it (`shared_stream`). Warm-up runs on `stream` first, as
    torch.cuda.graphs documents. `capture_error_mode`: torch.cuda.graph's (which CUDA calls
    of other threads the capture refuses; the captured work is the same)."""
    import torch

    number = max(number, len(calls))  # every copy used: fewer would leave the rest L2-warm

    stream = stream if stream is not None else torch.cuda.Stream()
    settle_launch_state(stream)
    stream.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default stream
    with torch.cuda.stream(stream):
        for k in range(warmup):
            calls[k % len(calls)]()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream, capture_error_mode=capture_error_mode):
        for k in range(number):
            calls[k % len(calls)]()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(repeat + 1)]
    with torch.cuda.stream(stream):
        # One untimed replay first: the GPU is busy while the host enqueues the timed ones, so
        # no repeat includes the host's time to submit its replay.
        graph.replay()
        events[0].record()
        for event in events[1:]:
            graph.replay()
            event.record()
    events[-1].synchronize()
    times = [a.elapsed_time(b) / 1e3 / number for a, b in zip(events, events[1:], strict=False)]
    return statistics.median(times)


def time_torch(fn, number: int = 100, repeat: int = 20, warmup: int = 10) -> float:
    """Median seconds per call of a zero-argument `fn` (no rotation), eager back-to-back."""
    return time_calls([fn], number, repeat, warmup)


def compare_with_torch(workload: str, args, kernel, seed: int = 0, tolerance: float = 1e-3) -> dict:
    """Run `kernel` (a BuiltKernel of registered workload `workload` with `args`) and PyTorch's
    equivalent on the same random inputs, check ours against PyTorch fp32, then time ours, PyTorch
    fp32 (TF32 off) and PyTorch TF32 with the same methods: GPU time by graph replay (`ours_us`,
    `torch_fp32_us`, `torch_tf32_us`) and eager back-to-back (`*_eager_us`), inputs rotated; and
    ANCHORS.md's method exactly (eager, the same inputs every call: `*_warm_us`). Times in µs."""
    import torch

    temps = {b.name for b in kernel.program.temps}
    inputs = [a for a in kernel.args if not a.is_output and a.name not in temps]
    outputs = [a for a in kernel.args if a.is_output]
    rng = np.random.default_rng(seed)
    host = [rng.uniform(-1, 1, a.shape).astype(a.dtype) for a in inputs]
    copies = kernel_rotation_copies(kernel)
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
    torch_calls = [lambda ins=ins: fn(*ins) for ins, _ in sets]
    ours_stream, stream = shared_stream()
    ours_graph = [lambda launch=launch: launch(ours_stream) for launch in launchers]
    times = {
        "ours_us": time_graph(ours_graph, stream=stream),
        "torch_fp32_us": time_graph(torch_calls, stream=stream),
        "ours_eager_us": time_calls(launchers),
        "torch_fp32_eager_us": time_calls(torch_calls),
        "ours_warm_us": time_calls(launchers[:1]),
        "torch_fp32_warm_us": time_calls(torch_calls[:1]),
    }
    set_tf32(True)
    times["torch_tf32_us"] = time_graph(torch_calls, stream=stream)
    times["torch_tf32_eager_us"] = time_calls(torch_calls)
    set_tf32(False)
    return {
        **{key: seconds * 1e6 for key, seconds in times.items()},
        "max_rel_err_vs_torch": err,
        "matches_torch": ok,
        "input_copies": copies,
    }
