"""Replaying steps on a DAG's initial state, and printing a state as a Python schedule.

Both take the DAG and the state by what they use of them (protocols): compute_dag and loop_state
import this package.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from autosched.errors import ScheduleError
from autosched.schedule.steps.base import OpAnalyses, Step, StepTarget, axes_line

_State = TypeVar("_State", bound="Replayable")
_State_co = TypeVar("_State_co", bound="Replayable", covariant=True)


class Replayable(StepTarget, Protocol):
    """A state that records and applies steps (`loop_state.State`)."""

    def apply(self: _State, step: Step) -> _State: ...


class HasInitState(Protocol[_State_co]):
    """A compute DAG (`compute_dag.ComputeDAG`): where every replay starts."""

    def get_init_state(self) -> _State_co: ...


class PrintableState(Replayable, Protocol):
    """A state whose DAG gives the initial state its steps are printed from."""

    @property
    def dag(self) -> PrintableDAG: ...


class PrintableDAG(HasInitState[Replayable], OpAnalyses, Protocol):
    """The DAG of a `PrintableState`."""


def replay(dag: HasInitState[_State], steps: Iterable[Step | Sequence]) -> _State:
    """Apply `steps` (Step objects or records) to the DAG's initial state."""
    state = dag.get_init_state()
    for step in steps:
        if not isinstance(step, Step):
            step = Step.from_record(step)
        state = replay_step(state, step)
    return state


def replay_step(state: _State, step: Step) -> _State:
    """`state.apply(step)` as a replay applies it: a step naming a stage the state does not
    have raises ScheduleError."""
    try:
        return state.apply(step)
    except IndexError as e:  # a record naming a stage this DAG's state does not have
        raise ScheduleError(
            f"step {step.to_record()} does not fit the state: its stages are "
            f"{[s.name for s in state.stages]} ({e})"
        ) from e


def print_python_schedule(state: PrintableState) -> str:
    """The equivalent TVM-style Python schedule of a state, one line per statement."""
    init = state.dag.get_init_state()
    lines = [axes_line(s, with_reduce=True) for s in init.stages if not s.is_placeholder]
    cur = init
    for step in state.steps:
        nxt = cur.apply(step)
        lines.extend(step.to_python(cur, nxt))
        cur = nxt
    return "\n".join(lines) + "\n"
