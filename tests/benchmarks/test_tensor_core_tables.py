"""The Tensor Core benchmark's ResNet-50 conv group (benchmarks/tensor_core.py) and its
results document (benchmarks/tensor_core_tables.py), from made-up runs: no GPU, no torch."""

from __future__ import annotations

import math

from benchmarks.tensor_core import GROUPS, WORKLOADS, default_trials, documents
from benchmarks.tensor_core_tables import resnet50_conv_results, summary_line


def _run(name: str, batch: int, ours_us: float, torch_us: float, tensorized: bool = True):
    return {
        "name": name,
        "batch": batch,
        "flop": 1e9,
        "ours_us": ours_us,
        "torch_us": torch_us,
        "ours_same_inputs_us": ours_us,
        "torch_same_inputs_us": torch_us,
        "record_us": ours_us,
        "tensorized": tensorized,
        "instructions": "mma, 3 slots" if tensorized else "-",
        "trials": 64,
        "matches_torch": True,
        "machine": "m",
        "commit": "a",
        "command": "cmd",
    }


def test_the_group_holds_every_distinct_3x3_and_1x1_conv_at_batch_1_and_32():
    names = GROUPS["resnet50_convs"]
    args = [WORKLOADS[n][1] for n in names]
    assert len(set(args)) == len(args) == 40
    assert {a[0] for a in args} == {1, 32}
    assert {(a[5], a[7]) for a in args} == {(1, 1), (1, 2), (3, 1), (3, 2)}  # kernel, stride
    assert all(WORKLOADS[n][0] == "conv2d_nhwc_fp16" for n in names)
    assert set(GROUPS["resnet50"]) < set(names)


def test_the_group_runs_64_trials_unless_told():
    assert default_trials(["resnet50_convs"]) == 64
    assert default_trials(["core"]) == default_trials(["resnet50_convs", "core"]) == 1000


def test_the_summary_gives_the_geometric_mean_speed_and_tensorized_count_per_batch():
    runs = [
        _run("resnet50_b1_a", 1, 10.0, 20.0),
        _run("resnet50_b1_b", 1, 10.0, 5.0, tensorized=False),
        _run("resnet50_b32_a", 32, 10.0, 8.0),
    ]
    summary, batch1, batch32 = resnet50_conv_results(runs).tables
    assert summary.rows == [[1, 2, "1 / 2", "2 / 2", 1.0], [32, 1, "1 / 1", "1 / 1", 0.8]]
    assert [len(batch1.rows), len(batch32.rows)] == [2, 1]
    assert "| 1 | 2 | 1 / 2 | 2 / 2 | 1.00 |" in summary.markdown()
    line = summary_line(32, runs[2:])
    assert "batch 32" in line and "0.80" in line and "tensorized 1 / 1" in line
    assert math.isclose(summary.rows[0][-1], math.sqrt(2.0 * 0.5))


def test_a_group_run_keeps_its_rows_apart_from_the_tensor_core_table():
    conv, other = _run("resnet50_b1_a", 1, 1.0, 1.0), _run("matmul_fp16_1024", 1, 1.0, 1.0)
    assert [d.benchmark for d in documents([conv], {"resnet50_b1_a"})] == ["resnet50_convs"]
    docs = documents([conv, other], {"resnet50_b1_a"})
    assert [(d.benchmark, len(d.runs)) for d in docs] == [
        ("tensor_cores", 1),
        ("resnet50_convs", 1),
    ]
    assert [d.benchmark for d in documents([conv, other], set())] == ["tensor_cores"]
