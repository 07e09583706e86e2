"""Stochastic schedules (MetaSchedule-style): a Schedule over a ComputeDAG whose calls, random
samplers included, are recorded in a Trace that replays.

    def schedule_mm(sch):
        c = sch.get_block("T_matmul")
        i, j, k = sch.get_loops(c)
        i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=16))
        ...

    sch = Schedule(dag, seed=0); schedule_mm(sch)
    print(sch.trace)                                   # replayable Python with decision=[...]
    other = replay(sch.trace.with_decision(2, [4, 8]), dag)
    other.state                                        # an ordinary State

Loops, stages and sampled values are handles (trace.LoopRV, BlockRV, ExprRV); the Schedule maps
them to stage and iterator names of its State, which stay the same whatever the decisions are,
so a trace replays with changed decisions. Every call runs a registered instruction kind
(instructions.py) and appends it to the trace; replay runs the same kinds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from autosched.errors import ScheduleError
from autosched.schedule.loop_state import State
from autosched.spaces.instructions import INSTRUCTIONS
from autosched.spaces.samplers import DecisionError
from autosched.spaces.trace import BlockRV, ExprRV, Instruction, LoopRV, Trace


class Schedule:
    """A State built by recorded instructions. `state` is the current State, `trace` the
    instructions so far, `contexts[i]` what sampler i saw (for the mutators)."""

    def __init__(self, dag, seed: int | random.Random | None = None) -> None:
        self.dag = dag
        self.state: State = dag.get_init_state()
        self.trace = Trace()
        self.rng = seed if isinstance(seed, random.Random) else random.Random(seed)
        self.contexts: dict[int, Any] = {}
        self._values: dict[int, Any] = {}

    # ---- handles (the API instruction kinds use) -------------------------------------------
    def _new(self, cls, concrete: Any, **kw):
        rv = cls(len(self._values), **kw)
        self._values[rv.id] = concrete
        return rv

    def new_block(self, stage: str) -> BlockRV:
        return self._new(BlockRV, stage)

    def new_loop(self, stage: str | None, name: str | None) -> LoopRV:
        return self._new(LoopRV, None if stage is None else (stage, name))

    def new_expr(self, value: int) -> ExprRV:
        return self._new(ExprRV, value, value=value)

    def _lookup(self, rv, cls) -> Any:
        if not isinstance(rv, cls) or rv.id not in self._values:
            raise ScheduleError(f"{rv!r} is not a {cls.__name__} of this schedule")
        return self._values[rv.id]

    def block(self, rv: BlockRV | str) -> str:
        """The stage name of a block handle (a stage name passes through)."""
        return rv if isinstance(rv, str) else self._lookup(rv, BlockRV)

    def loop(self, rv: LoopRV) -> tuple[str, str] | None:
        """(stage name, iterator name) of a loop handle; None for "root"."""
        return self._lookup(rv, LoopRV)

    def value(self, v: ExprRV | int) -> int:
        return self._lookup(v, ExprRV) if isinstance(v, ExprRV) else int(v)

    def get(self, rv) -> Any:
        """The concrete value behind any handle (MetaSchedule's `sch.get`)."""
        return self._values[rv.id]

    # ---- running instructions --------------------------------------------------------------
    def _run(self, kind: str, inputs: dict, attrs: dict, decision: Any = None) -> tuple:
        k = INSTRUCTIONS[kind]
        extra = {"decision": decision} if k.is_sampler else {}
        outputs, decision, context = k.apply(self, **inputs, **attrs, **extra)
        if k.is_sampler:
            self.contexts[len(self.trace.instructions)] = context
        inst = Instruction(
            kind, tuple(inputs.items()), tuple(attrs.items()), tuple(outputs), decision
        )
        self.trace = self.trace.append(inst)
        return outputs

    def _call(self, kind: str, inputs: dict, attrs: dict | None = None):
        outputs = self._run(kind, inputs, attrs or {})
        if not INSTRUCTIONS[kind].single:
            return list(outputs)
        return outputs[0] if outputs else None

    # ---- the schedule language -------------------------------------------------------------
    def get_block(self, name: str) -> BlockRV:
        return self._call("get_block", {}, {"name": name})

    def get_loops(self, block: BlockRV | str) -> list[LoopRV]:
        return self._call("get_loops", {"block": self._as_block(block)})

    def split(self, loop: LoopRV, factors: Sequence[ExprRV | int | None]) -> list[LoopRV]:
        """Split into len(factors) loops, outer to inner; the outermost factor may be None."""
        return self._call("split", {"loop": loop, "factors": list(factors)})

    def fuse(self, *loops: LoopRV) -> LoopRV:
        return self._call("fuse", {"loops": list(loops)})

    def reorder(self, *loops: LoopRV) -> None:
        return self._call("reorder", {"loops": list(loops)})

    def bind(self, loop: LoopRV, thread: str) -> None:
        return self._call("bind", {"loop": loop}, {"thread": thread})

    def unroll(self, loop: LoopRV) -> None:
        return self._call("unroll", {"loop": loop})

    def vectorize(self, loop: LoopRV) -> None:
        return self._call("vectorize", {"loop": loop})

    def pragma(self, loop: LoopRV, name: str, value: ExprRV | int) -> None:
        """E.g. pragma(l, "auto_unroll_max_step", sch.sample_categorical([0, 16, 64], ...))."""
        return self._call("pragma", {"loop": loop, "value": value}, {"name": name})

    def cache_read(self, block: BlockRV | str, scope: str, readers: Sequence) -> BlockRV:
        readers = [self._as_block(r) for r in readers]
        return self._call(
            "cache_read", {"block": self._as_block(block), "readers": readers}, {"scope": scope}
        )

    def cache_write(self, block: BlockRV | str, scope: str = "local") -> BlockRV:
        return self._call("cache_write", {"block": self._as_block(block)}, {"scope": scope})

    def compute_at(self, block: BlockRV | str, loop: LoopRV) -> None:
        """Compute `block` at `loop` (at root for sample_compute_location's root choice)."""
        return self._call("compute_at", {"block": self._as_block(block), "loop": loop})

    def compute_inline(self, block: BlockRV | str) -> None:
        return self._call("compute_inline", {"block": self._as_block(block)})

    # ---- samplers ----------------------------------------------------------------------------
    def sample_perfect_tile(
        self, loop: LoopRV, n: int, max_innermost_factor: int = 16
    ) -> list[ExprRV]:
        """n values whose product is exactly the loop's extent, outer to inner, the innermost
        at most `max_innermost_factor` (0: any)."""
        return self._call(
            "sample_perfect_tile",
            {"loop": loop},
            {"n": n, "max_innermost_factor": max_innermost_factor},
        )

    def sample_categorical(self, candidates: Sequence[int], probs: Sequence[float]) -> ExprRV:
        """One of `candidates`, drawn with weights `probs`; the decision is its index."""
        if len(candidates) != len(probs) or not candidates:
            raise ScheduleError("sample_categorical: candidates and probs differ in length")
        return self._call(
            "sample_categorical", {}, {"candidates": list(candidates), "probs": list(probs)}
        )

    def sample_compute_location(self, block: BlockRV | str) -> LoopRV:
        """A loop of the block's one consumer to compute it at, or root (decision -1)."""
        return self._call("sample_compute_location", {"block": self._as_block(block)})

    def _as_block(self, block: BlockRV | str) -> BlockRV:
        return self.get_block(block) if isinstance(block, str) else block


# A user's stochastic schedule function: it samples its decisions and transforms `sch` in place.
ScheduleFunction = Callable[[Schedule], object]


def _remap(value: Any, rvs: dict[int, Any]) -> Any:
    if isinstance(value, BlockRV | LoopRV | ExprRV):
        return rvs[value.id]
    if isinstance(value, list | tuple):
        return [_remap(v, rvs) for v in value]
    return value


def replay(trace: Trace, dag, seed: int | random.Random | None = None) -> Schedule:
    """Run `trace` again on a fresh Schedule of `dag`, each sampler taking its recorded decision
    (a decision of None draws a new one with `seed`). Raises DecisionError when a decision does
    not fit; the replayed trace prints exactly as `trace` does when nothing was changed."""
    sch = Schedule(dag, seed)
    rvs: dict[int, Any] = {}
    for pos, inst in enumerate(trace.instructions):
        inputs = {k: _remap(v, rvs) for k, v in inst.inputs}
        decision = list(inst.decision) if isinstance(inst.decision, tuple) else inst.decision
        try:
            outputs = sch._run(inst.kind, inputs, dict(inst.attrs), decision)
        except DecisionError:
            raise
        except ScheduleError as e:
            raise DecisionError(f"instruction {pos} ({inst.kind}) no longer applies: {e}") from e
        if len(outputs) != len(inst.outputs):
            raise DecisionError(
                f"instruction {pos} ({inst.kind}) made {len(outputs)} outputs, "
                f"the trace has {len(inst.outputs)}"
            )
        rvs.update((old.id, new) for old, new in zip(inst.outputs, outputs, strict=True))
    return sch


def trace_of(fn, dag, seed: int | random.Random | None = None) -> Schedule:
    """Run the schedule function `fn(sch)` on a fresh Schedule of `dag` with fresh decisions."""
    sch = Schedule(dag, seed)
    fn(sch)
    return sch
