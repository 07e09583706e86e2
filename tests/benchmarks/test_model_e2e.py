"""benchmarks/model_e2e.py and model_zoo.py without a GPU: the configurations a command line
asks for, one table per model (a failed configuration keeps its row and says why), the FLOP
coverage of a model's tasks and each task's PyTorch time. (BERT from transformers is not built
here: importing transformers alone takes several seconds.)"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import autosched.torch as at  # noqa: E402
from autosched.search.pytorch_times import subgraph_times  # noqa: E402
from benchmarks.model_e2e import (  # noqa: E402
    Config,
    configs,
    estimate_at,
    flop_coverage,
    model_results,
    prepared,
)
from benchmarks.model_zoo import MODELS  # noqa: E402


def test_configs_cross_models_batches_and_precisions():
    got = configs(["mlp", "resnet50"], ["1", "large"], ["float32", "float16"])
    assert [c.name for c in got[:4]] == [
        "mlp_b1_float32",
        "mlp_b1_float16",
        "mlp_b64_float32",
        "mlp_b64_float16",
    ]
    assert {c.batch for c in got if c.model == "resnet50"} == {1, MODELS["resnet50"].large_batch}
    assert len(configs(["mlp"], ["64", "large"], ["float32"])) == 1  # the same batch once


def run(model, batch, dtype, **figures):
    return {
        "model": model,
        "batch": batch,
        "dtype": dtype,
        "machine": "NVIDIA H100 80GB HBM3",
        "commit": "abc1234",
        "command": "python -m benchmarks.model_e2e --minutes 4",
        "minutes": 4.0,
        "budget_trials": None,
        **figures,
    }


def test_one_table_per_model_with_ratios_and_failed_configurations():
    done = {
        "tasks": [{"name": "conv2d"}] * 3,
        "tasks_tuned": 2,
        "flop_coverage": 0.953,
        "trials": 900,
        "tuning_s": 241.0,
        "ours_us": 500.0,
        "eager_us": 1000.0,
        "inductor_us": 750.0,
        "estimated_latency_us": 480.0,
        "estimated_at_third_us": 520.0,
        "matches_eager": True,
    }
    runs = [
        run("resnet50", 1, "float32", **done),
        run("resnet50", 1, "float16", error="ModelError: cannot trace"),
        run("bert_base", 16, "float32", **done),
    ]
    summary, resnet, bert_table = model_results(runs).tables
    assert summary.title == "All models" and len(summary.rows) == 3
    assert summary.rows[0][:3] == ["resnet50", 1, "float32"]
    assert summary.rows[0][-3:] == [750.0 / 500.0, True, "abc1234"]  # torch.compile / ours
    assert summary.rows[1][5] is None  # the failed configuration has no time
    assert resnet.title == "resnet50: 4 minutes of tuning per configuration"
    lines = resnet.markdown().splitlines()
    assert (
        "| 1 | float32 | 2 / 3 | 95% | 900 | 241 | 500.0 | 1000.0 | 750.0 | 2.00 | 1.50 |"
        in (lines[-2])
    )
    assert lines[-1].startswith("| 1 | float16 |  |") and "ModelError: cannot trace" in lines[-1]
    assert bert_table.rows[0][:2] == [16, "float32"]


def test_the_estimate_a_third_of_the_way_is_the_last_round_ended_by_then():
    history = [
        {"elapsed_s": 10.0, "latency_us": 900.0},
        {"elapsed_s": 50.0, "latency_us": 600.0},
        {"elapsed_s": 150.0, "latency_us": 500.0},
    ]
    assert estimate_at(history, 150.0 / 3) == 600.0
    assert estimate_at(history, 5.0) is None


def test_flop_coverage_and_pytorch_times_of_a_small_model():
    model, inputs = prepared(Config("mlp", 4, "float32"), "cpu")
    tasks = at.extract_tasks(model, inputs)
    assert 0.9 < flop_coverage(model, inputs, tasks) <= 1.0
    times = subgraph_times(tasks, inputs, repeats=3)
    assert len(times) == len(tasks) and all(0 < t < math.inf for t in times)
    assert subgraph_times(tasks, (torch.randn(4, 5),)) == [math.inf] * len(tasks)  # wrong input
