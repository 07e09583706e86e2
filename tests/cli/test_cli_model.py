"""`autosched tasks` and `autosched tune-model` on a model factory in the current directory:
the task table without a GPU, and one clear line for a factory that is missing, broken or
returns the wrong thing."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]

FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn


    def mlp():
        model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).eval()
        return model, torch.randn(1, 784)


    def embed():
        model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 4)).eval()
        return model, torch.tensor([[1, 2, 3]])


    def lookup():
        return nn.Embedding(10, 8).eval(), torch.tensor([[1, 2, 3]])


    def not_a_pair():
        return 3


    def broken():
        raise ValueError("no weights here")
    """
)


BATCH = textwrap.dedent(
    """
    import contextlib, io, json, sys
    sys.path.remove("") if "" in sys.path else None  # as the console script runs
    from autosched.cli import main

    out = []
    for argv in json.loads(sys.argv[1]):
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = main(argv)
            except SystemExit as exc:
                status = exc.code
        out.append([status, stdout.getvalue(), stderr.getvalue()])
    print(json.dumps(out))
    """
)


def run_cli(tmp_path, *argvs):
    """Run `autosched` with each argv in one fresh process (cwd tmp_path): (status, out, err)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-c", BATCH, json.dumps([list(a) for a in argvs])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


CASES = [
    ("models:not_a_pair", "must return (model, example_inputs)"),
    ("models:broken", "ValueError: no weights here"),
    ("models:missing", "has no function 'missing'"),
    ("nowhere:mlp", "no module named 'nowhere'"),
    ("models:", "module:function"),
]


def test_tasks_lists_the_models_tasks_and_bad_factories_get_one_line(tmp_path):
    (tmp_path / "models.py").write_text(FACTORIES)
    argvs = [["tasks", "models:mlp"], *(["tasks", f] for f, _ in CASES)]
    argvs.append(["tune-model", "models:mlp", "--trials", "0"])
    argvs.append(["tune-model", "models:mlp", "--minutes", "0"])
    argvs += [["tasks", "models:embed"], ["tasks", "models:lookup"]]
    (status, out, err), *bad, trials, minutes, embed, lookup = run_cli(tmp_path, *argvs)
    assert status == 0, err
    assert "dense" in out and "784" in out and "float32" in out
    assert "nothing stays in PyTorch" in out
    assert embed[0] == 0 and "stays in PyTorch: aten.embedding x1" in embed[1], embed
    assert lookup[0] == 0 and "no operator autosched can tune" in lookup[1], lookup
    assert "stays in PyTorch: aten.embedding x1" in lookup[1]
    for (factory, message), (status, _, err) in zip(CASES, bad, strict=True):
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1, (factory, err)
        assert lines[0].startswith("autosched: ") and message in lines[0], (factory, lines)
    assert trials[0] == 2 and "positive integer" in trials[2]
    assert minutes[0] == 2 and "'0' is not a positive number of minutes" in minutes[2]


def test_tune_model_budgets_default_to_trials_per_task_and_minutes_become_seconds(
    tmp_path, monkeypatch, capsys
):
    """What `tune-model` hands `tune_tasks` (stubbed: no GPU here): the default trial budget,
    or the --minutes in seconds without a trial budget."""
    import autosched.cli.model as cli_model
    import autosched.search.tune_model as tune_model
    from autosched.cli import main
    from autosched.search.task_budget import default_trials
    from autosched.search.task_scheduler import SchedulerResult

    (tmp_path / "models.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []

    def fake_tune_tasks(tasks, weights, log, total_trials, **kw):
        calls.append((len(tasks), total_trials, kw["time_budget_s"]))
        return SchedulerResult([1e-6] * len(tasks), [1] * len(tasks), [None] * len(tasks))

    monkeypatch.setattr(tune_model, "tune_tasks", fake_tune_tasks)
    monkeypatch.setattr(cli_model, "measure_context", lambda ns: None)  # skip the GPU checks
    assert main(["tune-model", "models:mlp"]) == 0
    assert main(["tune-model", "models:mlp", "--minutes", "2.5"]) == 0
    assert main(["tune-model", "models:mlp", "--minutes", "1", "--trials", "64"]) == 0
    assert calls == [(2, default_trials(2), None), (2, None, 150.0), (2, 64, 60.0)]
    assert "budget: no limit on trials, at most 2.5 min" in capsys.readouterr().out
