"""The ATen graphs PyTorch itself produces, for a model and for a `torch.compile` graph.

`export_graph` runs `torch.export` (non-strict: the model's Python runs as it is, so Hugging
Face models and `nn.TransformerEncoderLayer` trace) and returns its unlifted module: parameters
and buffers are `get_attr` nodes (constants bound once at compile time), every call is an ATen
operator (`aten.conv2d`, `aten.linear`, `aten.scaled_dot_product_attention`, ...) and every node
carries its shape and dtype in `meta["val"]`. A model whose outputs export cannot flatten (a
Hugging Face cache object) is exported through a wrapper that returns its tensors only.

Autocast regions (`torch.autocast` inside the model, or around the call that extracts it) become
explicit casts (export's ATen decomposition with an empty table, which keeps every other
operator as it is), so their operators give tasks in the autocast dtype.

`freeze_dynamo_graph` turns the fx graph dynamo hands a backend (parameters and buffers as
graph inputs) into a module holding them as attributes, so that exporting it gives the same
graph, hence the same tasks, as exporting the model itself.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from typing import Any

import torch
from torch import fx, nn
from torch.utils import _pytree

from autosched.errors import ModelError

_log = logging.getLogger(__name__)


def export_graph(model: Any, example_inputs: tuple) -> fx.GraphModule:
    """The model's ATen graph with shapes (`meta["val"]`); ModelError (one line) when the model
    is not one, does not run on its inputs, or cannot be exported."""
    check_model(model, example_inputs)
    module = model if isinstance(model, nn.Module) else _FunctionModule(model)
    _check_runs(module, example_inputs)
    module = _under_ambient_autocast(module)
    try:
        return _export(module, example_inputs)
    except Exception as first:  # noqa: BLE001 (retried, then reported in one line)
        failure = first
    try:  # outputs export cannot flatten: keep the tensors only
        return _export(TensorOutputs(module), example_inputs)
    except Exception:  # noqa: BLE001
        raise _model_error(failure) from None


def _export(module: nn.Module, example_inputs: tuple) -> fx.GraphModule:
    # the tracer logs (and may print) the failing frame itself: keep it off the user's screen
    quiet = io.StringIO()
    with torch.no_grad(), contextlib.redirect_stderr(quiet), _silence_export_logs():
        program = torch.export.export(module, example_inputs, strict=False)
        if _has_autocast(program.graph_module):
            # autocast regions as explicit casts; other operators keep their ATen form (torch
            # warns about its own pytree internals while copying the program)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                program = program.run_decompositions({})
        return _without_checks(program.module())


def _has_autocast(gm: fx.GraphModule) -> bool:
    hop = getattr(torch.ops.higher_order, "wrap_with_autocast", None)
    return hop is not None and any(n.target is hop for n in gm.graph.nodes)


class _Autocast(nn.Module):
    """A model run under the autocast its caller had on (export does not see the caller's)."""

    def __init__(self, model: nn.Module, device: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.model, self.device, self.dtype = model, device, dtype

    def forward(self, *args: Any) -> Any:
        with torch.autocast(self.device, dtype=self.dtype):
            return self.model(*args)


def _under_ambient_autocast(module: nn.Module) -> nn.Module:
    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            return _Autocast(module, device, torch.get_autocast_dtype(device))
    return module


# nodes export adds to check a value's dtype or device: they compute nothing, and would count
# as a second user of the value they check (no fusion through it)
_METADATA_CHECKS = (torch.ops.aten._assert_tensor_metadata.default,)


def _without_checks(gm: fx.GraphModule) -> fx.GraphModule:
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in _METADATA_CHECKS and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


@contextlib.contextmanager
def _silence_export_logs():
    names = ("torch._dynamo", "torch.export", "torch._export", "torch._subclasses", "torch.fx")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _check_runs(module: nn.Module, example_inputs: tuple) -> None:
    """ModelError naming the model's own error when it does not run on its inputs: run once
    eagerly, so that a shape or dtype mismatch is told in PyTorch's words, not the tracer's."""
    try:
        with torch.no_grad():
            module(*example_inputs)
    except Exception as exc:  # noqa: BLE001 (the model's error, in one line)
        raise ModelError(
            f"the model does not run on its example inputs ({describe(example_inputs)}): "
            f"{_one_line(exc)}"
        ) from None


def _model_error(exc: BaseException) -> ModelError:
    """One line: the tracer's reason (the innermost cause)."""
    cause = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return ModelError(f"torch.export cannot trace the model: {_one_line(cause)}")


class TensorOutputs(nn.Module):
    """A model whose outputs are the tensors among its outputs, in pytree order."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any) -> tuple:
        leaves = _pytree.tree_leaves(self.model(*args))
        return tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))


class _FunctionModule(nn.Module):
    """A plain function as a module, for export."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def check_model(model: Any, example_inputs: tuple) -> None:
    """ModelError unless `model` is an nn.Module (or a function) and every example input is a
    tensor."""
    if not isinstance(model, nn.Module) and not inspect.isfunction(model):
        raise ModelError(
            f"the model must be a torch.nn.Module, got {type(model).__name__} {model!r:.60}"
        )
    for i, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            raise ModelError(
                f"example input {i} must be a torch.Tensor, got {type(value).__name__} "
                f"{value!r:.60}"
            )


def describe(example_inputs: tuple) -> str:
    """`[4, 16] float32, [4] int64`."""
    return ", ".join(
        f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in example_inputs
    )


def _one_line(exc: BaseException) -> str:
    """`Type: first line of the message`."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# ---- the graph dynamo hands a backend --------------------------------------------------------


def _is_weight(node: fx.Node, value: Any) -> bool:
    """Whether a dynamo graph input is one of the model's parameters or buffers."""
    from torch._dynamo.source import is_from_unspecialized_param_buffer_source

    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is not None and is_from_unspecialized_param_buffer_source(source):
        return True
    return isinstance(value, nn.Parameter)


class FrozenGraph(nn.Module):
    """A dynamo graph with its parameter and buffer inputs held as buffers: called with the
    remaining (user) inputs. `user_inputs` are their positions among the graph's inputs."""

    def __init__(self, gm: fx.GraphModule, example_inputs: list) -> None:
        super().__init__()
        self.gm = gm
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.slots: list[tuple[str, Any]] = []
        self.user_inputs: list[int] = []
        for i, (node, value) in enumerate(zip(placeholders, example_inputs, strict=True)):
            if isinstance(value, torch.Tensor) and _is_weight(node, value):
                name = f"w{i}"
                self.register_buffer(name, value.detach(), persistent=False)
                self.slots.append(("weight", name))
            else:
                self.slots.append(("input", len(self.user_inputs)))
                self.user_inputs.append(i)

    def forward(self, *inputs: Any) -> Any:
        args = [getattr(self, ref) if kind == "weight" else inputs[ref] for kind, ref in self.slots]
        return self.gm(*args)


def freeze_dynamo_graph(gm: fx.GraphModule, example_inputs: list) -> FrozenGraph:
    """See `FrozenGraph`: export it with `[example_inputs[i] for i in frozen.user_inputs]`."""
    return FrozenGraph(gm, list(example_inputs))
