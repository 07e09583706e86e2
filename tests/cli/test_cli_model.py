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
    argvs += [["tune-model", "models:mlp", "--trials", "0"], ["tasks", "models:embed"]]
    argvs.append(["tasks", "models:lookup"])
    (status, out, err), *bad, trials, embed, lookup = run_cli(tmp_path, *argvs)
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
