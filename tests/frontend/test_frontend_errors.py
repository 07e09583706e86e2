"""The front end's answers to a model that cannot be used: one line naming the problem (no
tracer traceback on stderr), and no silent fall-back to PyTorch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import autosched.torch as at  # noqa: E402
from autosched.errors import ModelError, RecordError  # noqa: E402
from autosched.frontend.runtime import UntunedModelWarning  # noqa: E402


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()


@pytest.mark.parametrize(
    "example, words",
    [
        (torch.randn(4, 7), "([4, 7] float32): RuntimeError: mat1 and mat2 shapes cannot be"),
        (torch.ones(4, 16, dtype=torch.int64), "([4, 16] int64): RuntimeError: mat1 and mat2"),
    ],
)
def test_an_example_input_the_model_cannot_take_is_one_line(example, words, capfd):
    with pytest.raises(ModelError) as err:
        at.extract_tasks(mlp(), example)
    message = str(err.value)
    assert message.startswith("the model does not run on its example inputs")
    assert words in message and "\n" not in message and "tlparse" not in message
    assert "Traceback" not in capfd.readouterr().err


def test_a_model_or_input_of_the_wrong_type_is_named():
    with pytest.raises(ModelError, match="the model must be a torch.nn.Module, got str 'resnet'"):
        at.extract_tasks("resnet", torch.randn(4, 16))
    with pytest.raises(ModelError, match="example input 1 must be a torch.Tensor, got list"):
        at.extract_tasks(mlp(), (torch.randn(4, 16), [1, 2]))


def test_an_untraceable_model_is_one_line(capfd):
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x  # data-dependent control flow

    with pytest.raises(ModelError) as err:
        at.extract_tasks(Branchy(), torch.randn(2))
    message = str(err.value)
    assert message.startswith("torch.export cannot trace the model: GuardOnDataDependentSymNode")
    assert "\n" not in message and "Traceback" not in capfd.readouterr().err


def test_compile_names_a_missing_log_and_warns_when_nothing_is_tuned(tmp_path):
    x = torch.randn(4, 16)
    with pytest.raises(RecordError, match="record log 'nothere.json' does not exist"):
        at.compile(mlp(), x, log="nothere.json")
    with pytest.raises(RecordError, match="is a directory"):
        at.compile(mlp(), x, log=str(tmp_path))
    empty = tmp_path / "other.json"
    empty.write_text("")
    with pytest.warns(UntunedModelWarning, match="none of the model's 1 tasks has a record"):
        compiled = at.compile(mlp(), x, log=str(empty), use_interpreter=True)
    assert compiled.autosched_replaced == 0
