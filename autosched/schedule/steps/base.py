"""The Step base class, its registry by record tag, and the helpers every step module uses.

A step is a frozen dataclass whose fields are its record fields. It holds, together: `apply`
(state -> state), `to_record` / `from_record` (a JSON-able list that starts with the tag), and
`to_python` (its lines of the equivalent TVM-style Python schedule). Stages and iterators are
named by index, which makes steps replayable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, fields
from typing import Any, ClassVar, Protocol, TypeVar

from autosched.errors import ScheduleError
from autosched.schedule.op_info import OpInfo
from autosched.schedule.stage import HasStages, Stage

STEP_REGISTRY: dict[str, type[Step]] = {}
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # record field names per step class


def replace(obj, **changes):
    """`dataclasses.replace` for the frozen slots dataclasses of stage.py (Stage, Iterator):
    copies the slots directly instead of re-running `__init__`, several times faster; the search
    creates millions of stages."""
    cls = type(obj)
    new = object.__new__(cls)
    for name in cls.__slots__:
        object.__setattr__(new, name, changes.pop(name) if name in changes else getattr(obj, name))
    if changes:
        raise TypeError(f"{cls.__name__} has no fields {sorted(changes)}")
    return new


def check(cond: bool, msg: str | Callable[[], str]) -> None:
    """Raise ScheduleError(msg) unless `cond`: the one way steps reject invalid input. Hot paths
    pass `msg` as a lambda, so the message is only formatted when the step is rejected."""
    if not cond:
        raise ScheduleError(msg if isinstance(msg, str) else msg())


class OpAnalyses(Protocol):
    """What steps read of a state's compute DAG: the analysis of each of its ops, by id(op)."""

    @property
    def info(self) -> Mapping[int, OpInfo]: ...


# a step returns the kind of state it is given (a State for a State)
StateT = TypeVar("StateT", bound="StepTarget")


class StepTarget(HasStages, Protocol):
    """What a step reads of a state, and builds the next one with: a `loop_state.State`, typed
    by what the steps use of it, since loop_state imports the steps."""

    @property
    def dag(self) -> OpAnalyses: ...

    @property
    def steps(self) -> tuple[Step, ...]: ...

    def replace_stage(self: StateT, index: int, stage: Stage) -> StateT: ...

    def with_stages(self: StateT, stages: Sequence[Stage]) -> StateT: ...


class Step:
    """Base class. Subclasses are frozen dataclasses with `TAG` set; fields are record fields."""

    TAG: ClassVar[str] = ""
    # where the step inserts new stages, one entry per stage in the order inserted: the
    # position relative to `stage_id` (0: before it, 1: after it); empty for most steps
    INSERTS: ClassVar[tuple[int, ...]] = ()
    stage_id: int  # every step acts on one stage, named by its index (a field of each step)
    # set by @dataclass on every subclass; declared so that the checker knows steps for
    # dataclasses (`fields`)
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.TAG:
            # dataclass(slots=True) re-creates the class: the last definition is the real one.
            STEP_REGISTRY[cls.TAG] = cls

    def apply(self, state: StateT) -> StateT:
        """The state after this step (without the step recorded: `State.apply` records it)."""
        raise NotImplementedError

    def to_python(self, before: StepTarget, after: StepTarget) -> list[str]:
        """This step's lines of the equivalent TVM-style Python schedule."""
        raise NotImplementedError

    def to_record(self) -> tuple:
        """(TAG, *fields): nested tuples, which JSON writes as lists (from_record accepts both)."""
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in fields(self))
        return (self.TAG,) + tuple(getattr(self, n) for n in names)

    @classmethod
    def from_record(cls, record) -> Step:
        """The step a record (from `to_record`, or its JSON lists) describes."""
        check(
            isinstance(record, (list, tuple)) and bool(record) and record[0] in STEP_REGISTRY,
            f"unknown step record {record!r}",
        )
        sub = STEP_REGISTRY[record[0]]
        names = [f.name for f in fields(sub)]
        check(
            len(record) - 1 == len(names),
            f"step record {record!r} needs {len(names)} fields {names}",
        )
        return sub(*(_tuplify(v) for v in record[1:]))


def _tuplify(v):
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


# ---- names in the printed Python schedule --------------------------------------------------


def pyname(stage: Stage | str) -> str:
    """The Python variable of a stage in the printed schedule: `kernel.shared` ->
    `kernel_shared`."""
    name = stage if isinstance(stage, str) else stage.name
    return name.replace(".", "_")


def pyiter(stage: Stage, name: str) -> str:
    """The Python variable of iterator `name` of `stage` in the printed schedule."""
    return f"{pyname(stage)}_{name}"


def axes_line(stage: Stage, with_reduce: bool, via_schedule: bool = False) -> str:
    """`S_i, S_j, ... = tuple(S.op.axis) + ...`; `via_schedule` reads the op from `s[S]`, for a
    stage whose Python tensor still names the op it had before the step (rfactor's target)."""
    S = pyname(stage)
    names = ", ".join(f"{S}_{it.name}" for it in stage.root_iters)
    if len(stage.root_iters) == 1:  # unpack the one axis (a cache of a vector operand)
        names += ","
    op = f"s[{S}].op" if via_schedule else f"{S}.op"
    tail = f" + tuple({op}.reduce_axis)" if with_reduce else ""
    return f"{names} = tuple({op}.axis){tail}"
