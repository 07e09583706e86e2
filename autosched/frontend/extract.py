"""Export a model, partition its ATen graph into fused groups, and group those into tasks.

`trace` exports the model (`trace.export_graph`: `torch.export`, shapes and dtypes on every
node). `partition` walks the graph in order: a node the anchor table accepts starts a group,
which then absorbs its single consumer for as long as the epilogue table accepts it (bias add,
folded batch norm, activation, residual add, cast, inference dropout). Everything else stays in
PyTorch (`coverage` says what, and its share of the FLOPs). Groups whose DAGs print the same
are one task, weighted by their count; a float32 task allows TF32 where PyTorch would
(`precision`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from autosched.frontend import attention as _attention  # noqa: F401  (registers the SDPA anchor)
from autosched.frontend.coverage import Coverage, coverage
from autosched.frontend.dag_builder import build_dag
from autosched.frontend.epilogues import EPILOGUES
from autosched.frontend.graph import TORCH_DTYPES, dtype_of, shape_of, target_key
from autosched.frontend.ops import ANCHORS
from autosched.frontend.patterns import apply_rewrites
from autosched.frontend.precision import allows_tf32
from autosched.frontend.specs import Anchor, Epilogue, Operand
from autosched.frontend.trace import check_model, export_graph
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.search_task import SearchTask

_log = logging.getLogger(__name__)

__all__ = ["check_model", "extract", "extract_graph", "partition", "task_table", "trace"]


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
        labels = (e.label for e in self.epilogues if not e.silent)
        return "+".join([self.anchor.kind, *labels])

    def dag_inputs(self, values: dict[fx.Node, torch.Tensor]) -> list[torch.Tensor]:
        """The DAG's input tensors, given the torch values of the graph's nodes."""
        return [
            operand_value(o, o.value if o.is_constant else values[o.node]) for o in self.operands
        ]


def operand_value(o: Operand, value: torch.Tensor) -> torch.Tensor:
    """A torch value laid out as its operand's DAG placeholder (broadcast, then reshaped; a
    boolean mask made additive; a permuted buffer read through its layout as it lies)."""
    if o.additive and value.dtype == torch.bool:
        value = torch.zeros(
            value.shape, dtype=TORCH_DTYPES[o.dtype], device=value.device
        ).masked_fill(~value, float("-inf"))
    if o.layout is not None:
        return value.permute(o.layout.order).contiguous()  # no copy: the buffer as it lies
    if o.expand is not None:
        value = value.expand(o.expand)
    return value.reshape(o.shape).contiguous()


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


class ModelTasks(list):
    """A model's tasks (a list of `ExtractedTask`) and what of the model stays in PyTorch."""

    def __init__(self, tasks: list[ExtractedTask], coverage: Coverage) -> None:
        super().__init__(tasks)
        self.coverage = coverage


@dataclass
class Extraction:
    """An exported model, its fused groups (graph order), tasks (first seen first) and what
    stays in PyTorch."""

    gm: fx.GraphModule
    groups: list[FusedGroup]
    tasks: list[ExtractedTask]
    coverage: Coverage = field(default_factory=Coverage)


def trace(model: Any, example_inputs: tuple) -> fx.GraphModule:
    """The model's ATen graph, every node's shape and dtype in `meta["val"]`, hand-written
    formulas rewritten to their operator (`patterns`); ModelError (one line) when the model is
    not one, cannot be exported, or does not run on its inputs."""
    gm = export_graph(model, example_inputs)
    apply_rewrites(gm)
    return gm


def _epilogue(
    node: fx.Node, gm: fx.GraphModule, dag_shape: tuple, before: Callable[[fx.Node], bool]
) -> tuple[fx.Node | None, Epilogue | None]:
    """The single consumer of `node` as an epilogue, or (None, None). Its runtime operands must
    be computed before the group's anchor (`before`): of two branches meeting in an add (a
    residual block), the one computed last absorbs it, as in TVM, and the other stays whole."""
    if len(node.users) != 1:
        return None, None
    (user,) = node.users
    match = EPILOGUES.get(target_key(user))
    if match is None or shape_of(user) is None:
        return None, None
    epi = _guarded(match, user, gm, node, dag_shape)
    if epi is None or not all(o.is_constant or before(o.node) for o in epi.operands):
        return None, None
    if shape_of(user) != shape_of(node) and epi.kind != "reshape":
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
    match = ANCHORS.get(target_key(node))
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
    out_dtype = dtype_of(nodes[-1])
    if out_dtype is None or any(o.dtype != anchor.dtype for o in anchor.operands[:2]):
        return None  # mixed-precision products stay in PyTorch
    dag = _guarded(build_dag, anchor, epilogues, out_dtype)
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
    """Export, partition and group into tasks (one per distinct DAG, weighted by its count)."""
    return extract_graph(trace(model, example_inputs))


def extract_graph(gm: fx.GraphModule) -> Extraction:
    """Partition an exported graph and group its fused groups into tasks."""
    groups = partition(gm)
    by_key: dict[tuple[str, bool], ExtractedTask] = {}
    for g in groups:
        tf32 = allows_tf32(g.anchor.kind, g.anchor.dtype)
        key = (g.dag.workload_key, tf32)
        if key not in by_key:
            task = SearchTask(dag=g.dag, desc=g.name, allow_tf32=tf32)
            by_key[key] = ExtractedTask(task, 0, [])
        by_key[key].weight += 1
        by_key[key].groups.append(g)
    cov = coverage(gm, (n for g in groups for n in g.nodes))
    return Extraction(gm, groups, list(by_key.values()), cov)


def _shape_text(shape: tuple) -> str:
    return "x".join(str(s) for s in shape)


def task_table(tasks: list[ExtractedTask]) -> str:
    """A table of tasks: index, name, shapes (inputs -> output), dtype (`float32+tf32` where
    TF32 is allowed), weight, GFLOP per call; then what stays in PyTorch, when known."""
    rows = [("#", "task", "shapes", "dtype", "weight", "GFLOP")]
    for i, t in enumerate(tasks):
        g = t.groups[0]
        shapes = ", ".join(_shape_text(o.shape) for o in g.operands)
        shapes += " -> " + _shape_text(g.anchor.out_shape)
        dtype = g.anchor.dtype + ("+tf32" if t.task.allow_tf32 else "")
        rows.append((str(i), t.name, shapes, dtype, str(t.weight), f"{t.flop * 1e-9:.4f}"))
    widths = [max(len(r[c]) for r in rows) for c in range(6)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    total = sum(t.weight * t.flop for t in tasks) * 1e-9
    lines.append(
        f"{len(tasks)} task(s), {sum(t.weight for t in tasks)} subgraph(s), {total:.4f}"
        " GFLOP per forward"
    )
    cov = getattr(tasks, "coverage", None)
    if cov is not None:
        lines += cov.lines()
    return "\n".join(lines)
