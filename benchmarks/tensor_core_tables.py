"""The Tensor Core benchmark's published documents: `tensor_core_results` (the `tensor_cores`
folder, one table per machine and commit) and `resnet50_conv_results` (the `resnet50_convs`
folder: ResNet-50's convolutions, one table per batch size and a summary of the geometric mean
speed against PyTorch and of how many kernels are tensorized)."""

from __future__ import annotations

import math

from benchmarks import report
from benchmarks.report import Column, Results, Table

COLUMNS = [
    Column("workload"),
    Column("GFLOP", "{:.2f}"),
    Column("autosched µs", "{:.1f}"),
    Column("torch µs", "{:.1f}"),
    Column("torch/ours speed", "{:.2f}"),
    Column("TFLOP/s", "{:.0f}"),
    Column("same inputs µs: ours / torch"),
    Column("search record µs", "{:.1f}"),
    Column("tensorized"),
    Column("instructions"),
    Column("trials"),
    Column("matches torch"),
]
NOTE = (
    "PyTorch runs its own half-precision kernels (cuBLAS / cuDNN on Tensor Cores), TF32 for the"
    " tf32 row. Same inputs: both timed without rotating the inputs (L2-warm, as the search's"
    " runner times candidates)."
)
CONV_NOTE = (
    "NHWC fp16 data, (KH, KW, CI, CO) fp16 kernel, fp32 accumulation, fp16 output; PyTorch's"
    " `F.conv2d` on the same memory as channels_last fp16 tensors (cuDNN). Same inputs: both"
    " timed without rotating the inputs (L2-warm, as the search's runner times candidates)."
)
SUMMARY_COLUMNS = [
    Column("batch"),
    Column("convs"),
    Column("tensorized"),
    Column("matching torch"),
    Column("geomean torch/ours speed", "{:.2f}"),
]


def result_row(r: dict) -> list:
    """One workload's cells under `COLUMNS`."""
    return [
        r["name"],
        r["flop"] / 1e9,
        r["ours_us"],
        r["torch_us"],
        r["torch_us"] / r["ours_us"],
        r["flop"] / r["ours_us"] / 1e6,
        f"{r['ours_same_inputs_us']:.1f} / {r['torch_same_inputs_us']:.1f}",
        r["record_us"],
        r["tensorized"],
        r.get("instructions", "-"),
        r["trials"],
        r["matches_torch"],
    ]


def tensor_core_results(runs: list[dict]) -> Results:
    """The tensor_cores folder's document: one table per machine and commit."""
    tables = []
    groups = report.runs_by(runs, "machine", "commit", "command")
    for (where, commit, command), group in groups.items():
        rows = [result_row(r) for r in group]
        title = "fp16 / bf16 on Tensor Cores, and fp32 with TF32 allowed"
        tables.append(Table(title, where, commit, command, COLUMNS, rows, NOTE))
    return Results("tensor_cores", "Tensor Cores against PyTorch", tables, runs)


def geometric_mean_speed(runs: list[dict]) -> float:
    """The geometric mean of torch µs / ours µs over `runs`."""
    return math.exp(sum(math.log(r["torch_us"] / r["ours_us"]) for r in runs) / len(runs))


def summary_row(batch: int, runs: list[dict]) -> list:
    """One batch size's cells under `SUMMARY_COLUMNS`."""
    return [
        batch,
        len(runs),
        f"{sum(r['tensorized'] for r in runs)} / {len(runs)}",
        f"{sum(r['matches_torch'] for r in runs)} / {len(runs)}",
        geometric_mean_speed(runs),
    ]


def summary_line(batch: int, runs: list[dict]) -> str:
    """The run's one-line verdict for one batch size, as printed at its end."""
    _, n, tensorized, matching, speed = summary_row(batch, runs)
    return (
        f"ResNet-50 convs, batch {batch}: geometric mean torch/ours speed {speed:.2f} over {n}"
        f" convs; tensorized {tensorized}; matching torch {matching}"
    )


def resnet50_conv_results(runs: list[dict]) -> Results:
    """The resnet50_convs folder's document: per machine and commit, the summary of each batch
    size, then one table per batch size (runs carry their `batch`)."""
    tables = []
    groups = report.runs_by(runs, "machine", "commit", "command")
    for (where, commit, command), group in groups.items():
        batches = report.runs_by(group, "batch")
        summary = [summary_row(batch, rows) for (batch,), rows in batches.items()]
        title = "ResNet-50's 3x3 and 1x1 convolutions: summary"
        tables.append(Table(title, where, commit, command, SUMMARY_COLUMNS, summary))
        for (batch,), rows in batches.items():
            title = f"ResNet-50's 3x3 and 1x1 convolutions, batch {batch}"
            cells = [result_row(r) for r in rows]
            tables.append(Table(title, where, commit, command, COLUMNS, cells, CONV_NOTE))
    return Results("resnet50_convs", "ResNet-50 convolutions on Tensor Cores", tables, runs)


__all__ = [
    "COLUMNS",
    "geometric_mean_speed",
    "resnet50_conv_results",
    "summary_line",
    "tensor_core_results",
]
