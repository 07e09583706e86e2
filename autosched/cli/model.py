"""`autosched tasks FACTORY` and `autosched tune-model FACTORY`: a PyTorch model's tasks, and
tuning all of them over one log with the task scheduler.

FACTORY is `module:function`; the function takes no arguments and returns `(model,
example_inputs)` (an `nn.Module` and a tensor or a tuple of tensors). The module is looked up
in the current directory too.
"""

from __future__ import annotations

import argparse
import math

from autosched.cli.arguments import Command, add_search_arguments, positive_int, search_params
from autosched.cli.devices import add_measure_arguments, measure_context
from autosched.cli.tune import check_log_path
from autosched.cli.workload import resolve_function
from autosched.errors import AutoschedError

FACTORY_HELP = "module:function returning (model, example_inputs)"
STRATEGIES = ("gradient", "round-robin")


def load_model(factory: str):
    """(model, example_inputs) from a `module:function` factory, or one clear error."""
    func = resolve_function(factory, "model factory", "mymodels:resnet")
    try:
        made = func()
    except Exception as exc:
        raise AutoschedError(f"{factory}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(made, tuple) or len(made) != 2:
        raise AutoschedError(
            f"{factory}() returned {type(made).__name__}; it must return (model, example_inputs)"
        )
    return made


# The CPU build of PyTorch: a plain `pip install torch` pulls the multi-GB CUDA build.
TORCH_CPU_INSTALL = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def extracted_tasks(factory: str, purpose: str):
    """The model's extracted tasks (autosched.torch needs PyTorch); `purpose` words the error
    when PyTorch is missing ("listing a model's tasks")."""
    try:
        import autosched.torch as at
    except ImportError as exc:
        raise AutoschedError(
            f"{purpose} needs PyTorch, which is not importable ({exc}): {TORCH_CPU_INSTALL} "
            "(CPU only), or pip install 'autosched[torch]' on a GPU machine"
        ) from None
    model, example_inputs = load_model(factory)
    try:
        return at, at.extract_tasks(model, example_inputs)
    except AutoschedError as exc:
        raise AutoschedError(f"{factory}: {exc}") from None
    except Exception as exc:  # tracing a user's model fails in many ways: one line each
        first = (str(exc).strip().splitlines() or [""])[0]
        raise AutoschedError(
            f"extracting the tasks of {factory}: {type(exc).__name__}: {first}"
        ) from None


def add_tasks_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("factory", help=FACTORY_HELP)


def run_tasks(ns: argparse.Namespace) -> int:
    at, tasks = extracted_tasks(ns.factory, "listing a model's tasks")
    if not tasks:
        print(f"{ns.factory}: no operator autosched can tune; the model runs in PyTorch")
        for line in tasks.coverage.lines():
            print(line)
        return 0
    at.print_tasks(tasks)
    return 0


def add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("factory", help=FACTORY_HELP)
    add_search_arguments(parser, trials=1000)
    parser.add_argument(
        "--log", help="record log shared by all tasks (default: FUNCTION.json here)"
    )
    parser.add_argument(
        "--strategy", choices=STRATEGIES, default="gradient", help="how rounds go to tasks"
    )
    add_measure_arguments(parser)
    parser.add_argument(
        "--parallel-tasks",
        type=positive_int,
        default=None,
        help="tasks tuned at once (default: one per GPU)",
    )


def run_tune(ns: argparse.Namespace) -> int:
    from autosched.search.tune_model import tune_tasks

    at, tasks = extracted_tasks(ns.factory, "tuning a model")
    if not tasks:
        raise AutoschedError(f"{ns.factory}: no operator autosched can tune")
    log = ns.log or f"{ns.factory.rpartition(':')[2]}.json"
    check_log_path(log)
    context = measure_context(ns)
    at.print_tasks(tasks)
    search_tasks, weights = at.tasks_and_weights(tasks)
    try:
        result = tune_tasks(
            search_tasks,
            weights,
            log,
            ns.trials,
            num_measures_per_round=ns.per_round,
            strategy=ns.strategy,
            search_params=search_params(ns),
            n_jobs=ns.n_jobs,
            devices=ns.devices,
            measure_context=context,
            parallel_tasks=ns.parallel_tasks,
        )
    finally:
        if context is not None:
            context.close()
    print(f"\nestimated end-to-end latency of the tuned tasks: {result_latency(result)}")
    print(f"log: {log}  (autosched curve {log} -o curve.png; autosched.torch.compile(..., log=))")
    return 0


def result_latency(result) -> str:
    return f"{result.latency * 1e6:.1f} us" if math.isfinite(result.latency) else "unknown"


TASKS_COMMAND = Command(
    "tasks",
    "list a PyTorch model's tasks (no GPU needed)",
    add_tasks_arguments,
    run_tasks,
    description="Export a PyTorch model (FACTORY returns (model, example_inputs); torch.export)\n"
    "and print the fused subgraphs autosched would tune (name, shapes, dtype, weight, GFLOP),\n"
    "then the operators that stay in PyTorch and their share of the model's FLOPs.",
)

TUNE_MODEL_COMMAND = Command(
    "tune-model",
    "tune every task of a PyTorch model on the GPU",
    add_tune_arguments,
    run_tune,
    description="Extract a PyTorch model's tasks and tune them over one record log; the task\n"
    "scheduler gives each round to the task that cuts the estimated latency most.",
)
