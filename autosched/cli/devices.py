"""Where `tune` and `tune-model` measure: `--devices` (GPUs of this host, default all) or
`--scheduler` (a Dask cluster's GPU workers; the `distributed` extra)."""

from __future__ import annotations

import argparse

from autosched.cli.gpu_tools import check_gpu_tools
from autosched.errors import AutoschedError


def device_list(text: str) -> list[int]:
    """argparse type: comma-separated CUDA device indices, e.g. `0,1`."""
    try:
        devices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of device indices") from None
    if not devices or min(devices) < 0 or len(set(devices)) != len(devices):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of distinct device indices")
    return devices


def early_stop_factor(text: str) -> float | None:
    """argparse type: a factor >= 1 of the task's best cost past which a candidate stops timing
    early, or 0 for None (every candidate timed in full)."""
    try:
        factor = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if factor == 0:
        return None
    if not factor >= 1 or factor == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is neither 0 (off) nor a factor >= 1")
    return factor


def min_repeat_ms(text: str) -> float:
    """argparse type: milliseconds a timing reading lasts at least (a finite number > 0)."""
    try:
        ms = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if not 0 < ms < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of milliseconds")
    return ms


def runner_options(ns: argparse.Namespace) -> dict[str, float]:
    """The options of each GPU runner that the command line sets (`LocalRunner`'s keywords)."""
    ms = getattr(ns, "min_repeat_ms", None)
    return {} if ms is None else {"min_repeat_ms": ms}


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say where and how candidates are measured."""
    from autosched.search.program_measurer import EARLY_STOP_FACTOR

    parser.add_argument(
        "--early-stop",
        type=early_stop_factor,
        default=EARLY_STOP_FACTOR,
        metavar="FACTOR",
        help="stop timing a candidate once it shows slower than FACTOR times the task's best so "
        f"far, with fewer repeats (default {EARLY_STOP_FACTOR:g}; 0: time every one in full)",
    )
    parser.add_argument(
        "--min-repeat-ms",
        type=min_repeat_ms,
        default=None,
        metavar="MS",
        help="how long each of a candidate's timed repeats lasts at least (default: the "
        "runner's, measure.LocalRunner); shorter ones spend less GPU time a candidate and read "
        "noisier",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--devices",
        type=device_list,
        default=None,
        help="CUDA devices of this host to measure on, e.g. 0,1 (default: every visible one; "
        "they must be of one model)",
    )
    where.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="measure on a Dask cluster instead (tcp://HOST:8786; one `dask worker "
        "--resources GPU=1` per GPU; pip install -e '.[distributed]')",
    )


def cluster_context(ns: argparse.Namespace):
    """A DaskMeasureContext for `--scheduler`, or None; one clear error when it cannot be."""
    if not getattr(ns, "scheduler", None):
        return None
    from autosched.search.distributed import DaskMeasureContext

    try:
        return DaskMeasureContext(ns.scheduler, runner_options=runner_options(ns) or None)
    except Exception as exc:  # no dask, an unreachable scheduler: one line
        raise AutoschedError(
            f"cannot use the Dask scheduler {ns.scheduler}: {type(exc).__name__}: {exc}"
        ) from None


def measure_context(ns: argparse.Namespace):
    """Where to measure: a DaskMeasureContext for `--scheduler`; else this host's GPUs, whose
    tools are checked first (one clear error when nvcc or the driver is missing): a
    LocalMeasureContext when runner options are set, else None (the measurer's default)."""
    context = cluster_context(ns)
    if context is None:
        check_gpu_tools()
        options = runner_options(ns)
        if options:
            from measure import LocalMeasureContext, local_runner

            runner = local_runner(getattr(ns, "devices", None), **options)
            return LocalMeasureContext(runner=runner)
    return context
