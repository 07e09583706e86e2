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
from autosched.search.task_budget import (
    DEFAULT_LEAST_TRIALS,
    DEFAULT_MOST_TRIALS,
    DEFAULT_TRIALS_PER_TASK,
    default_trials,
)

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
    at, _, _, tasks = extracted_model(factory, purpose)
    return at, tasks


def extracted_model(factory: str, purpose: str):
    """(autosched.torch, model, example_inputs, tasks) of a factory; one clear error when
    PyTorch is missing or extraction fails."""
    try:
        import autosched.torch as at
    except ImportError as exc:
        raise AutoschedError(
            f"{purpose} needs PyTorch, which is not importable ({exc}): {TORCH_CPU_INSTALL} "
            "(CPU only), or pip install 'autosched[torch]' on a GPU machine"
        ) from None
    model, example_inputs = load_model(factory)
    try:
        return at, model, example_inputs, at.extract_tasks(model, example_inputs)
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


def positive_minutes(text: str) -> float:
    """argparse type: a number of minutes > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of minutes")
    return value


def add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("factory", help=FACTORY_HELP)
    add_search_arguments(parser, trials=1000)
    parser.set_defaults(trials=None)  # the default budget depends on the number of tasks
    parser.add_argument(
        "--minutes",
        type=positive_minutes,
        default=None,
        help="wall-clock budget: no round starts after it (with --trials, whichever comes "
        f"first; with neither, {DEFAULT_TRIALS_PER_TASK} trials per task, at least "
        f"{DEFAULT_LEAST_TRIALS}, at most {DEFAULT_MOST_TRIALS})",
    )
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
        help="tasks tuned at once (default: two per GPU and five more)",
    )


def run_tune(ns: argparse.Namespace) -> int:
    from autosched.search.tune_model import tune_tasks

    at, model, example_inputs, tasks = extracted_model(ns.factory, "tuning a model")
    if not tasks:
        raise AutoschedError(f"{ns.factory}: no operator autosched can tune")
    log = ns.log or f"{ns.factory.rpartition(':')[2]}.json"
    check_log_path(log)
    context = measure_context(ns)
    at.print_tasks(tasks)
    search_tasks, weights = at.tasks_and_weights(tasks)
    trials = ns.trials
    if trials is None and ns.minutes is None:
        trials = default_trials(len(tasks))
    minutes = f", at most {ns.minutes:g} min" if ns.minutes is not None else ""
    print(f"budget: {trials if trials is not None else 'no limit on'} trials{minutes}")
    fallback = pytorch_fallback_costs(tasks, model, example_inputs)
    try:
        tune_tasks(
            search_tasks,
            weights,
            log,
            trials,
            time_budget_s=None if ns.minutes is None else 60.0 * ns.minutes,
            fallback_costs=fallback,
            num_measures_per_round=ns.per_round,
            strategy=ns.strategy,
            search_params=search_params(ns),
            n_jobs=ns.n_jobs,
            devices=ns.devices,
            measure_context=context,
            parallel_tasks=ns.parallel_tasks,
            early_stop_factor=ns.early_stop,
        )
    finally:
        if context is not None:
            context.close()
    print(f"log: {log}  (autosched curve {log} -o curve.png; autosched.torch.compile(..., log=))")
    return 0


def pytorch_fallback_costs(tasks, model, example_inputs) -> list[float] | None:
    """Each task's subgraph timed in PyTorch on this host's GPU (what runs while a task has no
    kernel; inf for one that cannot be timed alone), or None without a local GPU or when timing
    fails (said in one line)."""
    import torch

    from autosched.search.pytorch_times import subgraph_times

    if not torch.cuda.is_available():
        return None
    try:
        inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        model.cuda()
        times = subgraph_times(tasks, tuple(x.cuda() for x in inputs))
    except Exception as exc:  # only the estimate needs the times: not worth stopping for
        print(
            f"cannot time the tasks in PyTorch ({type(exc).__name__}: {exc}); the estimated "
            "latency stays unknown until every task has a kernel"
        )
        return None
    finally:
        model.cpu()  # the GPU's memory goes back to the measurement
        torch.cuda.empty_cache()
    return times


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
    description="Extract a PyTorch model's tasks and tune them over one record log. Every task\n"
    "gets a warm-up round sized to the budget, then each round goes to the task that cuts\n"
    "the estimated latency most. Budget: --trials, --minutes or both (default\n"
    f"{DEFAULT_TRIALS_PER_TASK} trials per task, {DEFAULT_LEAST_TRIALS} to "
    f"{DEFAULT_MOST_TRIALS}). A task without a\n"
    "kernel counts at its PyTorch time in the estimate.",
)
