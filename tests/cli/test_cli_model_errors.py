"""`autosched tasks` / `tune-model` on factories a user gets wrong, and without PyTorch: exit
status 2 and one line naming the problem."""

from __future__ import annotations

import sys

import pytest

from autosched.cli.app import main

FACTORIES = """
import torch


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()


def a_string():
    return "resnet"


def named_model():
    return "resnet", torch.randn(4, 16)


def wrong_shape():
    return mlp(), torch.randn(4, 7)


def wrong_dtype():
    return mlp(), torch.ones(4, 16, dtype=torch.int64)
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    name = f"factories_{tmp_path.name}"  # a module name no other test has imported
    (tmp_path / f"{name}.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def refused(argv: list[str], capfd) -> str:
    assert main(argv) == 2
    out, err = capfd.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autosched: "), err
    assert "Traceback" not in err + out
    return lines[0]


def test_factories_that_return_the_wrong_things(factories, capfd):
    pytest.importorskip("torch")
    line = refused(["tasks", f"{factories}:a_string"], capfd)
    assert "a_string() returned str; it must return (model, example_inputs)" in line
    line = refused(["tasks", f"{factories}:named_model"], capfd)
    assert "the model must be a torch.nn.Module, got str 'resnet'" in line
    line = refused(["tasks", f"{factories}:wrong_shape"], capfd)
    assert "does not run on its example inputs ([4, 7] float32)" in line and "tlparse" not in line
    line = refused(["tune-model", f"{factories}:wrong_dtype", "--trials", "4"], capfd)
    assert "([4, 16] int64): RuntimeError: mat1 and mat2 must have the same dtype" in line


def test_listing_tasks_without_torch_says_what_to_install(factories, capfd, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.setitem(sys.modules, "autosched.torch", None)
    line = refused(["tasks", f"{factories}:mlp"], capfd)
    assert line.startswith("autosched: listing a model's tasks needs PyTorch")
    assert "--index-url https://download.pytorch.org/whl/cpu" in line
    line = refused(["tune-model", f"{factories}:mlp"], capfd)
    assert line.startswith("autosched: tuning a model needs PyTorch")
