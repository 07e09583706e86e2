"""The compiled model: each tuned fused group replaced by a call of its kernel, the rest PyTorch.

`compile_model` extracts the tasks, looks up the best record of each in the log, builds its
kernel once, and rewrites the exported graph: a group's nodes become one `TunedCall` module
whose arguments are the group's runtime inputs (in the DAG's dtypes); its constants (weights,
folded batch-norm scales) are bound to it once, as buffers. A task without a record keeps its
original PyTorch ops. Kernels run on torch CUDA tensors on PyTorch's current stream (no host
copies, no synchronisation; `codegen.stream_launch`) when a GPU is there; with
`use_interpreter=True` they run on the CPU interpreter instead (tests of the wiring); with
neither, every group stays in PyTorch.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import torch
from torch import fx, nn

from autosched.codegen.build import BuiltKernel, build
from autosched.codegen.stream_launch import StreamKernel, driver_available
from autosched.errors import ModelError, RecordError
from autosched.frontend.extract import FusedGroup, extract, operand_value
from autosched.frontend.graph import TE_DTYPES, TORCH_DTYPES
from autosched.frontend.specs import Operand
from autosched.frontend.trace import freeze_dynamo_graph
from autosched.records import best_records
from autosched.te.dtype import from_storage, to_storage


def _gpu_available() -> bool:
    return torch.cuda.is_available() and driver_available()


def _device_arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


class TunedCall(nn.Module):
    """One fused group run by its tuned kernel: runtime inputs in, the group's output out."""

    def __init__(self, group: FusedGroup, kernel: BuiltKernel, use_interpreter: bool) -> None:
        super().__init__()
        self.kernel = kernel
        self.use_interpreter = use_interpreter
        value = group.output.meta["val"]
        self.out_shape = tuple(value.shape)
        self.out_dtype = value.dtype
        # the strides PyTorch's op gave its output: the graph's later views may rely on them
        # (scaled_dot_product_attention's output is laid out batch, sequence, head)
        self.out_strides = None if value.is_contiguous() else tuple(value.stride())
        self.dag_out_shape = tuple(kernel.outputs[0].shape)
        names = [t.name for t in group.dag.tensors[: len(group.operands)]]
        # slots[name]: ("const", buffer name, operand) or ("input", runtime index, operand)
        self.slots: dict[str, tuple[str, Any, Operand]] = {}
        runtime = 0
        for name, o in zip(names, group.operands, strict=True):
            if o.is_constant:
                value = operand_value(o, o.value).to(TORCH_DTYPES[o.dtype]).clone()
                self.register_buffer(f"c_{name}", value)
                self.slots[name] = ("const", f"c_{name}", o)
            else:
                self.slots[name] = ("input", runtime, o)
                runtime += 1
        self.order = [a.name for a in kernel.inputs]
        # every kernel argument in order: an input (by its index in `order`), the output, a
        # global temporary of a multi-kernel program (allocated per call), or a workspace
        # (a counter the kernels leave zeroed: allocated zeroed once per device, `workspace`)
        output = kernel.outputs[0].name
        self.arg_kinds: list[tuple[str, Any]] = [
            ("input", self.order.index(a.name))
            if a.name in self.order
            else ("output", None)
            if a.name == output
            else ("workspace" if a.zeroed else "temp", (tuple(a.shape), a.dtype))
            for a in kernel.args
        ]
        self.workspaces: dict[tuple[str, int], torch.Tensor] = {}
        self.launcher = None if use_interpreter else StreamKernel(kernel, _device_arch())
        if len(kernel.outputs) != 1 or set(self.order) != set(self.slots):
            raise ValueError(f"kernel arguments {self.order} do not match the group's {names}")

    def _args(self, inputs: tuple) -> list[torch.Tensor]:
        args = []
        for name in self.order:
            kind, ref, o = self.slots[name]
            if kind == "const":
                args.append(getattr(self, ref))
            else:
                args.append(operand_value(o, inputs[ref]).to(TORCH_DTYPES[o.dtype]))
        return args

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        args = self._args(inputs)
        if self.use_interpreter:
            arrays = [tensor_to_storage(a) for a in args]
            (out,) = self.kernel.run_cpu(*arrays)
            result = storage_to_tensor(out, self.kernel.outputs[0].dtype).to(inputs[0].device)
        else:
            device = args[0].device
            result = torch.empty(self.dag_out_shape, device=device, dtype=self.out_dtype)
            tensors = [
                args[ref]
                if kind == "input"
                else result
                if kind == "output"
                else self.workspace(device, n, ref)
                if kind == "workspace"
                else torch.empty(ref[0], device=device, dtype=getattr(torch, ref[1]))
                for n, (kind, ref) in enumerate(self.arg_kinds)
            ]
            stream = torch.cuda.current_stream(device).cuda_stream
            launcher = self.launcher
            if launcher is None:  # built for the interpreter
                raise RuntimeError("this TunedCall was built to run on the CPU interpreter")
            launcher.launch([t.data_ptr() for t in tensors], stream)
        return self._laid_out(result.reshape(self.out_shape))

    def workspace(self, device: torch.device, n: int, spec: tuple) -> torch.Tensor:
        """Argument n's workspace on `device`: zeros when first allocated, and zeros after
        every launch (the kernels reset it), so it is allocated once, not per call."""
        key = (str(device), n)
        if key not in self.workspaces:
            shape, dtype = spec
            self.workspaces[key] = torch.zeros(shape, device=device, dtype=getattr(torch, dtype))
        return self.workspaces[key]

    def _laid_out(self, out: torch.Tensor) -> torch.Tensor:
        """`out` (contiguous) in the memory layout of the replaced op's output."""
        if self.out_strides is None:
            return out
        strided = torch.empty_strided(
            self.out_shape, self.out_strides, dtype=out.dtype, device=out.device
        )
        return strided.copy_(out)


def tensor_to_storage(value: torch.Tensor) -> np.ndarray:
    """A torch tensor as the numpy array the interpreter takes (bfloat16 as bit patterns)."""
    te_dtype = TE_DTYPES[value.dtype]
    host = value.detach().cpu()
    if te_dtype == "bfloat16":
        return to_storage(host.float().numpy(), te_dtype)
    return np.ascontiguousarray(host.numpy())


def storage_to_tensor(array: np.ndarray, te_dtype: str) -> torch.Tensor:
    values = from_storage(np.ascontiguousarray(array), te_dtype)
    return torch.from_numpy(np.ascontiguousarray(values)).to(TORCH_DTYPES[te_dtype])


class UntunedModelWarning(UserWarning):
    """A compiled model runs wholly in PyTorch: no GPU, or no task of it has a record."""


def _best_kernels(tasks, log: str | None) -> dict[int, BuiltKernel]:
    """The kernel of each group (by `id`) whose task has a best record in `log`."""
    kernels: dict[int, BuiltKernel] = {}
    if not log:
        return kernels
    best_of = best_records(log)
    for t in tasks:
        best = best_of.get(t.workload_key)
        if best is not None:
            dag = t.task.compute_dag
            kernel = build(dag, dag.replay_steps(best[0].steps))
            kernels.update((id(g), kernel) for g in t.groups)
    return kernels


def _replace(
    gm: fx.GraphModule,
    group: FusedGroup,
    module: nn.Module,
    name: str,
    replaced: dict[fx.Node, fx.Node],
) -> None:
    """Swap the group's nodes for one call of `module` on its runtime inputs. `replaced` maps
    the output node of every group swapped before to its call (a group may read another's
    output), and gains this group's."""
    gm.add_submodule(name, module)
    nodes = (o.node for o in group.operands if not o.is_constant)
    inputs = tuple(replaced.get(n, n) for n in nodes)
    with gm.graph.inserting_after(group.output):
        call = gm.graph.call_module(name, inputs)
    call.meta = dict(group.output.meta)
    group.output.replace_all_uses_with(call)
    replaced[group.output] = call
    for node in reversed(group.nodes):
        gm.graph.erase_node(node)


def compile_model(
    model: Any,
    example_inputs: tuple,
    log: str | None = None,
    use_interpreter: bool = False,
) -> fx.GraphModule:
    """The model with every tuned group running its kernel (see the module docstring)."""
    check_log(log)
    ex = extract(model, tuple(example_inputs))
    gm = ex.gm
    if use_interpreter or _gpu_available():
        kernels = _best_kernels(ex.tasks, log)
        if ex.tasks and not kernels:
            _warn(
                f"none of the model's {len(ex.tasks)} tasks has a record in "
                f"{log or 'a log (none given)'}: the model runs in PyTorch"
            )
    else:
        kernels = {}
        if ex.tasks:
            _warn(
                "no CUDA GPU is usable here: the model runs in PyTorch (use_interpreter=True "
                "runs the tuned kernels on the CPU interpreter)"
            )
    calls: dict[fx.Node, fx.Node] = {}
    for i, group in enumerate(ex.groups):
        kernel = kernels.get(id(group))
        if kernel is not None:
            tuned = TunedCall(group, kernel, use_interpreter)
            _replace(gm, group, tuned, f"autosched_{i}", calls)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    # plain attributes for the caller (nn.Module's typing admits only tensors and modules)
    gm.autosched_tasks = ex.tasks  # type: ignore[assignment]
    gm.autosched_replaced = len(calls)  # type: ignore[assignment]
    return gm


def check_log(log: str | None) -> None:
    """RecordError (one line) when a log is named but is not there: compiling would otherwise
    run the whole model in PyTorch without a word."""
    if log is not None and not os.path.isfile(log):
        missing = "is a directory" if os.path.isdir(log) else "does not exist"
        raise RecordError(
            f"record log {log!r} {missing}: give the log the model's tasks were tuned into "
            "(autosched tune-model, or autosched.tune_tasks)"
        )


def _warn(message: str) -> None:
    warnings.warn(message, UntunedModelWarning, stacklevel=4)


class DynamoCall:
    """What the backend hands dynamo: the compiled graph called with the user inputs among
    dynamo's (the parameters and buffers it also passes are bound in `compiled`)."""

    def __init__(self, compiled: fx.GraphModule, user_inputs: list[int]) -> None:
        self.compiled = compiled
        self.user_inputs = user_inputs

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*(args[i] for i in self.user_inputs))


def dynamo_backend(gm: fx.GraphModule, example_inputs: list, options: dict | None = None):
    """The `torch.compile` backend "autosched": `options` are `compile_model`'s keywords
    (`log`, `use_interpreter`). Dynamo's graph takes the model's parameters and buffers as
    inputs; they are bound as constants (`trace.freeze_dynamo_graph`) and the graph exported,
    so the tasks are those `extract_tasks` gives. A graph that cannot be compiled runs as it
    is, with a warning naming the reason."""
    frozen = freeze_dynamo_graph(gm, example_inputs)
    user = frozen.user_inputs
    try:
        compiled = compile_model(frozen, tuple(example_inputs[i] for i in user), **(options or {}))
    except ModelError as err:
        _warn(f"this graph runs in PyTorch: {err}")
        return gm.forward
    return DynamoCall(compiled, user)
