"""The compute DAG: the ops reachable from a workload's outputs, with their analysis.

Ops are kept in the order TVM prints them: a depth-first post-order from the outputs that visits
each op's inputs in the order its body reads them. Producer / consumer questions are asked of a
State's stages (schedule.dataflow), which add cache and rfactor stages to these ops.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from autosched.errors import TEError
from autosched.schedule.loop_state import State
from autosched.schedule.steps import print_python_schedule, replay
from autosched.task.workload_registry import workload_tensors
from autosched.te.bounds import check_reads
from autosched.te.dtype import is_float
from autosched.te.expr import BinOp, Call, Expr, Load, Reduce
from autosched.te.serialize import dump_tensors, load_tensors
from autosched.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor, topological_ops
from autosched.te.visitor import free_vars, walk

# Math calls that make an op too costly to recompute by inlining (Ansor's "expensive" ops).
EXPENSIVE_CALLS = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "pow"})


@dataclass(frozen=True)
class OpInfo:
    """What the search needs to know about one op."""

    op: Operation
    is_placeholder: bool
    is_output: bool
    has_reduction: bool
    is_injective: bool
    is_strictly_inlineable: bool
    has_data_reuse: bool
    needs_multi_level_tiling: bool
    flop: float


def _float_ops(e: Expr) -> int:
    """Floating-point operations one evaluation of `e` performs (index arithmetic excluded)."""
    n = 0
    for node in walk(e):
        if isinstance(node, BinOp) and is_float(node.a.dtype):
            n += 1
        elif isinstance(node, Call) and is_float(node.dtype):
            n += 1
    return n


def _op_flop(op: Operation) -> float:
    if not isinstance(op, ComputeOp):
        return 0.0
    spatial = 1
    for a in op.axis:
        spatial *= a.extent
    body = op.body
    if isinstance(body, Reduce):
        red = 1
        for a in body.axes:
            red *= a.extent
        per_iter = _float_ops(body.source) + (1 if is_float(body.dtype) else 0)
        return float(spatial * red * per_iter)
    return float(spatial * _float_ops(body))


def analyse_op(op: Operation, is_output: bool) -> OpInfo:
    """What the search needs to know about `op` (the DAG holds it for its own ops; a stage
    that replaces an op, such as rfactor's, asks here)."""
    if not isinstance(op, ComputeOp):
        return OpInfo(op, True, is_output, False, False, False, False, False, 0.0)
    reads: list[tuple[Expr, ...]] = [
        node.indices
        for node in walk(op.body)
        if isinstance(node, Load) and isinstance(node.buffer, Tensor)
    ]
    has_reduction = isinstance(op.body, Reduce)
    expensive = any(isinstance(n, Call) and n.func in EXPENSIVE_CALLS for n in walk(op.body))
    # Data reuse / multi-level tiling (Ansor): count, over all reads, the spatial axes that a
    # read's indices do not mention; every such axis re-reads the same input elements.
    n_missing = 0
    for indices in reads:
        used = {id(v) for i in indices for v in free_vars(i)}
        n_missing += sum(1 for a in op.axis if id(a) not in used)
    has_reuse = has_reduction and n_missing > 0
    return OpInfo(
        op=op,
        is_placeholder=False,
        is_output=is_output,
        has_reduction=has_reduction,
        is_injective=not has_reduction,
        is_strictly_inlineable=not has_reduction and not expensive and not is_output,
        has_data_reuse=has_reuse,
        needs_multi_level_tiling=has_reduction and n_missing >= 2,
        flop=_op_flop(op),
    )


def _tensor_list(tensors: Iterable[Tensor]) -> list[Tensor]:
    """`tensors` as a list, or a TEError naming what was passed instead of a list of tensors."""
    if isinstance(tensors, Tensor):
        raise TEError(
            f"ComputeDAG takes a list of tensors (inputs and outputs), got the single tensor "
            f"{tensors.name!r}; pass a list such as [inputs..., {tensors.name}]"
        )
    try:
        out = list(tensors)
    except TypeError:
        raise TEError(
            f"ComputeDAG takes a list of tensors (inputs and outputs), got "
            f"{type(tensors).__name__} {tensors!r:.80}"
        ) from None
    if not out:
        raise TEError("ComputeDAG needs a non-empty list of te tensors (inputs and outputs)")
    for i, t in enumerate(out):
        if not isinstance(t, Tensor):
            raise TEError(
                f"ComputeDAG: item {i} of the tensor list is {type(t).__name__} {t!r:.80}, "
                "not a te.Tensor"
            )
    return out


class ComputeDAG:
    """A workload's ops. `tensors` are the kernel's arguments in order (inputs and outputs)."""

    def __init__(self, tensors: Iterable[Tensor]) -> None:
        tensors = _tensor_list(tensors)
        given_outputs = [t.op for t in tensors if isinstance(t.op, ComputeOp)]
        if not given_outputs:
            raise TEError("ComputeDAG: none of the given tensors is computed; pass the outputs too")
        consumed = {id(i.op) for op in given_outputs for i in op.input_tensors}
        outputs = [op for op in given_outputs if id(op) not in consumed] or given_outputs[-1:]
        self.ops: list[Operation] = topological_ops(outputs)
        output_ids = {id(op) for op in outputs}
        # Kernel arguments: the given tensors, plus any placeholder reached but not given.
        args = [t for t in tensors if isinstance(t.op, PlaceholderOp) or id(t.op) in output_ids]
        arg_ids = {id(t.op) for t in args}
        for op in self.ops:
            if isinstance(op, PlaceholderOp) and id(op) not in arg_ids:
                args.append(op.output(0))
                arg_ids.add(id(op))
        for op in self.ops:
            if isinstance(op, ComputeOp):
                check_reads(op)
        self.tensors: list[Tensor] = args
        self.outputs: list[Operation] = outputs
        self.info: dict[int, OpInfo] = {
            id(op): analyse_op(op, id(op) in output_ids) for op in self.ops
        }
        self.flop_count: float = sum(i.flop for i in self.info.values())
        self.workload_key: str = (
            "dag-" + hashlib.sha256(self.canonical_text().encode()).hexdigest()[:16]
        )
        self._serialized: dict | None = None

    @classmethod
    def from_workload_key(cls, key: str) -> ComputeDAG:
        """The DAG of a workload key, keeping that key as its `workload_key`: the registered
        function called with the key's arguments, or the serialised DAG a loaded record log
        carried for that key."""
        dag = cls(workload_tensors(key))
        dag.workload_key = key
        return dag

    def serialized(self) -> dict:
        """The DAG's tensors as JSON-able data (te.serialize), what record logs and the search's
        worker processes rebuild it from without the workload's module."""
        if self._serialized is None:
            self._serialized = dump_tensors(self.tensors)
        return self._serialized

    @classmethod
    def from_serialized(cls, data: dict, workload_key: str) -> ComputeDAG:
        """Rebuild a DAG from `serialized()` data under its workload key."""
        dag = cls(load_tensors(data))
        dag.workload_key = workload_key
        dag._serialized = data
        return dag

    # ---- queries -----------------------------------------------------------------------------
    def op_info(self, op: Operation) -> OpInfo:
        """The analysis of one of the DAG's ops."""
        return self.info[id(op)]

    def op_by_name(self, name: str) -> Operation:
        """The DAG's op called `name`."""
        for op in self.ops:
            if op.name == name:
                return op
        raise TEError(f"the DAG has no op named {name!r}; it has {[o.name for o in self.ops]}")

    # ---- text --------------------------------------------------------------------------------
    def op_line(self, op: Operation) -> str:
        """One line in the seed's form, e.g. `C(i, j) += (A[i, k]*B[k, j])`."""
        if isinstance(op, PlaceholderOp):
            return f"{op.name} = PLACEHOLDER {list(op.shape)}"
        head = f"{op.name}({', '.join(a.name for a in op.axis)})"
        body = op.body
        if isinstance(body, Reduce):
            sym = {"sum": "+=", "max": "max=", "min": "min="}.get(
                body.reducer.name, f"{body.reducer.name}="
            )
            text = repr(body.source)
            if body.condition is not None:
                text += f" where {body.condition!r}"
            return f"{head} {sym} {text}"
        return f"{head} = {body!r}"

    def __str__(self) -> str:
        return "\n".join(self.op_line(op) for op in self.ops) + "\n"

    def canonical_text(self) -> str:
        lines = [self.op_line(op) + f" :{op.dtype}" for op in self.ops]
        lines.append("args: " + ", ".join(t.name for t in self.tensors))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ComputeDAG({', '.join(t.name for t in self.tensors)})"

    # ---- schedule-side entry points (filled in by loop_state / lowering) ---------------------
    def get_init_state(self):
        """The state before any transform step: one stage per op, loops over its axes."""
        return State.from_dag(self)

    def print_python_schedule(self, state) -> str:
        """The equivalent TVM-style Python schedule of `state` (a State of this DAG)."""
        return print_python_schedule(state)

    def replay_steps(self, steps):
        """Rebuild a State from steps (Step objects or their records)."""
        return replay(self, steps)

    # ---- TVM auto_scheduler's names --------------------------------------------------------
    def print_python_code_from_state(self, state) -> str:
        """TVM's name of `print_python_schedule`."""
        return self.print_python_schedule(state)

    def apply_steps_from_state(self, state) -> tuple[State, list[Tensor]]:
        """TVM's `sch, args = dag.apply_steps_from_state(state)`: `state`'s steps replayed on
        this DAG (a state loaded from a log may belong to another copy of it), and the DAG's
        tensors in argument order, so that `autosched.build(sch, args)` builds it."""
        return self.replay_steps(state.steps), list(self.tensors)


__all__ = ["ComputeDAG", "OpInfo"]
