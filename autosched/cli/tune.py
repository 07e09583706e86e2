"""`autosched tune WORKLOAD [ARGS...]`: search a workload's schedules on the GPU."""

from __future__ import annotations

import argparse
import dataclasses
import os

from autosched.cli.arguments import (
    Command,
    add_search_arguments,
    add_tf32_argument,
    search_params,
)
from autosched.cli.devices import add_measure_arguments, measure_context
from autosched.cli.summary import print_summary
from autosched.cli.workload import WORKLOAD_HELP, resolve, suite_table
from autosched.errors import AutoschedError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help=WORKLOAD_HELP)
    parser.add_argument("args", nargs="*", help="the workload's arguments")
    add_search_arguments(parser, trials=200)
    add_tf32_argument(parser)
    parser.add_argument(
        "--pipeline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="search the next round while this one compiles and runs on the GPU (--no-pipeline: "
        "search, build and run one after the other)",
    )
    parser.add_argument(
        "--log", help="record log to append to (default: WORKLOAD.json in the current directory)"
    )
    add_measure_arguments(parser)


def run(ns: argparse.Namespace) -> int:
    from autosched.records import RecordToFile
    from autosched.search.auto_schedule import TuningOptions, auto_schedule
    from autosched.search.policy import SketchPolicy, SkipLoggedStates
    from autosched.search.program_measurer import ProgramMeasurer

    workload = resolve(ns.workload, ns.args or [])
    task = workload.task(allow_tf32=ns.tf32)
    log = ns.log or f"{ns.workload.replace(':', '_')}.json"
    check_log_path(log)
    context = measure_context(ns)
    record = RecordToFile(log)
    print(workload.describe())
    print(
        f"tuning {task.workload_key}: {task.compute_dag.flop_count / 1e9:.3f} GFLOP, "
        f"{ns.trials} trials, seed {ns.seed}, log {log}"
    )
    # a log that already holds searches of this task: never measure its states again
    policy = SketchPolicy(
        task, params=tune_search_params(ns), init_search_callbacks=[SkipLoggedStates(log)]
    )
    measurer = ProgramMeasurer(
        task,
        callbacks=[record],
        workers=policy.workers,
        devices=ns.devices,
        context=context,
        early_stop_factor=ns.early_stop,
    )
    opts = TuningOptions(
        num_measure_trials=ns.trials,
        num_measures_per_round=ns.per_round,
        verbose=1,
        measurer=measurer,
        pipeline=ns.pipeline,
    )
    try:
        res = auto_schedule(task, policy, opts)
    finally:
        measurer.close()
        if context is not None:
            context.close()
    print_summary(task, res, log)
    return 0


def tune_search_params(ns: argparse.Namespace):
    """The search options' SearchParams; pipelined, the search's workers run level with the
    compilers, as the next batch's search is what a round waits for
    (`SearchParams.worker_niceness`)."""
    params = search_params(ns)
    return dataclasses.replace(params, worker_niceness=0) if ns.pipeline else params


def check_log_path(log: str) -> None:
    """Refuse a log the search could not append to, before any search starts."""
    folder = os.path.dirname(os.path.abspath(log))
    if os.path.isdir(log):
        raise AutoschedError(f"log {log} is a directory; give a file name")
    if not os.path.isdir(folder):
        raise AutoschedError(f"log {log}: directory {folder} does not exist")
    if not os.access(folder if not os.path.exists(log) else log, os.W_OK):
        raise AutoschedError(f"log {log} is not writable")


COMMAND = Command(
    "tune",
    "tune a workload on the GPU",
    add_arguments,
    run,
    description="Search schedules of a workload, measuring them on the GPU; every measurement\n"
    "is appended to the log.",
    epilog=suite_table(),
)
