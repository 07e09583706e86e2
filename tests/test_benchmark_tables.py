"""The benchmark scripts' tables (benchmarks/run.py), from made-up rows: no GPU, no torch."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))


def test_spread_table_gives_each_seed_the_spread_and_the_seeds_ahead():
    from run import spread_table

    def rows(matmul_us: float, softmax_us: float) -> list[dict]:
        return [
            {"workload": "matmul", "ours_us": matmul_us, "torch_fp32_us": 59.0},
            {"workload": "softmax", "ours_us": softmax_us, "torch_fp32_us": 5.0},
        ]

    table = spread_table({2: rows(66.0, 5.5), 0: rows(60.0, 5.0), 1: rows(55.0, 5.5)}, "where")
    lines = table.splitlines()
    assert "| seed 0 µs | seed 1 µs | seed 2 µs |" in lines[4]
    assert lines[6] == "| matmul | 60.0 | 55.0 | 66.0 | 1.20 | 59.0 | 1 of 3 |"
    assert lines[7] == "| softmax | 5.0 | 5.5 | 5.5 | 1.10 | 5.0 | 0 of 3 |"
