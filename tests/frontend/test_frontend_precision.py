"""Half precision and TF32: float16 / bfloat16 models give tasks in their dtype (float32
accumulation, one rounding at the output), float32 tasks allow TF32 exactly where PyTorch's
flags would use it, and a compiled half-precision model matches eager at half tolerance."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import autosched.torch as at  # noqa: E402
from autosched.frontend.extract import extract  # noqa: E402
from tests.frontend.models import MobileBlock, check_groups, init_bn, tune_one  # noqa: E402

HALF_TOLERANCE = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 3e-2)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_models_give_tasks_in_their_dtype(dtype):
    model = init_bn(MobileBlock()).to(dtype)
    x = torch.randn(1, 4, 6, 6).to(dtype)
    ex = extract(model, (x,))
    assert len(ex.tasks) == 3
    te_dtype = str(dtype).removeprefix("torch.")
    for t in ex.tasks:
        dag = t.task.compute_dag
        data, weight = dag.tensors[:2]
        assert (data.dtype, weight.dtype, dag.outputs[0].dtype) == (te_dtype,) * 3
        assert not t.task.allow_tf32
    conv = ex.tasks[0].task.compute_dag
    assert any(op.name.startswith("T_cast") for op in conv.ops)  # float32 sum, then rounded
    rtol, atol = HALF_TOLERANCE[dtype]
    check_groups(ex, (x,), rtol=rtol, atol=atol)


def test_an_explicit_cast_is_fused_and_sets_the_output_dtype():
    class Cast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.fc(x)).half()

    x = torch.randn(3, 8)
    ex = extract(Cast().eval(), (x,))
    (task,) = ex.tasks
    assert task.name == "dense+relu+cast"
    assert task.task.compute_dag.outputs[0].dtype == "float16"
    check_groups(ex, (x,), rtol=1e-2, atol=1e-2)


@pytest.fixture
def precision_flags():
    """PyTorch's TF32 settings, restored after the test."""
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


class ConvLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.conv(x).mean((2, 3)))


@pytest.mark.parametrize("cudnn, cublas", [(True, False), (False, True)])
def test_float32_tasks_follow_pytorchs_tf32_flags(precision_flags, cudnn, cublas):
    torch.backends.cudnn.allow_tf32 = cudnn
    torch.backends.cuda.matmul.allow_tf32 = cublas
    tasks = at.extract_tasks(ConvLinear().eval(), torch.randn(1, 3, 6, 6))
    tf32 = {t.groups[0].anchor.kind: t.task.allow_tf32 for t in tasks}
    assert tf32 == {"conv2d": cudnn, "avg_pool2d": False, "dense": cublas}
    for t in tasks:  # the task records it in its workload key
        assert t.workload_key.startswith("tf32") == t.task.allow_tf32


def test_compiled_fp16_model_matches_eager_on_the_interpreter(tmp_path):
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(12, 8), nn.SiLU(), nn.Linear(8, 4)).eval().half()
    x = torch.randn(2, 12).half()
    log = str(tmp_path / "half.json")
    tasks = at.extract_tasks(model, x)
    assert [t.name for t in tasks] == ["dense+silu", "dense"]
    tune_one(tasks[0].task, log)
    compiled = at.compile(model, x, log=log, use_interpreter=True)
    assert compiled.autosched_replaced == 1
    with torch.no_grad():
        got = compiled(x)
        assert got.dtype == torch.float16
        torch.testing.assert_close(got, model(x), rtol=1e-2, atol=1e-2)


class AutocastInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.relu(self.fc1(x))
        return self.fc2(y.float())


def test_autocast_regions_give_tasks_in_the_autocast_dtype():
    torch.manual_seed(8)
    x = torch.randn(2, 8)
    ex = extract(AutocastInside().eval(), (x,))
    assert [(t.name, t.groups[0].anchor.dtype) for t in ex.tasks] == [
        ("dense+relu+cast", "bfloat16"),  # its weights cast once, at compile time
        ("dense", "float32"),
    ]
    assert all(o.is_constant for o in ex.groups[0].anchor.operands[1:])
    check_groups(ex, (x,), rtol=3e-2, atol=3e-2)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU()).eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # around the call
        (task,) = at.extract_tasks(model, x)
    assert (task.name, task.task.compute_dag.outputs[0].dtype) == ("dense+gelu", "bfloat16")


class Norms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rms = nn.RMSNorm(8, eps=1e-6)
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        return torch.softmax(self.ln(x) * 2.0, dim=-1), self.rms(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_normalisations_are_tasks_of_their_own(dtype):
    torch.manual_seed(9)
    model = Norms().eval().to(dtype)
    with torch.no_grad():
        model.rms.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 8).to(dtype)
    ex = extract(model, (x,))
    assert [t.name for t in ex.tasks] == ["layer_norm+mul", "softmax", "rms_norm"]
    if dtype == torch.float16:  # read through a float32 upcast, as PyTorch computes them
        assert all(any(op.name == "T_upcast" for op in t.task.compute_dag.ops) for t in ex.tasks)
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    check_groups(ex, (x,), rtol=tol, atol=tol)
