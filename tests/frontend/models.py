"""Small models of each family the front end meets (tests build them from configs: no
downloads), the check that every fused group's DAG computes what its PyTorch nodes do, and a
one-record log for a task."""

from __future__ import annotations

import random

import torch
from torch import fx, nn
from torch.nn import functional as F

import autosched
from autosched.frontend.extract import Extraction
from autosched.frontend.runtime import storage_to_tensor, tensor_to_storage
from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile


class MobileBlock(nn.Module):
    """MobileNet's inverted residual (1x1 expand, ReLU6; depthwise 3x3, hardswish; 1x1
    project; residual), each conv followed by a batch norm."""

    def __init__(self, c: int = 4, expand: int = 2) -> None:
        super().__init__()
        hidden = c * expand
        self.expand = nn.Conv2d(c, hidden, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.dw = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False)
        self.bn2 = nn.BatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu6(self.bn1(self.expand(x)))
        y = F.hardswish(self.bn2(self.dw(y)))
        return self.bn3(self.project(y)) + x


class ViTBlock(nn.Module):
    """A pre-norm ViT encoder block: layer norm, nn.MultiheadAttention, residual, GELU MLP."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def init_bn(model: nn.Module) -> nn.Module:
    """Batch-norm statistics away from (0, 1), so that folding them is tested; eval mode."""
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model.eval()


def tiny_bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=50,
        max_position_embeddings=16,
    )
    return BertModel(config).eval(), (torch.randint(0, 50, (1, 8)),)


def tiny_gpt2():
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=50,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2Model(config).eval(), (torch.randint(0, 50, (1, 8)),)


def node_values(gm: fx.GraphModule, inputs: tuple) -> dict:
    """The value of every node of `gm` run on `inputs`."""
    values: dict = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n):
            values[n] = super().run_node(n)
            return values[n]

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return values


def check_groups(ex: Extraction, inputs: tuple, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """Every group's DAG, evaluated by the numpy reference on the values its nodes had in the
    PyTorch run, gives the value of its output node."""
    values = node_values(ex.gm, inputs)
    for g in ex.groups:
        tensors = g.dag.tensors[: len(g.operands)]
        feed = {
            t.name: tensor_to_storage(v) for t, v in zip(tensors, g.dag_inputs(values), strict=True)
        }
        out_tensor = g.dag.outputs[0]
        out = autosched.evaluate(g.dag, feed)[out_tensor.name]
        got = storage_to_tensor(out, out_tensor.dtype).float()
        want = values[g.output].float().reshape(got.shape)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=g.name)


def tune_one(task, log: str) -> None:
    """Write a record of one sampled state of `task` (what a tuned log holds for it)."""
    sketches = autosched.generate_sketches(task)
    (state,) = autosched.sample_initial_population(sketches, 1, random.Random(0))
    inp = MeasureInput(
        task.workload_key,
        tuple(s.to_record() for s in state.steps),
        dag=task.compute_dag.serialized(),
    )
    RecordToFile(log)([inp], [MeasureRecordResult((1e-5,), 0, "", 0.1, 0.1, 1.0)])
