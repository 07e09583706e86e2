"""The benchmark scripts' tables and settings (benchmarks/run.py), from made-up rows: no GPU,
no torch."""

from __future__ import annotations

import os
import sys

import pytest

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


def test_param_model_and_sketch_settings_are_typed_by_their_defaults_and_bad_ones_named():
    import argparse

    from run import model_param, search_param, sketch_param

    assert search_param("eps_greedy=0.25") == ("eps_greedy", 0.25)
    assert sketch_param("unroll_over_budget_probability=0.5") == (
        "unroll_over_budget_probability",
        0.5,
    )
    assert search_param("launch_cap=3") == ("launch_cap", 3)
    assert model_param("max_depth=3") == ("max_depth", 3)
    assert model_param("program_rows=sum_max") == ("program_rows", "sum_max")
    assert sketch_param("auto_unroll_configs=64,512") == ("auto_unroll_configs", (64, 512))
    assert search_param("mutation_weights=tile_size:0.6,auto_unroll:0.3") == (
        "mutation_weights",
        (("tile_size", 0.6), ("auto_unroll", 0.3)),
    )
    for bad, says in [
        (lambda: search_param("eps_greedy=lots"), "eps_greedy takes a float"),
        (lambda: sketch_param("auto_unroll_configs=64,x"), "takes comma-separated ints"),
        (lambda: search_param("seed=1"), "expected NAME=VALUE"),  # --seeds sets it
        (lambda: model_param("few_shot_threshold=0"), "expected NAME=VALUE"),  # --few-shot
        (lambda: model_param("max_depth"), "expected NAME=VALUE"),
        (lambda: search_param("mutation_weights=x"), "NAME:float pairs, got 'x'"),
        (lambda: search_param("mutation_weights=tile_size:y"), "got 'tile_size:y'"),
        (lambda: model_param("nthread=2"), "not a number, a string or numbers"),
        (lambda: sketch_param("allow_tf32=1"), "expected NAME=VALUE"),  # the task's option
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            bad()


def test_chance_three_within_counts_the_triples_a_brute_force_counts():
    import itertools
    import random

    from seed_spread import chance_three_within

    assert chance_three_within([1.0, 1.0, 1.2], 0.10) == 9 / 27  # 1,1,1 (8 ways) and 1.2 x3
    rng = random.Random(0)
    for _ in range(20):
        times = [round(rng.uniform(3.0, 4.0), 1) for _ in range(rng.randint(1, 7))]
        brute = (
            sum(max(t) <= min(t) * 1.1 for t in itertools.product(times, repeat=3))
            / len(times) ** 3
        )
        assert chance_three_within(times, 0.10) == pytest.approx(brute)


def test_seed_spread_reads_a_commands_seeds_as_one_setting(tmp_path):
    import json

    from seed_spread import pooled, read_runs, report

    for setting, times in {"a": [3.0, 3.1, 3.2], "b": [3.0, 4.0, 3.5]}.items():
        for seed, us in enumerate(times):
            folder = tmp_path / setting / f"seed{seed}"
            folder.mkdir(parents=True)
            rows = [{"workload": "bmm", "ours_us": us}, {"workload": "mm", "ours_us": 60.0}]
            (folder / "results.json").write_text(json.dumps({"where": "", "rows": rows}))
    runs = read_runs([str(tmp_path)])
    name = tmp_path.name
    assert runs["bmm"] == {f"{name}/a": [3.0, 3.1, 3.2], f"{name}/b": [3.0, 4.0, 3.5]}
    assert pooled(runs["mm"][f"{name}/a"] * 2, 0.10)["three_within"] == 1.0
    text = report(runs, 0.10)
    assert "| " + name + "/b | 3.00 / 4.00 / 3.50 | 1.33 |" in text
    assert "1 of the 2 three-run settings did" in text


def test_seed_spread_reads_a_queues_gzipped_results_by_setting(tmp_path):
    """run_queue.py writes SETTING/seedN/WORKLOAD/, and results folders keep results.json
    gzipped: the setting is still SETTING, whatever the workload folder."""
    import gzip
    import json

    from seed_spread import read_runs

    for seed, us in enumerate([3.0, 3.3]):
        folder = tmp_path / "deep" / f"seed{seed}" / "bmm"
        folder.mkdir(parents=True)
        rows = [{"workload": "bmm", "ours_us": us}]
        with gzip.open(folder / "results.json.gz", "wt") as f:
            json.dump({"where": "", "rows": rows}, f)
    assert read_runs([str(tmp_path)])["bmm"] == {f"{tmp_path.name}/deep": [3.0, 3.3]}


def test_results_table_shows_the_searchs_record_beside_the_benchmarks_time():
    from run import COLUMNS, markdown

    row = {
        "workload": "conv2d_bias_relu",
        "flop": 0.231e9,
        "ours_us": 17.41,
        "record_us": 16.69,
        "torch_fp32_us": 167.2,
        "torch_tf32_us": 37.3,
        "ours_eager_us": 19.6,
        "torch_fp32_eager_us": 170.3,
        "torch_tf32_eager_us": 42.7,
        "ratio_vs_fp32": 0.10,
        "gflops": 13284.0,
        "pct_fp32_peak": 19.8,
        "trials": 256,
        "matches_torch": True,
        "search_s": 41.0,
        "measure_s": 15.0,
        "model_s": 3.0,
    }
    lines = markdown([row], "where").splitlines()
    header = [c.strip() for c in lines[4].strip("|").split("|")]
    cells = [c.strip() for c in lines[6].strip("|").split("|")]
    assert header == COLUMNS and len(cells) == len(COLUMNS)
    by_column = dict(zip(header, cells, strict=True))
    assert by_column["autosched µs"] == "17.4"
    assert by_column["search's record / runner again µs"] == "16.69"
    again = markdown([{**row, "reread_us": 17.38}], "where").splitlines()[6]
    assert [c.strip() for c in again.strip("|").split("|")][3] == "16.69 / 17.38"
    # rows written before the columns existed still make a table
    old = {k: v for k, v in row.items() if k != "record_us"}
    assert [c.strip() for c in markdown([old], "w").splitlines()[6].strip("|").split("|")][3] == ""
