"""`autosched resume LOG`: continue the search of a log's last task, its model trained first."""

from __future__ import annotations

import argparse

from autosched.cli.arguments import Command, add_search_arguments, search_params
from autosched.cli.gpu_tools import check_gpu_tools
from autosched.cli.record_log import read_log
from autosched.cli.summary import print_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help="record log written by `autosched tune` (plain or .gz)")
    add_search_arguments(parser, trials=64)


def run(ns: argparse.Namespace) -> int:
    from autosched.records import RecordToFile
    from autosched.search.auto_schedule import TuningOptions, auto_schedule
    from autosched.search.cost_model import default_cost_model
    from autosched.search.policy import PreloadMeasuredStates, SketchPolicy
    from autosched.search.workers import resolve_n_jobs
    from autosched.task.search_task import SearchTask

    keys = list(dict.fromkeys(inp.workload_key for inp, _ in read_log(ns.log)))
    task = SearchTask(workload_key=keys[-1])
    check_gpu_tools()
    model = default_cost_model(ns.seed, not ns.no_pretrained)
    n = model.update_from_file(ns.log, n_jobs=resolve_n_jobs(ns.n_jobs))  # before the first round
    print(f"resuming {task.workload_key}: model trained on {n} records, seed {ns.seed}")
    policy = SketchPolicy(
        task, model, search_params(ns), init_search_callbacks=[PreloadMeasuredStates(ns.log)]
    )
    opts = TuningOptions(
        num_measure_trials=ns.trials,
        num_measures_per_round=ns.per_round,
        measure_callbacks=[RecordToFile(ns.log)],
    )
    res = auto_schedule(task, policy, opts)
    print_summary(task, res, ns.log)
    return 0


COMMAND = Command(
    "resume",
    "continue a search from its log",
    add_arguments,
    run,
    description="Continue tuning the last task of a record log: the cost model is trained on\n"
    "the log, its states are never measured again, and new records are appended to it.",
)
