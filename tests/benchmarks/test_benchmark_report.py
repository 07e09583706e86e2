"""benchmarks/report.py: a results JSON rendered as its Markdown table, and docs/PERFORMANCE.md
generated from the results folders (no GPU, no torch)."""

from __future__ import annotations

import json
import os

from benchmarks import report
from benchmarks.report import Column, Results, Table, read_results, write_results


def _results() -> Results:
    table = Table(
        "1000 trials",
        "NVIDIA H100 80GB HBM3",
        "abc1234",
        "python -m benchmarks.run --trials 1000",
        [Column("workload"), Column("µs", "{:.1f}"), Column("ratio", "{:.2f}"), Column("ok")],
        [["matmul", 54.53, 0.9229, True], ["softmax", None, 0.94, False]],
        note="GPU time.",
    )
    return Results("operators", "Operators against PyTorch", [table], [{"workload": "matmul"}])


def test_write_results_renders_the_json_as_a_markdown_table(tmp_path):
    folder = write_results(_results(), root=str(tmp_path))
    assert folder == str(tmp_path / "operators")
    with open(tmp_path / "operators" / "results.json") as f:
        doc = json.load(f)
    assert doc["tables"][0]["rows"][0] == ["matmul", 54.53, 0.9229, True]  # numbers, not text
    assert doc["runs"] == [{"workload": "matmul"}]
    md = (tmp_path / "operators" / "results.md").read_text()
    assert md.splitlines() == [
        "## Operators against PyTorch",
        "",
        "### 1000 trials",
        "",
        "Measured on NVIDIA H100 80GB HBM3 at commit `abc1234` by"
        " `python -m benchmarks.run --trials 1000`.",
        "",
        "GPU time.",
        "",
        "| workload | µs | ratio | ok |",
        "|---|---|---|---|",
        "| matmul | 54.5 | 0.92 | yes |",
        "| softmax |  | 0.94 | NO |",
    ]


def test_results_read_back_as_they_were_written(tmp_path):
    write_results(_results(), root=str(tmp_path))
    assert read_results(str(tmp_path / "operators" / "results.json")) == _results()


def test_performance_page_holds_every_folder_in_order(tmp_path):
    write_results(_results(), root=str(tmp_path))
    models = Results("models", "Whole models", [], [])
    write_results(models, root=str(tmp_path))
    page = report.performance_page(str(tmp_path))
    assert page.index("## Operators against PyTorch") < page.index("## Whole models")
    assert "CUDA graph" in page  # the method


def test_docs_performance_is_generated_from_the_published_results():
    """docs/PERFORMANCE.md is what `python -m benchmarks.report` writes from the folders."""
    with open(report.PERFORMANCE_PAGE) as f:
        assert f.read() == report.performance_page(), "run python -m benchmarks.report"
    published = [n for n in report.BENCHMARKS if os.path.exists(f"{report.RESULTS_ROOT}/{n}")]
    assert "tensor_cores" in published
    for name in published:  # every published folder renders its own Markdown
        folder = f"{report.RESULTS_ROOT}/{name}"
        with open(f"{folder}/results.md") as f:
            assert f.read() == read_results(f"{folder}/results.json").markdown()
