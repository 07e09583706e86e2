"""Model families from the graphs `torch.export` gives: which tasks they yield (their linears,
matmuls and convolutions, with their element-wise neighbours fused), and every fused group's
DAG against the PyTorch values on the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch import nn  # noqa: E402

import autosched.torch as at  # noqa: E402
from autosched.frontend.extract import ModelTasks, extract  # noqa: E402
from tests.frontend.models import (  # noqa: E402
    MobileBlock,
    ViTBlock,
    check_groups,
    init_bn,
    tiny_bert,
    tiny_gpt2,
    tune_one,
)


def _names(ex) -> list[tuple[str, int]]:
    return [(t.name, t.weight) for t in ex.tasks]


def test_mobile_block_fuses_relu6_hardswish_and_the_residual():
    model = init_bn(MobileBlock())
    x = torch.randn(1, 4, 6, 6)
    ex = extract(model, (x,))
    assert _names(ex) == [
        ("conv2d+scale_shift+relu6", 1),
        ("depthwise_conv2d+scale_shift+hardswish", 1),
        ("conv2d+scale_shift+add", 1),
    ]
    assert not ex.coverage.leftover
    check_groups(ex, (x,))


def test_vit_block_with_multihead_attention():
    torch.manual_seed(0)
    model = ViTBlock().eval()
    x = torch.randn(1, 5, 16)
    ex = extract(model, (x,))
    assert _names(ex) == [
        ("layer_norm", 2),
        ("dense", 1),  # the packed q, k, v projection
        ("attention", 1),  # scaled_dot_product_attention as one task
        ("dense", 1),  # the attention's output projection
        ("dense+gelu_tanh", 1),
        ("dense+add", 1),  # fc2 + residual
    ]
    check_groups(ex, (x,))


def test_a_tuned_attention_keeps_the_output_layout_of_pytorchs(tmp_path):
    """scaled_dot_product_attention lays its output out (batch, sequence, head) and the graph
    views it through a permute; the tuned call reads q, k, v in place, hands on the output's
    strides, and the compiled block matches eager."""
    torch.manual_seed(0)
    model = ViTBlock().eval()
    x = torch.randn(1, 5, 16)
    ex = extract(model, (x,))
    (attention,) = [t for t in ex.tasks if t.name == "attention"]
    want_strides = attention.groups[0].output.meta["val"].stride()
    # q, k and v are transposed views of the projection: read where they lie, not copied
    assert all(o.layout is not None for o in attention.groups[0].anchor.operands)
    log = str(tmp_path / "vit.json")
    tune_one(attention.task, log)
    compiled = at.compile(model, (x,), log=log, use_interpreter=True)
    seen = []
    call = next(m for n, m in compiled.named_children() if n.startswith("autosched_"))
    call.register_forward_hook(lambda _m, _i, out: seen.append(out.stride()))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert seen == [want_strides] != [(80, 40, 8, 1)]


def test_transformer_encoder_layer_extracts_inside_a_users_module():
    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.layer(x))

    torch.manual_seed(1)
    model = Encoder().eval()
    x = torch.randn(2, 4, 16)
    ex = extract(model, (x,))
    names = [t.name for t in ex.tasks]
    assert "dense+relu" in names and "dense+add" in names and names.count("layer_norm") == 1
    assert sum(t.weight for t in ex.tasks if t.groups[0].anchor.kind == "dense") == 5
    check_groups(ex, (x,))


def test_hugging_face_bert_extracts_compiles_and_matches_eager(tmp_path):
    """BERT's linears and its attention (scaled_dot_product_attention, through
    `topi.attention`) become tasks; with its FFN up-projection + GELU tuned (run on the
    interpreter) the compiled model keeps its Hugging Face output type and matches eager."""
    model, inputs = tiny_bert()
    ex = extract(model, inputs)
    assert _names(ex) == [
        ("layer_norm", 5),  # embeddings + 2 per layer
        ("dense", 6),  # q, k, v of 2 layers
        ("attention", 2),
        ("dense+add", 2),  # attention output + residual (dropout is inference's identity)
        ("dense+gelu", 2),
        ("dense+add", 2),  # FFN output + residual
        ("dense+tanh", 1),  # the pooler
    ]
    assert "aten.scaled_dot_product_attention" not in ex.coverage.leftover
    check_groups(ex, inputs)
    up = ex.tasks[4]
    log = str(tmp_path / "bert.json")
    tune_one(up.task, log)
    compiled = at.compile(model, inputs, log=log, use_interpreter=True)
    assert compiled.autosched_replaced == up.weight == 2
    with torch.no_grad():
        got, want = compiled(*inputs), model(*inputs)
    assert type(got) is type(want)
    torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)


def test_hugging_face_gpt2_extracts_its_conv1d_layers():
    """GPT-2's Conv1D is `addmm(bias, x, W)`: a dense layer on the constant W's transpose,
    the residual fused through the reshape that follows it; its GELU written out operator by
    operator is recognised as GELU (tanh)."""
    model, inputs = tiny_gpt2()
    ex = extract(model, inputs)
    assert _names(ex) == [
        ("layer_norm", 5),
        ("dense", 2),  # c_attn: q, k, v packed
        ("attention", 2),  # causal
        ("dense+add", 2),  # c_proj + residual
        ("dense+gelu_tanh", 2),  # c_fc + "gelu_new"
        ("dense+add", 2),  # mlp c_proj + residual
    ]
    text = at.print_tasks(ModelTasks(ex.tasks, ex.coverage))
    assert "stays in PyTorch: " in text and "scaled_dot_product_attention" not in text
    check_groups(ex, inputs)


def test_in_place_ops_fuse_only_when_they_update_the_groups_own_output():
    class InPlace(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(8, 8)
            self.fc2 = nn.Linear(8, 8)

        def forward(self, x):
            h = self.fc1(x)
            h += x  # h is the group's output: fused
            z = x * 2.0
            z += self.fc2(x)  # z changes, not the group's output: stays in PyTorch
            return torch.relu_(h), z

    x = torch.randn(2, 8)
    ex = extract(InPlace().eval(), (x,))
    assert [t.name for t in ex.tasks] == ["dense+add+relu", "dense"]
    check_groups(ex, (x,))
