"""The scaled-dot-product-attention hook: with `autosched.topi.attention` present SDPA is a
task (boolean masks made additive) whose DAG matches PyTorch; without it SDPA stays in PyTorch
and is counted in the coverage. And `torch.compile(backend=...)` gives the same tasks as
`extract_tasks`."""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import autosched.torch as at  # noqa: E402
from autosched import te, topi  # noqa: E402
from autosched.frontend import attention  # noqa: E402
from autosched.frontend.extract import extract  # noqa: E402
from autosched.frontend.runtime import DynamoCall, dynamo_backend  # noqa: E402
from autosched.topi.utils import cast_to  # noqa: E402
from tests.frontend.models import check_groups  # noqa: E402


def reference_attention(q, k, v, *, scale, causal, mask=None, out_dtype="float32"):
    """softmax(q k^T * scale + mask) v from topi's pieces: the contract of the attention
    module the hook calls (q, k, v as (batch * heads, seq, head_dim))."""
    scores = topi.nn.batch_matmul(q, k, transpose_b=True, out_dtype="float32")

    def scaled(b, i, j):
        s = scores[b, i, j] * scale
        return s if mask is None else s + cast_to(mask[b, i, j], "float32")

    logits = te.compute(scores.shape, scaled, name="T_logits", tag="broadcast")
    probs = topi.nn.softmax(logits, -1)
    return topi.nn.batch_matmul(probs, v, transpose_b=False, out_dtype=out_dtype)


@pytest.fixture
def attention_module(monkeypatch):
    module = types.ModuleType("autosched.topi.attention")
    module.attention = reference_attention  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "autosched.topi.attention", module)
    return module


class Attend(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x, keep):
        q, k, v = self.qkv(x).view(1, 4, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def _inputs():
    torch.manual_seed(3)
    keep = torch.rand(1, 1, 4, 4) > 0.3
    keep[..., 0] = True  # every query attends somewhere
    return torch.randn(1, 4, 8), keep


def test_sdpa_becomes_a_task_when_the_attention_module_is_there(attention_module):
    inputs = _inputs()
    ex = extract(Attend().eval(), inputs)
    assert [t.name for t in ex.tasks] == ["dense", "attention"]
    group = ex.tasks[1].groups[0]
    assert group.anchor.out_shape == (2, 4, 4)  # (batch * heads, Sq, head_dim)
    assert group.anchor.attrs == {"scale": 0.5, "causal": False}
    assert "aten.scaled_dot_product_attention" not in ex.coverage.leftover
    check_groups(ex, inputs)


def test_sdpa_stays_in_pytorch_without_the_attention_module(monkeypatch):
    monkeypatch.setattr(attention, "attention_available", lambda: False)
    tasks = at.extract_tasks(Attend().eval(), _inputs())
    assert [t.name for t in tasks] == ["dense"]
    assert tasks.coverage.leftover["aten.scaled_dot_product_attention"] == 1
    assert 0 < tasks.coverage.leftover_share < 1
    assert "aten.scaled_dot_product_attention x1 (" in at.print_tasks(tasks)


def test_torch_compile_backend_gives_the_tasks_extract_tasks_gives():
    torch.manual_seed(4)
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)).eval()
    x = torch.randn(2, 8)
    calls: list[DynamoCall] = []

    def recording(gm, example_inputs):
        call = dynamo_backend(gm, example_inputs)
        calls.append(call)
        return call

    with torch.no_grad(), pytest.warns(UserWarning, match="runs in PyTorch"):
        out = torch.compile(model, backend=recording)(x)
        torch.testing.assert_close(out, model(x))
    (call,) = calls
    via_dynamo = [t.workload_key for t in call.compiled.autosched_tasks]
    assert via_dynamo == [t.workload_key for t in at.extract_tasks(model, x)]
