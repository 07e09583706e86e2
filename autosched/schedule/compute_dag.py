"""The compute DAG: the ops reachable from a workload's outputs, with their analysis.

Ops are kept in the order TVM prints them: a depth-first post-order from the outputs that visits
each op's inputs in the order its body reads them. Producer / consumer questions are asked of a
State's stages (schedule.dataflow), which add cache and rfactor stages to these ops.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from autosched.errors import TEError
from autosched.schedule.loop_state import State
from autosched.schedule.op_info import OpInfo, analyse_op
from autosched.schedule.steps import Step, print_python_schedule, replay
from autosched.task.workload_registry import workload_tensors
from autosched.te.bounds import check_reads
from autosched.te.expr import Reduce
from autosched.te.serialize import dump_tensors, load_tensors
from autosched.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor, topological_ops


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
        outputs: list[Operation] = [op for op in given_outputs if id(op) not in consumed]
        outputs = outputs or list(given_outputs[-1:])
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
        if not isinstance(op, ComputeOp):
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
    def get_init_state(self) -> State:
        """The state before any transform step: one stage per op, loops over its axes."""
        return State.from_dag(self)

    def print_python_schedule(self, state: State) -> str:
        """The equivalent TVM-style Python schedule of `state` (a State of this DAG)."""
        return print_python_schedule(state)

    def replay_steps(self, steps: Iterable[Step | Sequence]) -> State:
        """Rebuild a State from steps (Step objects or their records)."""
        return replay(self, steps)

    # ---- TVM auto_scheduler's names --------------------------------------------------------
    def print_python_code_from_state(self, state: State) -> str:
        """TVM's name of `print_python_schedule`."""
        return self.print_python_schedule(state)

    def apply_steps_from_state(self, state: State) -> tuple[State, list[Tensor]]:
        """TVM's `sch, args = dag.apply_steps_from_state(state)`: `state`'s steps replayed on
        this DAG (a state loaded from a log may belong to another copy of it), and the DAG's
        tensors in argument order, so that `autosched.build(sch, args)` builds it."""
        return self.replay_steps(state.steps), list(self.tensors)


__all__ = ["ComputeDAG", "OpInfo", "analyse_op"]
