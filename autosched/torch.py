"""Whole PyTorch models: `import autosched.torch` (this imports torch; `import autosched` does not).

    tasks = autosched.torch.extract_tasks(model, (x,))  # one task per distinct fused subgraph
    autosched.torch.print_tasks(tasks)
    ...tune each `t.task` (weights `t.weight`) into LOG...
    fast = autosched.torch.compile(model, (x,), log=LOG)  # tuned kernels, PyTorch for the rest
    fast = torch.compile(model, backend="autosched", options={"log": LOG})

Importing this module registers the "autosched" backend of `torch.compile`.
"""

from __future__ import annotations

from typing import Any

import torch as _torch

from autosched.frontend.extract import ExtractedTask, ModelTasks, extract, task_table
from autosched.frontend.runtime import TunedCall, compile_model, dynamo_backend
from autosched.task.search_task import SearchTask

__all__ = [
    "ExtractedTask",
    "ModelTasks",
    "TunedCall",
    "extract_tasks",
    "tasks_and_weights",
    "print_tasks",
    "compile",
    "backend",
]


def extract_tasks(model: Any, example_inputs: Any) -> ModelTasks:
    """The model's tasks (from `torch.export`'s ATen graph): each has `.task` (a SearchTask of a
    fused subgraph's DAG; its workload key is the DAG's `dag-...` hash; float16/bfloat16 models
    give tasks in their dtype, float32 ones allow TF32 where PyTorch would), `.weight` (how
    often the subgraph occurs) and `.groups`. The list's `.coverage` says what stays in
    PyTorch."""
    ex = extract(model, _as_tuple(example_inputs))
    return ModelTasks(ex.tasks, ex.coverage)


def tasks_and_weights(tasks: list[ExtractedTask]) -> tuple[list[SearchTask], list[int]]:
    """TVM's `(tasks, task_weights)` pair, for a task scheduler."""
    return [t.task for t in tasks], [t.weight for t in tasks]


def print_tasks(tasks: list[ExtractedTask]) -> str:
    """Print (and return) a table: index, name, shapes, dtype, weight, GFLOP per call; then
    what stays in PyTorch (operators, counts, share of the FLOPs)."""
    text = task_table(tasks)
    print(text)
    return text


def compile(  # noqa: A001  (the name users expect, as in torch.compile)
    model: Any, example_inputs: Any, log: str | None = None, use_interpreter: bool = False
):
    """A callable module (the model's exported graph): each fused subgraph with a record in
    `log` runs its best kernel, the rest (and every subgraph without a record, or everything
    without a GPU unless `use_interpreter`) runs in PyTorch. It returns what the model
    returns, except for a model whose outputs torch.export cannot flatten (a Hugging Face
    cache object): it then returns the tensors among them, as a tuple."""
    return compile_model(model, _as_tuple(example_inputs), log, use_interpreter)


def backend(log: str | None = None, use_interpreter: bool = False):
    """A `torch.compile` backend bound to a log:
    `torch.compile(model, backend=autosched.torch.backend(log=LOG))`."""

    def compiler(gm, example_inputs, **_: Any):
        return dynamo_backend(gm, example_inputs, {"log": log, "use_interpreter": use_interpreter})

    return compiler


def _as_tuple(example_inputs: Any) -> tuple:
    if isinstance(example_inputs, _torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def _register_backend() -> None:
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "autosched" not in _BACKENDS:
        register_backend(dynamo_backend, name="autosched")


_register_backend()
