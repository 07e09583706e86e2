"""Published results: one folder per benchmark, a JSON file and the Markdown rendered from it.

Every benchmark script ends by building a `Results` (its tables, each naming the machine and
commit it was measured on, plus the raw per-run rows) and handing it to `write_results`, which
writes `benchmarks/results/<benchmark>/results.json` and then `results.md` from that JSON. The
folder holds the latest run only: a new run replaces it, and git keeps the earlier ones.

    python -m benchmarks.report            # rewrite docs/PERFORMANCE.md from the folders
    python -m benchmarks.report --check    # fail if docs/PERFORMANCE.md is out of date

`docs/PERFORMANCE.md` is every folder's Markdown in `BENCHMARKS` order under one method note.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_ROOT = os.path.join(REPO_ROOT, "benchmarks", "results")
PERFORMANCE_PAGE = os.path.join(REPO_ROOT, "docs", "PERFORMANCE.md")

# The results folders, in the order docs/PERFORMANCE.md shows them.
BENCHMARKS = (
    "operators",
    "models",
    "tensor_cores",
    "resnet50_convs",
    "memory_bound",
    "multi_gpu",
    "pretrained_model",
)

METHOD = (
    "GPU time: 100 calls captured in one CUDA graph on one stream and replayed, the median of"
    " 20 replays timed between CUDA events, so no host launch cost is included. Inputs rotate"
    " over buffer copies spanning more than the L2 cache, so operands come from memory. PyTorch"
    " (cuBLAS / cuDNN, `torch.compile`) is timed by the same method in the same process, on the"
    " same inputs, after its output and ours are checked against each other"
    " (`benchmarks/timing.py`). The search's runner times every candidate the same way, so a"
    " log's record is the time the benchmark reads."
)

Cell = float | int | str | bool | None


@dataclasses.dataclass(frozen=True)
class Column:
    """A table column: its heading and how its numbers print (`str.format` syntax)."""

    name: str
    fmt: str = "{}"

    def render(self, value: Cell) -> str:
        """One cell as Markdown text: blank for missing values, yes/NO for checks."""
        if value is None:
            return ""
        if isinstance(value, bool):
            return "yes" if value else "NO"
        if isinstance(value, str):
            return value
        return self.fmt.format(value)


@dataclasses.dataclass
class Table:
    """One measured table: rows of cells under `columns`, from one machine at one commit."""

    title: str
    machine: str
    commit: str
    command: str
    columns: list[Column]
    rows: list[list[Cell]]
    note: str = ""

    def markdown(self) -> str:
        """The table as Markdown, under its title and a line naming machine, commit and command."""
        lines = [
            f"### {self.title}",
            "",
            f"Measured on {self.machine} at commit `{self.commit}` by `{self.command}`.",
            "",
        ]
        if self.note:
            lines += [self.note, ""]
        lines.append("| " + " | ".join(c.name for c in self.columns) + " |")
        lines.append("|" + "---|" * len(self.columns))
        for row in self.rows:
            cells = [col.render(value) for col, value in zip(self.columns, row, strict=True)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Results:
    """A benchmark's latest run: what `benchmarks/results/<benchmark>/` holds."""

    benchmark: str
    title: str
    tables: list[Table]
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Results:
        tables = [
            Table(**{**t, "columns": [Column(**c) for c in t["columns"]]}) for t in doc["tables"]
        ]
        return cls(doc["benchmark"], doc["title"], tables, doc.get("runs", []))

    def markdown(self) -> str:
        """The folder's results.md: the title, then every table."""
        parts = [f"## {self.title}\n"] + [t.markdown() for t in self.tables]
        return "\n".join(parts)


def write_results(results: Results, root: str = RESULTS_ROOT) -> str:
    """Write `<root>/<benchmark>/results.json`, then `results.md` rendered from what was written
    (so the Markdown never says more than the JSON holds); returns the folder."""
    folder = os.path.join(root, results.benchmark)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "results.json")
    with open(path, "w") as f:
        json.dump(results.to_json(), f, indent=1)
        f.write("\n")
    with open(os.path.join(folder, "results.md"), "w") as f:
        f.write(read_results(path).markdown())
    return folder


def read_results(path: str) -> Results:
    """A results.json back as `Results`."""
    with open(path) as f:
        return Results.from_json(json.load(f))


def performance_page(root: str = RESULTS_ROOT) -> str:
    """docs/PERFORMANCE.md: the method, then each benchmark folder's tables (those present)."""
    parts = [
        "# Performance\n",
        "Generated by `python -m benchmarks.report` from `benchmarks/results/*/results.json`;"
        " each benchmark script rewrites its folder. Do not edit by hand.\n",
        f"**Method.** {METHOD}\n",
        "Timings from different machines, or different runs on one machine, do not compare"
        " closely: compare within one table. What peers reach on the same GPUs is in"
        " `docs/ANCHORS.md`.\n",
    ]
    for name in BENCHMARKS:
        path = os.path.join(root, name, "results.json")
        if os.path.exists(path):
            parts.append(read_results(path).markdown())
    return "\n".join(parts)


def machine() -> str:
    """The GPUs this process sees, e.g. '2x NVIDIA H200' (needs torch with CUDA)."""
    import torch

    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if not names:
        return "no GPU"
    if len(set(names)) == 1:
        return names[0] if len(names) == 1 else f"{len(names)}x {names[0]}"
    return ", ".join(names)


def git_commit() -> str:
    """The short hash of the checked-out commit, or 'unknown' outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def runs_by(runs: list[dict], *keys: str) -> dict[tuple, list[dict]]:
    """Runs grouped by the values of `keys` (one table per group), groups in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return groups


def command_line(module: str, argv: list[str]) -> str:
    """How a benchmark was run, for its table: `python -m <module> <argv>`."""
    return " ".join(["python -m", module, *argv])


def add_publishing_arguments(ap: argparse.ArgumentParser, folder: str, out: str) -> None:
    """--out (logs, and the tables under OUT/`folder`/), --commit and --publish: how a
    benchmark says where its results go and which commit they name."""
    ap.add_argument("--out", default=out, help=f"logs; the tables go to OUT/{folder}/")
    ap.add_argument("--commit", default=None, help="commit to name (default: git HEAD)")
    ap.add_argument(
        "--publish",
        action="store_true",
        help=f"also write the tables to benchmarks/results/{folder}/ and docs/PERFORMANCE.md",
    )


def provenance(module: str, commit: str | None, argv: list[str] | None) -> dict[str, str]:
    """The machine, commit (`commit`, else git HEAD) and command line a run's rows carry
    (`argv` None: this process's own arguments)."""
    args = sys.argv[1:] if argv is None else argv
    return {
        "machine": machine(),
        "commit": commit or git_commit(),
        "command": command_line(module, args),
    }


def compared_kernel(
    name: str, task: Any, state: Any, out: str, compare: Callable[[str, Any], dict]
) -> tuple[Any, dict] | None:
    """The kernel of a search's best `state` of workload `name`, its CUDA source written to
    OUT/<name>.cu, and `compare(name, kernel)`'s figures beside PyTorch; None, with one line
    saying why, where the comparison failed (the search's records are kept)."""
    import autosched

    kernel = autosched.build(task.compute_dag, state)
    with open(os.path.join(out, f"{name}.cu"), "w") as f:
        f.write(kernel.source)
    try:
        return kernel, compare(name, kernel)
    except Exception as exc:
        print(f"{name}: comparison with PyTorch failed: {exc!r}", flush=True)
        return None


def finish(results: Results, publish: bool) -> None:
    """The end of a benchmark run: with --publish its results folder and docs/PERFORMANCE.md
    rewritten; its tables printed."""
    if publish:
        write_results(results)
        main([])
    print(results.markdown(), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write docs/PERFORMANCE.md from benchmarks/results.")
    ap.add_argument("--check", action="store_true", help="only check that the page is current")
    ns = ap.parse_args(argv)
    page = performance_page()
    if ns.check:
        with open(PERFORMANCE_PAGE) as f:
            if f.read() != page:
                print("docs/PERFORMANCE.md is out of date: run python -m benchmarks.report")
                return 1
        return 0
    with open(PERFORMANCE_PAGE, "w") as f:
        f.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
