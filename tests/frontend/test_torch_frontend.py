"""The PyTorch front end: task extraction, fusion, DAG correctness and the compiled model (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import autosched  # noqa: E402
import autosched.torch as at  # noqa: E402
from autosched.errors import RecordError  # noqa: E402
from autosched.frontend.extract import extract  # noqa: E402
from autosched.frontend.runtime import UntunedModelWarning  # noqa: E402
from benchmarks.model_zoo import BertLayer, ResNet  # noqa: E402
from tests.frontend.models import check_groups, init_bn, tune_one  # noqa: E402


def _small_resnet() -> nn.Module:
    """ResNet-18's graph (2 BasicBlocks a stage, downsampling blocks) at a few channels."""
    return ResNet((4, 8, 8, 8), (2, 2, 2, 2), num_classes=10)


class MLP(nn.Module):
    def __init__(self, sizes=(784, 128, 10)) -> None:
        super().__init__()
        self.fc1 = nn.Linear(sizes[0], sizes[1])
        self.fc2 = nn.Linear(sizes[1], sizes[2])

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + x)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.block1 = Block(8)
        self.block2 = Block(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = nn.functional.relu(self.bn(self.stem(x)))
        x = self.block2(self.block1(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)  # a global average pool; flatten stays
        return self.fc(x)


class Zoo(nn.Module):
    """One of every other anchor kind."""

    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(4, 8, 3, padding=1, groups=4)
        self.gconv = nn.Conv2d(8, 4, 1, groups=2)
        self.pool = nn.MaxPool2d(2)
        self.ln = nn.LayerNorm(6)
        self.proj = nn.Linear(6, 6)
        self.w = nn.Parameter(torch.randn(6, 3))

    def forward(self, x, q):
        y = torch.sigmoid(self.dw(x))
        y = F.avg_pool2d(self.pool(self.gconv(y)), 2, 1, count_include_pad=False)
        h = F.gelu(self.proj(self.ln(q)))
        att = torch.softmax(torch.bmm(h, h.transpose(1, 2)), dim=-1)
        return y, att @ h @ self.w


def test_seed_mlp_gives_two_tasks():
    tasks = at.extract_tasks(MLP().eval(), (torch.randn(1, 784),))
    assert [(t.name, t.weight) for t in tasks] == [("dense+relu", 1), ("dense", 1)]
    assert all(t.workload_key.startswith("dag-") for t in tasks)
    assert tasks[0].flop == pytest.approx(2 * 784 * 128, rel=0.01)
    table = at.print_tasks(tasks)
    assert "dense+relu" in table and "1x784" in table
    search_tasks, weights = at.tasks_and_weights(tasks)
    assert weights == [1, 1] and isinstance(search_tasks[0], autosched.SearchTask)


def test_conv_net_fuses_bn_relu_residual_and_shares_identical_blocks():
    model = init_bn(ConvNet())
    ex = extract(model, (torch.randn(1, 3, 8, 8),))
    got = [(t.name, t.weight) for t in ex.tasks]
    assert got == [
        ("conv2d+scale_shift+relu", 1),  # stem: conv bias, BN folded, relu
        ("conv2d+scale_shift+relu", 2),  # block conv1, twice
        ("conv2d+scale_shift+add+relu", 2),  # block conv2 + residual, twice
        ("avg_pool2d", 1),  # adaptive_avg_pool2d to 1x1
        ("dense", 1),
    ]
    grouped = {n for g in ex.groups for n in g.nodes}
    leftover = [str(n.target) for n in ex.gm.graph.nodes if n not in grouped]
    assert not any("batch_norm" in t or "relu" in t for t in leftover)
    assert "aten.flatten.using_ints" in leftover
    assert not ex.coverage.leftover  # a flatten is a view: nothing computes in PyTorch


def test_resnet_downsample_stays_whole_and_the_main_branch_takes_the_residual():
    """In a downsampling block the branch computed last (conv2 + bn2) absorbs the add + relu;
    the 1x1 downsample conv keeps only its BN; no node is in two groups."""
    ex = extract(init_bn(_small_resnet()), (torch.randn(1, 3, 32, 32),))
    got = [(t.name, t.weight) for t in ex.tasks]
    assert got[:4] == [
        ("conv2d+scale_shift+relu", 1),  # stem
        ("max_pool2d", 1),
        ("conv2d+scale_shift+relu", 2),  # stage 1 conv1, both blocks
        ("conv2d+scale_shift+add+relu", 2),  # stage 1 conv2 + identity
    ]
    names = [t.name for t in ex.tasks]
    assert names.count("conv2d+scale_shift") == 3  # the downsamples of stages 2-4
    assert names[-2:] == ["avg_pool2d", "dense"]
    nodes = [n for g in ex.groups for n in g.nodes]
    assert len(nodes) == len(set(nodes))
    assert sum(t.weight for t in ex.tasks) == len(ex.groups) == 23


def test_bert_layer_tasks():
    ex = extract(BertLayer(64, 4, 128).eval(), (torch.randn(1, 16, 64),))
    got = [(t.name, t.weight) for t in ex.tasks]
    assert got == [
        ("dense", 3),  # q, k, v
        ("batch_matmul+div", 1),  # q @ k^T / sqrt(d), k's transpose read in place
        ("softmax", 1),
        ("batch_matmul", 1),  # probs @ v
        ("dense+add", 1),  # attention output + residual
        ("layer_norm", 2),
        ("dense+gelu", 1),
        ("dense+add", 1),  # FFN output + residual
    ]
    scores = ex.tasks[1].groups[0]
    assert scores.anchor.attrs["transpose_b"] and scores.anchor.out_shape == (4, 16, 16)


@pytest.mark.parametrize(
    "model, inputs",
    [
        (ConvNet, lambda: (torch.randn(1, 3, 8, 8),)),
        (MLP, lambda: (torch.randn(3, 784),)),
        (Zoo, lambda: (torch.randn(1, 4, 8, 8), torch.randn(2, 5, 6))),
        (_small_resnet, lambda: (torch.randn(1, 3, 32, 32),)),
        (lambda: BertLayer(32, 4, 64), lambda: (torch.randn(1, 8, 32),)),
    ],
    ids=["convnet", "mlp", "zoo", "resnet", "bert"],
)
def test_each_task_dag_matches_its_pytorch_subgraph(model, inputs):
    torch.manual_seed(1)
    m = init_bn(model())
    args = inputs()
    ex = extract(m, args)
    check_groups(ex, args)
    if model is Zoo:
        kinds = {g.anchor.kind for g in ex.groups}
        assert kinds == {
            "depthwise_conv2d",
            "group_conv2d",
            "max_pool2d",
            "avg_pool2d",
            "layer_norm",
            "dense",
            "batch_matmul",
            "softmax",
            "matmul",
        }


def test_compile_without_records_falls_back_to_pytorch_with_a_warning(tmp_path):
    model = init_bn(ConvNet())
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(RecordError, match="none.json' does not exist"):
        at.compile(model, (x,), log=str(tmp_path / "none.json"))
    with pytest.warns(UntunedModelWarning, match="the model runs in PyTorch"):
        compiled = at.compile(model, (x,))
    assert compiled.autosched_replaced == 0
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_compile_runs_a_tuned_task_on_the_interpreter(tmp_path):
    torch.manual_seed(2)
    model = MLP((12, 8, 4)).eval()
    x = torch.randn(2, 12)
    log = str(tmp_path / "mlp.json")
    tune_one(at.extract_tasks(model, (x,))[0].task, log)
    compiled = at.compile(model, (x,), log=log, use_interpreter=True)
    assert compiled.autosched_replaced == 1
    calls = [n for n in compiled.graph.nodes if n.op == "call_module"]
    assert [n.target for n in calls if n.target != "_guards_fn"] == ["autosched_0"]
    assert any(n.target == torch.ops.aten.linear.default for n in compiled.graph.nodes)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_compile_chains_two_tuned_tasks(tmp_path):
    """Both layers tuned: the second call reads the first call's output (not the node it
    replaced)."""
    torch.manual_seed(4)
    model = MLP((12, 8, 4)).eval()
    x = torch.randn(2, 12)
    log = str(tmp_path / "mlp.json")
    tasks = at.extract_tasks(model, (x,))
    for index in range(len(tasks)):
        tune_one(tasks[index].task, log)
    compiled = at.compile(model, (x,), log=log, use_interpreter=True)
    assert compiled.autosched_replaced == 2
    calls = [n for n in compiled.graph.nodes if str(n.target).startswith("autosched_")]
    assert [n.target for n in calls] == ["autosched_0", "autosched_1"]
    assert calls[1].args == (calls[0],)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_torch_compile_backend(tmp_path):
    torch.manual_seed(3)
    model = MLP((12, 8, 4)).eval()
    x = torch.randn(2, 12)
    log = str(tmp_path / "mlp.json")
    tune_one(at.extract_tasks(model, (x,))[0].task, log)
    opt = torch.compile(model, backend="autosched", options={"log": log, "use_interpreter": True})
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x), rtol=1e-4, atol=1e-5)


def test_compiled_bert_layer_equals_eager(tmp_path):
    """A reduced BERT layer with its attention scores and FFN up-projection tuned (run on the
    interpreter); everything else stays in PyTorch."""
    torch.manual_seed(5)
    model = BertLayer(64, 4, 128).eval()
    x = torch.randn(1, 16, 64)
    log = str(tmp_path / "bert.json")
    tasks = at.extract_tasks(model, (x,))
    for index in (1, 6):  # batch_matmul+div, dense+gelu
        tune_one(tasks[index].task, log)
    compiled = at.compile(model, (x,), log=log, use_interpreter=True)
    assert compiled.autosched_replaced == 2
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_compiled_resnet_block_with_downsample_equals_eager(tmp_path):
    """The downsample (conv + BN) and the main branch that adds its output, both tuned: the
    second call reads the first call's output."""
    torch.manual_seed(6)
    model = init_bn(_small_resnet())
    x = torch.randn(1, 3, 32, 32)
    log = str(tmp_path / "resnet.json")
    tasks = at.extract_tasks(model, (x,))
    names = [t.name for t in tasks]
    down = names.index("conv2d+scale_shift")
    tune_one(tasks[down].task, log)
    tune_one(tasks[down + 2].task, log)  # the block's conv2 + bn2 + add + relu
    compiled = at.compile(model, (x,), log=log, use_interpreter=True)
    assert compiled.autosched_replaced == tasks[down].weight + tasks[down + 2].weight
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_unsupported_ops_stay_in_pytorch(monkeypatch):
    """An anchor whose DAG fails to build and a torch.div with a rounding mode are left to
    PyTorch, not a crash."""
    from autosched.frontend import dag_builder

    def broken(anchor, tensors):
        raise ValueError("not supported")

    monkeypatch.setitem(dag_builder.ANCHOR_BUILDERS, "softmax", broken)

    class Odd(nn.Module):
        def forward(self, a, b):
            s = torch.softmax(a, dim=-1)
            return torch.div(torch.matmul(s, b), 2.0, rounding_mode="floor")

    ex = extract(Odd(), (torch.randn(2, 3, 4), torch.randn(2, 4, 5)))
    assert [t.name for t in ex.tasks] == ["batch_matmul"]
