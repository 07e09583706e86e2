"""The models of the end-to-end benchmark (`MODELS`: name -> `ModelSpec`), and the ones written
here in plain torch for it and for the front end's tests: a ResNet of BasicBlocks (ResNet-18 at
full width) and one BERT encoder layer. Sizes are arguments so the tests can build small copies
of the same graphs.

torchvision's ResNet-50, MobileNetV2 and ViT-B/16 and transformers' BERT-base are imported only
when built (they exist on the GPU machine; transformers also in the test environment, where
`bert(config)` builds a small one from a config).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 conv + BN, the residual (downsampled by a 1x1 conv +
    BN when the shape changes) added before the last ReLU."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet layout with BasicBlocks: `widths` per stage (64..512 for ResNet-18),
    `blocks` per stage."""

    def __init__(
        self, widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2), num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], widths[0]
        for i, (width, n) in enumerate(zip(widths, blocks, strict=True)):
            stride = 1 if i == 0 else 2
            layers = [BasicBlock(cin, width, stride)]
            layers += [BasicBlock(width, width) for _ in range(n - 1)]
            stages.append(nn.Sequential(*layers))
            cin = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet((64, 128, 256, 512), (2, 2, 2, 2), num_classes)


class BertLayer(nn.Module):
    """One post-norm BERT encoder layer (HuggingFace's BertLayer without dropout or mask):
    self-attention, output projection + residual + LayerNorm, GELU FFN + residual + LayerNorm."""

    def __init__(self, hidden: int, heads: int, ffn: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, ffn)
        self.output = nn.Linear(ffn, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)

    def _heads(self, x):
        """(batch, seq, hidden) -> (batch, heads, seq, head_dim); no shape unpacking, so that
        torch.fx can trace it."""
        return x.unflatten(-1, (self.heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = F.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).flatten(2)
        x = self.attn_norm(self.attn_out(ctx) + x)
        y = self.output(F.gelu(self.intermediate(x)))
        return self.out_norm(y + x)


class BertEncoder(nn.Module):
    """transformers' BertModel as the benchmark calls it: token ids and position ids in (the
    position ids an input, so that they live on the GPU with the ids and a CUDA graph captures
    the model), the last hidden state out."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, position_ids):
        return self.bert(input_ids=input_ids, position_ids=position_ids).last_hidden_state


def bert(batch: int, seq: int = 128, config=None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """transformers' BERT (BERT-base by default; `config` a `BertConfig` for a small one) with
    random weights, and (ids, position ids) of `batch` sequences of `seq` tokens."""
    from transformers import BertConfig, BertModel

    config = config or BertConfig()
    model = BertEncoder(BertModel(config, add_pooling_layer=False)).eval()
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    positions = torch.arange(seq).expand(batch, seq).contiguous()
    return model, (ids, positions)


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark model: `build(batch)` -> (model in eval mode, example inputs), fp32 on the
    CPU; `large_batch` is the batch the benchmark times besides 1."""

    name: str
    build: Callable[[int], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    large_batch: int


def torchvision_model(name: str) -> Callable[[int], tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    """A builder of torchvision's `name` (random weights) on 224x224 images."""

    def build(batch: int):
        import torchvision

        model = getattr(torchvision.models, name)(weights=None).eval()
        return model, (torch.randn(batch, 3, 224, 224),)

    return build


def _mlp(batch: int):
    """The seed tutorial's MLP: 784 -> 128 -> 10 with relu."""
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).eval()
    return model, (torch.randn(batch, 784),)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("resnet50", torchvision_model("resnet50"), 16),
        ModelSpec("mobilenet_v2", torchvision_model("mobilenet_v2"), 16),
        ModelSpec("vit_b_16", torchvision_model("vit_b_16"), 16),
        ModelSpec("bert_base", lambda batch: bert(batch), 16),
        ModelSpec("resnet18", lambda b: (resnet18().eval(), (torch.randn(b, 3, 224, 224),)), 16),
        ModelSpec(
            "bert_layer",
            lambda b: (BertLayer(768, 12, 3072).eval(), (torch.randn(b, 128, 768),)),
            16,
        ),
        ModelSpec("mlp", _mlp, 64),
    )
}
