"""Traces of stochastic schedules: the instructions a schedule function ran, with the random
decisions of its samplers kept apart from the structure (MetaSchedule's design).

An instruction names its kind, its inputs (random variables made by earlier instructions, or
literals), its attributes, its outputs and, for a sampler, its decision. Random variables are
handles: BlockRV (a stage), LoopRV (an iterator of a stage), ExprRV (a sampled integer). A trace
prints as replayable Python,

    b0 = sch.get_block(name="T_matmul")
    l1, l2, l3 = sch.get_loops(block=b0)
    v4, v5 = sch.sample_perfect_tile(loop=l1, n=2, max_innermost_factor=16, decision=[16, 2])
    l6, l7 = sch.split(loop=l1, factors=[v4, v5])

and `with_decision(i, value)` gives the same trace with one sampler's decision changed;
`stochastic.replay(trace, dag)` runs it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from autosched.spaces.samplers import DecisionError


@dataclass(frozen=True, slots=True)
class BlockRV:
    """A stage of the schedule (MetaSchedule's block)."""

    id: int
    PREFIX = "b"


@dataclass(frozen=True, slots=True)
class LoopRV:
    """An iterator of a stage; from sample_compute_location it may also mean "at root"."""

    id: int
    PREFIX = "l"


@dataclass(frozen=True, slots=True)
class ExprRV:
    """A sampled integer. `int(rv)` gives its value in the schedule that made it."""

    id: int
    value: int = 0
    PREFIX = "v"

    def __int__(self) -> int:
        return self.value

    __index__ = __int__


RV = BlockRV | LoopRV | ExprRV


@dataclass(frozen=True, slots=True)
class Instruction:
    """One schedule call. `inputs` are (keyword, value) pairs whose values are RVs, literals or
    lists of them; `attrs` likewise but never RVs; `decision` is None except for samplers."""

    kind: str
    inputs: tuple[tuple[str, Any], ...]
    attrs: tuple[tuple[str, Any], ...]
    outputs: tuple[RV, ...]
    decision: Any = None

    def attr(self, name: str) -> Any:
        return dict(self.attrs)[name]


def _fmt(value: Any, names: dict[int, str]) -> str:
    if isinstance(value, BlockRV | LoopRV | ExprRV):
        return names[value.id]
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_fmt(v, names) for v in value) + "]"
    return repr(value)


@dataclass(frozen=True, slots=True)
class Trace:
    """The instructions of one run of a schedule function, in order."""

    instructions: tuple[Instruction, ...] = ()

    def append(self, inst: Instruction) -> Trace:
        return Trace(self.instructions + (inst,))

    @property
    def sampler_indices(self) -> list[int]:
        """Positions of the instructions that carry a decision."""
        return [i for i, inst in enumerate(self.instructions) if inst.decision is not None]

    @property
    def decisions(self) -> dict[int, Any]:
        """Instruction position -> decision, for every sampler."""
        return {i: self.instructions[i].decision for i in self.sampler_indices}

    def with_decision(self, index: int, decision: Any) -> Trace:
        """The same trace with the decision of the sampler at position `index` replaced (fit
        is checked when it is replayed)."""
        if index not in self.sampler_indices:
            raise DecisionError(
                f"instruction {index} is not a sampler; samplers are at {self.sampler_indices}"
            )
        if isinstance(decision, Sequence):
            decision = tuple(decision)
        insts = list(self.instructions)
        insts[index] = replace(insts[index], decision=decision)
        return Trace(tuple(insts))

    def to_python(self) -> str:
        """The trace as Python statements over `sch`, one per instruction, with each sampler's
        `decision=[...]` so that running them replays this schedule exactly."""
        names: dict[int, str] = {}
        lines = []
        for inst in self.instructions:
            for rv in inst.outputs:
                names[rv.id] = f"{rv.PREFIX}{len(names)}"
            args = [f"{k}={_fmt(v, names)}" for k, v in inst.inputs + inst.attrs]
            if inst.decision is not None:
                args.append(f"decision={_fmt(inst.decision, names)}")
            call = f"sch.{inst.kind}({', '.join(args)})"
            outs = ", ".join(names[rv.id] for rv in inst.outputs)
            lines.append(f"{outs} = {call}" if outs else call)
        return "\n".join(lines) + "\n"

    __str__ = to_python

    def to_json(self) -> dict:
        """The trace as JSON data (what a record log keeps): per instruction its kind, inputs,
        attributes, outputs and decision; handles become `{"rv": prefix, "id": n}` objects."""
        return {
            "instructions": [
                {
                    "kind": inst.kind,
                    "inputs": [[k, _to_json(v)] for k, v in inst.inputs],
                    "attrs": [[k, _to_json(v)] for k, v in inst.attrs],
                    "outputs": [_to_json(rv) for rv in inst.outputs],
                    "decision": _to_json(inst.decision),
                }
                for inst in self.instructions
            ]
        }

    @staticmethod
    def from_json(data: dict) -> Trace:
        """The trace `to_json` wrote (a decision that is a list comes back as a tuple, as a
        sampler records it)."""
        insts = []
        for d in data["instructions"]:
            decision = _from_json(d.get("decision"))
            insts.append(
                Instruction(
                    d["kind"],
                    tuple((k, _from_json(v)) for k, v in d["inputs"]),
                    tuple((k, _from_json(v)) for k, v in d["attrs"]),
                    tuple(_from_json(rv) for rv in d["outputs"]),
                    tuple(decision) if isinstance(decision, list) else decision,
                )
            )
        return Trace(tuple(insts))


_RV_CLASSES = {cls.PREFIX: cls for cls in (BlockRV, LoopRV, ExprRV)}


def _to_json(value: Any) -> Any:
    if isinstance(value, ExprRV):
        return {"rv": value.PREFIX, "id": value.id, "value": value.value}
    if isinstance(value, BlockRV | LoopRV):
        return {"rv": value.PREFIX, "id": value.id}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, dict) and "rv" in value:
        cls = _RV_CLASSES[value["rv"]]
        return cls(value["id"], value["value"]) if cls is ExprRV else cls(value["id"])
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value
