"""What each task of a PyTorch model costs in PyTorch: the task scheduler's fallback costs.

A task with no kernel yet runs in PyTorch in the compiled model, so the estimated end-to-end
latency counts it at its subgraph's PyTorch time. `subgraph_times` runs the traced model once
on the example inputs (keeping every node's value), then times the fx nodes of each task's
first fused subgraph again and again on those values: the eager time of that subgraph, host
launch cost included, on the device the inputs are on (CUDA events on a GPU).

Needs PyTorch (imported here, never by `import autosched`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any


def subgraph_times(
    tasks: Sequence[Any], example_inputs: Sequence[Any], repeats: int = 20
) -> list[float]:
    """Seconds per call of each task's subgraph in PyTorch (`tasks` as
    `autosched.torch.extract_tasks` returns them, `example_inputs` on the device to time on;
    the traced graph, whose modules are the model's, is moved there too); inf for a task whose
    subgraph cannot be run alone."""
    import torch
    from torch import fx

    if not tasks:
        return []
    try:
        gm = tasks[0].groups[0].output.graph.owning_module
        device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)), None)
        if device is not None:
            gm.to(device)
        interpreter = fx.Interpreter(gm, garbage_collect_values=False)
        with torch.no_grad():
            interpreter.run(*example_inputs)  # every node's value stays in interpreter.env
    except Exception:  # tasks not backed by a runnable fx graph: every time unknown
        return [math.inf] * len(tasks)
    with torch.no_grad():
        return [_time_nodes(interpreter, t.groups[0].nodes, repeats) for t in tasks]


def _time_nodes(interpreter: Any, nodes: Sequence[Any], repeats: int) -> float:
    """Mean seconds of running `nodes` once (after two warm-up runs)."""
    import torch

    def once() -> None:
        for node in nodes:
            interpreter.run_node(node)

    try:
        once()
        once()
    except Exception:  # a subgraph that needs more than the values kept: unknown
        return math.inf
    out = interpreter.env.get(nodes[-1])
    on_gpu = isinstance(out, torch.Tensor) and out.is_cuda
    if on_gpu:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(repeats):
            once()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / repeats
    t0 = time.perf_counter()
    for _ in range(repeats):
        once()
    return (time.perf_counter() - t0) / repeats
