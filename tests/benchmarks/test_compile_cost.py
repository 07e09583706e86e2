"""Tests of benchmarks/compile_cost.py: it samples a search's first candidates and compiles each
with and without the NVRTC speed options, and entry by entry (skipped without libnvrtc)."""

from __future__ import annotations

import json

import pytest

from benchmarks import compile_cost
from measure.nvrtc import find_nvrtc


@pytest.mark.skipif(
    find_nvrtc() is None, reason="libnvrtc not found (pip install nvidia-cuda-nvrtc)"
)
def test_compile_cost_times_every_sampled_kernel_every_way(tmp_path, capsys):
    out = tmp_path / "cost.json"
    assert (
        compile_cost.main(
            [
                "matmul",
                "64",
                "48",
                "32",
                "--samples",
                "2",
                "--json",
                str(out),
                "--split-entries",
                "--fresh",
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert set(data["kernels"]) == {"plain", "speed options", "apart, cached"}
    plain, fast = data["kernels"]["plain"], data["kernels"]["speed options"]
    assert len(plain) == len(fast) and 1 <= len(plain) <= 2
    for run in plain + fast:
        assert run["cpu"] > 0 and run["nvvm"] > 0 and run["ptxas"] > 0
    summary = data["summary"]["plain"]
    assert summary["total_cpu_s"] == pytest.approx(sum(r["cpu"] for r in plain))
    assert "speed options accepted:" in capsys.readouterr().out
