"""Replaying steps on a DAG's initial state, and printing a state as a Python schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autosched.errors import ScheduleError
from autosched.schedule.steps.base import Step, axes_line

if TYPE_CHECKING:
    from autosched.schedule.compute_dag import ComputeDAG
    from autosched.schedule.loop_state import State


def replay(dag: ComputeDAG, steps) -> State:
    """Apply `steps` (Step objects or records) to the DAG's initial state."""
    state = dag.get_init_state()
    for step in steps:
        if not isinstance(step, Step):
            step = Step.from_record(step)
        try:
            state = state.apply(step)
        except IndexError as e:  # a record naming a stage this DAG's state does not have
            raise ScheduleError(
                f"step {step.to_record()} does not fit the state: its stages are "
                f"{[s.name for s in state.stages]} ({e})"
            ) from e
    return state


def print_python_schedule(state: State) -> str:
    """The equivalent TVM-style Python schedule of a state, one line per statement."""
    init = state.dag.get_init_state()
    lines = [axes_line(s, with_reduce=True) for s in init.stages if not s.is_placeholder]
    cur = init
    for step in state.steps:
        nxt = cur.apply(step)
        lines.extend(step.to_python(cur, nxt))
        cur = nxt
    return "\n".join(lines) + "\n"
