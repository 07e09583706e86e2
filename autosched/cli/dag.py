"""`autosched dag WORKLOAD [ARGS...]`: print a workload's DAG and its sketches (no GPU)."""

from __future__ import annotations

import argparse

from autosched.cli.arguments import Command
from autosched.cli.workload import WORKLOAD_HELP, resolve, suite_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help=WORKLOAD_HELP)
    parser.add_argument("args", nargs="*", help="the workload's arguments")


def run(ns: argparse.Namespace) -> int:
    from autosched.sketch import generate_sketches

    workload = resolve(ns.workload, ns.args or [])
    task = workload.task()
    print(workload.describe())
    print(f"workload key: {task.workload_key}\nFLOPs: {task.compute_dag.flop_count:.0f}\n")
    print(task.compute_dag)
    for i, s in enumerate(generate_sketches(task.compute_dag, hardware=task.hardware_params)):
        print(f"--- sketch {i} ---")
        print(task.compute_dag.print_python_schedule(s))
    return 0


COMMAND = Command(
    "dag",
    "print a workload's DAG and sketches (no GPU needed)",
    add_arguments,
    run,
    epilog=suite_table(),
)
