"""Trace a model, partition its graph into fused groups, and group those into weighted tasks.

`trace` runs torch.fx's symbolic trace (a GraphModule is used as it is) and ShapeProp on the
example inputs. `partition` walks the graph in order: a node the anchor table accepts starts a
group, which then absorbs its single consumer for as long as the epilogue table accepts it
(bias add, folded batch norm, activation, residual add). Everything else stays in PyTorch,
casts included. Groups whose DAGs print the same are one task, weighted by their count.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx
from torch.fx.passes.shape_prop import ShapeProp

from autosched.errors import ModelError
from autosched.frontend.dag_builder import build_dag
from autosched.frontend.epilogues import EPILOGUES
from autosched.frontend.ops import ANCHORS, shape_of, target_key
from autosched.frontend.specs import Anchor, Epilogue, Operand
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.search_task import SearchTask

_log = logging.getLogger(__name__)


@dataclass
class FusedGroup:
    """One fused subgraph: its anchor, epilogues, fx nodes (anchor first, output last) and DAG."""

    anchor: Anchor
    epilogues: list[Epilogue]
    nodes: list[fx.Node]
    dag: ComputeDAG

    @property
    def output(self) -> fx.Node:
        return self.nodes[-1]

    @property
    def operands(self) -> list[Operand]:
        """The DAG's inputs in argument order."""
        return self.anchor.operands + [o for e in self.epilogues for o in e.operands]

    @property
    def name(self) -> str:
        return "+".join([self.anchor.kind, *(e.label for e in self.epilogues)])

    def dag_inputs(self, values: dict[fx.Node, torch.Tensor]) -> list[torch.Tensor]:
        """The DAG's input tensors, given the torch values of the graph's nodes."""
        return [
            (o.value if o.is_constant else values[o.node]).reshape(o.shape).contiguous()
            for o in self.operands
        ]


@dataclass
class ExtractedTask:
    """A task to tune, how often its subgraph occurs in the model, and those subgraphs."""

    task: SearchTask
    weight: int
    groups: list[FusedGroup] = field(repr=False)

    @property
    def workload_key(self) -> str:
        return self.task.workload_key

    @property
    def name(self) -> str:
        return self.groups[0].name

    @property
    def flop(self) -> float:
        """Floating-point operations of one call."""
        return self.task.compute_dag.flop_count


@dataclass
class Extraction:
    """A traced model with shapes, its fused groups (graph order) and tasks (first seen first)."""

    gm: fx.GraphModule
    groups: list[FusedGroup]
    tasks: list[ExtractedTask]


def trace(model: Any, example_inputs: tuple) -> fx.GraphModule:
    """The model's fx graph with every node's shape recorded (`meta["tensor_meta"]`); ModelError
    (one line) when the model is not one, cannot be traced, or does not run on its inputs."""
    check_model(model, example_inputs)
    if isinstance(model, fx.GraphModule):
        gm = model
    else:
        try:
            gm = fx.symbolic_trace(model)
        except Exception as exc:  # data-dependent control flow, untraceable calls, ...
            raise ModelError(f"torch.fx cannot trace the model: {_one_line(exc)}") from None
    stderr = io.StringIO()
    try:
        # ShapeProp prints the failing node's traceback itself: keep it off the user's screen
        with torch.no_grad(), contextlib.redirect_stderr(stderr):
            ShapeProp(gm).propagate(*example_inputs)
    except Exception as exc:
        cause = exc.__cause__ or exc  # ShapeProp wraps the model's own error
        raise ModelError(
            f"the model does not run on its example inputs ({_describe(example_inputs)}): "
            f"{_one_line(cause)}"
        ) from None
    return gm


def check_model(model: Any, example_inputs: tuple) -> None:
    """ModelError unless `model` is an nn.Module (or a function torch.fx can trace) and every
    example input is a tensor."""
    if not isinstance(model, torch.nn.Module) and not inspect.isfunction(model):
        raise ModelError(
            f"the model must be a torch.nn.Module, got {type(model).__name__} {model!r:.60}"
        )
    for i, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            raise ModelError(
                f"example input {i} must be a torch.Tensor, got {type(value).__name__} "
                f"{value!r:.60}"
            )


def _describe(example_inputs: tuple) -> str:
    return ", ".join(
        f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in example_inputs
    )


def _one_line(exc: BaseException) -> str:
    """`Type: first line of the message`."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _epilogue(
    node: fx.Node, gm: fx.GraphModule, dag_shape: tuple, before: Callable[[fx.Node], bool]
) -> tuple[fx.Node | None, Epilogue | None]:
    """The single consumer of `node` as an epilogue, or (None, None). Its runtime operands must
    be computed before the group's anchor (`before`): of two branches meeting in an add (a
    residual block), the one computed last absorbs it, as in TVM, and the other stays whole."""
    if len(node.users) != 1:
        return None, None
    (user,) = node.users
    match = EPILOGUES.get(target_key(user, gm))
    if match is None or shape_of(user) != shape_of(node):
        return None, None
    epi = _guarded(match, user, gm, node, dag_shape)
    if epi is None or not all(o.is_constant or before(o.node) for o in epi.operands):
        return None, None
    return user, epi


def _guarded(match: Callable, *args: Any) -> Any:
    """A matcher's answer, or None when it raises: an op our tables misread stays in PyTorch
    instead of failing the extraction."""
    try:
        return match(*args)
    except Exception as err:  # noqa: BLE001 (any failure means: not ours)
        _log.debug("left in PyTorch: %s(%s): %s", getattr(match, "__name__", match), args[0], err)
        return None


def _group(node: fx.Node, gm: fx.GraphModule, order: dict, taken: set) -> FusedGroup | None:
    """The group anchored at `node` with every epilogue it absorbs, or None (not an anchor, or
    its DAG does not build)."""
    match = ANCHORS.get(target_key(node, gm))
    anchor = _guarded(match, node, gm) if match is not None else None
    if anchor is None:
        return None
    nodes, epilogues, cur = [node], [], node
    while True:
        user, epi = _epilogue(cur, gm, anchor.out_shape, lambda n: order[n] < order[node])
        if user is None or epi is None or user in taken:
            break
        nodes.append(user)
        epilogues.append(epi)
        cur = user
    dag = _guarded(build_dag, anchor, epilogues)
    return None if dag is None else FusedGroup(anchor, epilogues, nodes, dag)


def partition(gm: fx.GraphModule) -> list[FusedGroup]:
    """The fused groups of a traced graph, in graph order."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    groups: list[FusedGroup] = []
    taken: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node in taken:
            continue
        group = _group(node, gm, order, taken)
        if group is not None:
            taken.update(group.nodes)
            groups.append(group)
    return groups


def extract(model: Any, example_inputs: tuple) -> Extraction:
    """Trace, partition and group into tasks (one per distinct DAG, weighted by its count)."""
    gm = trace(model, example_inputs)
    groups = partition(gm)
    by_key: dict[str, ExtractedTask] = {}
    for g in groups:
        key = g.dag.workload_key
        if key not in by_key:
            by_key[key] = ExtractedTask(SearchTask(dag=g.dag, desc=g.name), 0, [])
        by_key[key].weight += 1
        by_key[key].groups.append(g)
    return Extraction(gm, groups, list(by_key.values()))


def _shape_text(shape: tuple) -> str:
    return "x".join(str(s) for s in shape)


def task_table(tasks: list[ExtractedTask]) -> str:
    """A table of tasks: index, name, shapes (inputs -> output), weight, GFLOP per call."""
    rows = [("#", "task", "shapes", "weight", "GFLOP")]
    for i, t in enumerate(tasks):
        g = t.groups[0]
        shapes = ", ".join(_shape_text(o.shape) for o in g.operands)
        shapes += " -> " + _shape_text(g.anchor.out_shape)
        rows.append((str(i), t.name, shapes, str(t.weight), f"{t.flop * 1e-9:.4f}"))
    widths = [max(len(r[c]) for r in rows) for c in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    total = sum(t.weight * t.flop for t in tasks) * 1e-9
    lines.append(
        f"{len(tasks)} task(s), {sum(t.weight for t in tasks)} subgraph(s), {total:.4f}"
        " GFLOP per forward"
    )
    return "\n".join(lines)
