"""The operator suite's tables (benchmarks/suite_tables.py) and run.py's settings, from made-up
runs: no GPU, no torch."""

from __future__ import annotations

import json

import pytest

from benchmarks.suite_tables import (
    SINGLE_COLUMNS,
    operator_results,
    runs_below,
    seeds_table,
    single_table,
)


def _run(workload: str, ours_us: float, seed: int = 0, trials: int = 256, **more) -> dict:
    """One run as benchmarks.run records it (only the fields the tables read)."""
    return {
        "workload": workload,
        "seed": seed,
        "planned_trials": trials,
        "machine": "NVIDIA H100 80GB HBM3",
        "commit": "abc1234",
        "command": f"python -m benchmarks.run --workloads {workload} --seeds {seed}",
        "flop": 0.231e9,
        "ours_us": ours_us,
        "record_us": 16.69,
        "torch_fp32_us": 167.2 if workload == "conv2d_bias_relu" else 59.0,
        "torch_tf32_us": 37.3,
        "ours_eager_us": 19.6,
        "torch_fp32_eager_us": 170.3,
        "torch_tf32_eager_us": 42.7,
        "ratio_vs_fp32": 0.10,
        "gflops": 13284.0,
        "pct_fp32_peak": 19.8,
        "trials": trials,
        "matches_torch": True,
        **more,
    }


def _cells(markdown: str, row: int) -> list[str]:
    """The cells of a table's `row`-th line after its heading separator."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|---"))
    return [c.strip() for c in lines[start + row].strip("|").split("|")]


def test_seeds_table_gives_each_seed_the_spread_and_the_seeds_ahead():
    runs = [_run("matmul", us, seed) for seed, us in ((2, 66.0), (0, 60.0), (1, 55.0))] + [
        _run("softmax", 5.0, 0, torch_fp32_us=5.0),
        _run("softmax", 5.5, 1, torch_fp32_us=5.0),
    ]
    table = seeds_table(runs, 256, "cmd").markdown()
    assert "| workload | seed 0 µs | seed 1 µs | seed 2 µs | spread |" in table
    assert _cells(table, 1) == ["matmul", "60.0", "55.0", "66.0", "1.20", "59.0", "1 of 3"]
    # a workload without seed 2 leaves its cell blank
    assert _cells(table, 2) == ["softmax", "5.0", "5.5", "", "1.10", "5.0", "0 of 2"]


def test_operator_results_make_one_table_per_trial_count_and_name_machine_and_commit():
    runs = [_run("conv2d_bias_relu", 17.7, trials=1000)]
    runs += [_run("matmul", us, seed) for seed, us in enumerate((60.0, 61.0))]
    results = operator_results(runs)
    assert [t.title for t in results.tables] == [
        "1000 trials, one search per workload",
        "256 trials, seeds 0, 1",
    ]
    assert (
        results.tables[1].command == "python -m benchmarks.run --workloads W --seeds S --trials 256"
    )
    assert "Measured on NVIDIA H100 80GB HBM3 at commit `abc1234`" in results.markdown()


def test_runs_below_gathers_a_queues_folders(tmp_path):
    from benchmarks.report import write_results

    for seed in (0, 1):
        folder = tmp_path / "default" / f"seed{seed}" / "matmul"
        write_results(operator_results([_run("matmul", 60.0 + seed, seed)]), root=str(folder))
    runs = runs_below([str(tmp_path)])
    assert [r["seed"] for r in runs] == [0, 1]
    assert json.loads(json.dumps(runs)) == runs


def test_param_model_and_sketch_settings_are_typed_by_their_defaults_and_bad_ones_named():
    import argparse

    from benchmarks.run import model_param, search_param, sketch_param

    assert search_param("eps_greedy=0.25") == ("eps_greedy", 0.25)
    assert sketch_param("shared_padding_probability=0.25") == ("shared_padding_probability", 0.25)
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


def test_single_table_shows_the_searchs_record_beside_the_benchmarks_time():
    run = _run("conv2d_bias_relu", 17.41, trials=256)
    table = single_table([run], 256, "cmd").markdown()
    header = [c.strip() for c in table.splitlines()[6].strip("|").split("|")]
    assert header == [c.name for c in SINGLE_COLUMNS]
    by_column = dict(zip(header, _cells(table, 1), strict=True))
    assert by_column["autosched µs"] == "17.4"
    assert by_column["search's record / runner again µs"] == "16.69"
    assert by_column["matches torch"] == "yes"
    again = single_table([{**run, "reread_us": 17.38}], 256, "cmd").markdown()
    assert _cells(again, 1)[3] == "16.69 / 17.38"


def test_run_merge_gathers_queued_searches_into_one_document(tmp_path):
    """`python -m benchmarks.run --merge QUEUE_OUT` tunes nothing (no GPU): it writes one
    operators document of every run below the folder."""
    from benchmarks.report import read_results, write_results
    from benchmarks.run import main

    for seed in (0, 1):
        folder = tmp_path / "queue" / "default" / f"seed{seed}" / "matmul"
        write_results(operator_results([_run("matmul", 60.0 + seed, seed)]), root=str(folder))
    assert main(["--merge", str(tmp_path / "queue"), "--out", str(tmp_path / "merged")]) == 0
    merged = read_results(str(tmp_path / "merged" / "operators" / "results.json"))
    assert [t.title for t in merged.tables] == ["256 trials, seeds 0, 1"]
    assert _cells(merged.tables[0].markdown(), 1)[:3] == ["matmul", "60.0", "61.0"]


def test_multi_gpu_table_pairs_one_gpu_with_all_and_names_failed_sections():
    from benchmarks.multi_gpu import multi_gpu_results

    figures = {
        "batch": 64,
        "throughput_1gpu": {"per_s": 20.0, "build_run_per_s": 25.0},
        "throughput_all": {"per_s": 30.0, "build_run_per_s": 40.0},
        "dask": {"error": "ModuleNotFoundError: distributed"},
    }
    where = {"machine": "2x NVIDIA H200", "commit": "abc1234", "command": "cmd"}
    (table,) = multi_gpu_results(figures, where).tables
    assert table.rows[0] == ["conv2d_bias_relu, candidates/s (batches of 64)", 20.0, 30.0, 1.5]
    assert "dask failed: ModuleNotFoundError: distributed" in table.note
    assert "| 20.0 | 30.0 | 1.50 |" in table.markdown()


def test_model_and_tensor_core_tables_group_runs_by_machine_and_commit():
    from benchmarks.model_e2e import model_results
    from benchmarks.tensor_core import tensor_core_results

    model = {
        "model": "mlp",
        "batch": 64,
        "dtype": "float32",
        "tasks": [{"name": "dense+relu"}, {"name": "dense"}],
        "tasks_tuned": 2,
        "flop_coverage": 1.0,
        "trials": 192,
        "ours_us": 10.5,
        "eager_us": 26.5,
        "inductor_us": 23.9,
        "estimated_latency_us": 9.9,
        "matches_eager": True,
        "tuning_s": 20.0,
        "machine": "m",
        "minutes": None,
        "budget_trials": 192,
        "command": "cmd",
    }
    tables = model_results([{**model, "commit": "a"}, {**model, "commit": "b"}]).tables
    assert [(t.commit, t.title) for t in tables] == [
        ("a", "mlp: 192 trials of tuning per configuration"),
        ("b", "mlp: 192 trials of tuning per configuration"),
    ]
    assert _cells(tables[0].markdown(), 1)[:4] == ["64", "float32", "2 / 2", "100%"]
    tc = {
        "name": "matmul_fp16_1024",
        "flop": 2147483648.0,
        "ours_us": 15.5,
        "torch_us": 6.2,
        "ours_same_inputs_us": 12.2,
        "torch_same_inputs_us": 5.6,
        "record_us": 11.7,
        "tensorized": True,
        "trials": 1000,
        "matches_torch": True,
        "machine": "m",
        "commit": "a",
        "command": "cmd",
    }
    (table,) = tensor_core_results([tc]).tables
    assert _cells(table.markdown(), 1)[:6] == [
        "matmul_fp16_1024",
        "2.15",
        "15.5",
        "6.2",
        "0.40",
        "139",
    ]
