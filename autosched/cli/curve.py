"""`autosched curve LOG -o OUT`: plot the best GFLOP/s found so far against trials (or, with
`--x time`, against the wall-clock seconds since the log's first record); for a log of several
tasks (a model), also the estimated end-to-end latency and the trials per task."""

from __future__ import annotations

import argparse
import os

from autosched.cli.arguments import Command
from autosched.cli.record_log import read_log
from autosched.errors import AutoschedError

# the x axes the best-so-far curve can be drawn against, with their labels
X_AXES = {"trials": "trials", "time": "seconds since the first record"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help="record log (plain or .gz)")
    parser.add_argument(
        "-o",
        "--output",
        default="curve.png",
        help="image file; its extension picks the format (.png added when it has none)",
    )
    parser.add_argument(
        "--weights",
        nargs="+",
        default=[],
        metavar="TASK=W",
        help="weights of a several-task log's tasks in the end-to-end latency (TASK: workload "
        "key, name or index); default: LOG.tasks.json's, else 1",
    )
    parser.add_argument(
        "--x",
        choices=sorted(X_AXES),
        default="trials",
        help="x axis of the best-so-far curve: trials (default) or time (the records' "
        "timestamps, seconds since the first)",
    )


def run(ns: argparse.Namespace) -> int:
    from autosched.search.task_list import read_task_list

    records = list(read_log(ns.log))
    plt = _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    output = output_path(ns.output, FigureCanvasBase.get_supported_filetypes())
    series = best_so_far(records, ns.x)
    model = len(series) > 1
    fig, axes = plt.subplots(1, 3 if model else 1, figsize=(16, 4.5) if model else (6, 4))
    ax = axes[0] if model else axes
    for key, (xs, ys) in series.items():
        ax.plot(xs, ys, label=key)
    ax.set_xlabel(X_AXES[ns.x])
    ax.set_ylabel("best GFLOP/s so far")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    if model:
        from autosched.cli.model_curve import draw_model_panels

        draw_model_panels(axes[1:], records, read_task_list(ns.log), ns.weights)
    fig.tight_layout()
    try:
        fig.savefig(output, dpi=120)
    except OSError as exc:
        raise AutoschedError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output}")
    return 0


def best_so_far(records: list, x: str = "trials") -> dict[str, tuple[list[float], list[float]]]:
    """Per workload key, in the log's order: (x values, best GFLOP/s so far). `x` is "trials"
    (each task's trials, from 1) or "time" (seconds since the log's first record, from the
    records' timestamps; AutoschedError when the records carry none)."""
    from autosched.task.search_task import SearchTask

    if x == "time" and records and not all(res.timestamp for _, res in records):
        raise AutoschedError("the log's records carry no timestamps: plot it with --x trials")
    start = min((res.timestamp for _, res in records), default=0.0)
    flops: dict[str, float] = {}
    series: dict[str, tuple[list[float], list[float]]] = {}
    for inp, res in records:
        key = inp.workload_key
        if key not in flops:
            flops[key] = SearchTask(workload_key=key).compute_dag.flop_count
            series[key] = ([], [])
        xs, ys = series[key]
        g = flops[key] / res.mean_cost / 1e9 if res.ok else 0.0
        ys.append(max(ys[-1] if ys else 0.0, g))
        xs.append(float(len(xs) + 1) if x == "trials" else res.timestamp - start)
    return series


def output_path(path: str, formats: dict[str, str]) -> str:
    """The file the plot goes to (`.png` added to a name without extension), or AutoschedError
    when it cannot be written: unknown format, missing directory, a directory."""
    if os.path.isdir(path):
        raise AutoschedError(f"cannot write {path}: it is a directory (give a file name)")
    ext = os.path.splitext(path)[1]
    if not ext:
        path += ".png"
    elif ext[1:].lower() not in formats:
        raise AutoschedError(
            f"cannot write {path}: unknown image format {ext!r} "
            f"(known: {', '.join(sorted(formats))})"
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise AutoschedError(f"cannot write {path}: directory {folder} does not exist")
    if not os.path.isdir(folder):
        raise AutoschedError(f"cannot write {path}: {folder} is not a directory")
    if not os.access(folder, os.W_OK):
        raise AutoschedError(f"cannot write {path}: directory {folder} is not writable")
    return path


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AutoschedError(
            "`autosched curve` needs matplotlib: pip install 'autosched[plot]'"
        ) from None
    return plt


COMMAND = Command(
    "curve",
    "plot best GFLOP/s (and a model's latency) over trials or time",
    add_arguments,
    run,
)
