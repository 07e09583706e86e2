"""The instruction kinds of a stochastic schedule, one registered function each.

A kind's function runs on a `stochastic.Schedule` (through its small handle API: `block`,
`loop`, `value`, `new_block`, `new_loop`, `new_expr`, `state`, `rng`) with the instruction's
inputs and attributes as keywords, and returns (outputs, decision, context). Samplers take the
recorded decision when replaying (None: draw one) and return the context a mutator needs to draw
another (the loop extent, or the number of candidates). Each kind applies its change through
the ordinary State methods, so the schedule's State is a plain State with plain steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autosched.errors import ScheduleError
from autosched.schedule.dataflow import consumers_of
from autosched.spaces import samplers


@dataclass(frozen=True)
class InstructionKind:
    """A registered kind: its function, whether it samples, and whether it returns one RV
    (else a list)."""

    name: str
    apply: Callable
    is_sampler: bool = False
    single: bool = True


INSTRUCTIONS: dict[str, InstructionKind] = {}


def instruction(name: str, is_sampler: bool = False, single: bool = True) -> Callable:
    """Register the decorated function as instruction kind `name`."""

    def register(fn: Callable) -> Callable:
        INSTRUCTIONS[name] = InstructionKind(name, fn, is_sampler, single)
        return fn

    return register


def _positions(sch, loops) -> tuple[str, list[int]]:
    """The one stage of `loops` and their iterator positions in it."""
    places = [sch.loop(rv) for rv in loops]
    stages = {p[0] for p in places if p is not None}
    if len(stages) != 1 or any(p is None for p in places):
        raise ScheduleError(f"loops {places} must be iterators of one stage")
    stage = stages.pop()
    st = sch.state[stage]
    return stage, [st.iter_index(p[1]) for p in places]


def _iter_rvs(sch, stage: str, start: int, stop: int) -> tuple:
    iters = sch.state[stage].iters[start:stop]
    return tuple(sch.new_loop(stage, it.name) for it in iters)


# ---- lookup ----------------------------------------------------------------------------------
@instruction("get_block")
def _get_block(sch, *, name: str):
    return (sch.new_block(sch.state[name].name),), None, None


@instruction("get_loops", single=False)
def _get_loops(sch, *, block):
    stage = sch.block(block)
    return _iter_rvs(sch, stage, 0, len(sch.state[stage].iters)), None, None


# ---- loop transforms -------------------------------------------------------------------------
@instruction("split", single=False)
def _split(sch, *, loop, factors):
    stage, (pos,) = _positions(sch, [loop])
    values = [None if f is None else sch.value(f) for f in factors]
    inner = [v for v in values[1:] if v is not None]
    if len(inner) < len(values) - 1:
        raise ScheduleError("split: only the outermost factor may be None (inferred)")
    extent = sch.state[stage].iters[pos].extent
    product = 1
    for v in inner:
        product *= v
    if values[0] is not None and product * values[0] != extent:
        raise ScheduleError(f"split: factors {values} do not multiply to the extent {extent}")
    sch.state = sch.state.split(stage, pos, values[1:])
    return _iter_rvs(sch, stage, pos, pos + len(values)), None, None


@instruction("fuse")
def _fuse(sch, *, loops):
    stage, pos = _positions(sch, loops)
    sch.state = sch.state.fuse(stage, pos)
    return _iter_rvs(sch, stage, min(pos), min(pos) + 1), None, None


@instruction("reorder")
def _reorder(sch, *, loops):
    """The given loops take their own positions, sorted, in the given order (MetaSchedule)."""
    stage, pos = _positions(sch, loops)
    order = list(range(len(sch.state[stage].iters)))
    for slot, p in zip(sorted(pos), pos, strict=True):
        order[slot] = p
    sch.state = sch.state.reorder(stage, order)
    return (), None, None


def _annotation(annotation: str | None = None) -> Callable:
    def apply(sch, *, loop, thread: str | None = None):
        stage, (pos,) = _positions(sch, [loop])
        sch.state = sch.state.annotate(stage, pos, annotation or thread)
        return (), None, None

    return apply


instruction("bind")(_annotation())
instruction("unroll")(_annotation("unroll"))
instruction("vectorize")(_annotation("vectorize"))


@instruction("pragma")
def _pragma(sch, *, loop, name: str, value):
    stage, (pos,) = _positions(sch, [loop])
    sch.state = sch.state.pragma(stage, pos, name, sch.value(value))
    return (), None, None


# ---- stages ----------------------------------------------------------------------------------
def _new_stage(sch, before) -> tuple:
    (name,) = [s.name for s in sch.state.stages if s.name not in before]
    return (sch.new_block(name),)


@instruction("cache_read")
def _cache_read(sch, *, block, scope: str, readers):
    before = {s.name for s in sch.state.stages}
    sch.state = sch.state.cache_read(sch.block(block), scope, [sch.block(r) for r in readers])
    return _new_stage(sch, before), None, None


@instruction("cache_write")
def _cache_write(sch, *, block, scope: str):
    before = {s.name for s in sch.state.stages}
    sch.state = sch.state.cache_write(sch.block(block), scope)
    return _new_stage(sch, before), None, None


@instruction("compute_at")
def _compute_at(sch, *, block, loop):
    place = sch.loop(loop)
    if place is None:
        sch.state = sch.state.compute_root(sch.block(block))
    else:
        sch.state = sch.state.compute_at(sch.block(block), place[0], place[1])
    return (), None, None


@instruction("compute_inline")
def _compute_inline(sch, *, block):
    sch.state = sch.state.compute_inline(sch.block(block))
    return (), None, None


# ---- samplers --------------------------------------------------------------------------------
@instruction("sample_perfect_tile", is_sampler=True, single=False)
def _sample_perfect_tile(sch, *, loop, n: int, max_innermost_factor: int, decision=None):
    stage, (pos,) = _positions(sch, [loop])
    extent = sch.state[stage].iters[pos].extent
    if decision is None:
        decision = samplers.sample_perfect_tile(sch.rng, extent, n, max_innermost_factor)
    samplers.check_perfect_tile(decision, extent, n, max_innermost_factor)
    decision = tuple(decision)
    return tuple(sch.new_expr(v) for v in decision), decision, extent


@instruction("sample_categorical", is_sampler=True)
def _sample_categorical(sch, *, candidates, probs, decision=None):
    if decision is None:
        decision = samplers.sample_categorical(sch.rng, probs)
    samplers.check_index(decision, len(candidates), "categorical")
    return (sch.new_expr(candidates[decision]),), decision, len(candidates)


def compute_locations(state, stage: str) -> list[tuple[str, str]]:
    """Where `stage` may be computed besides root: the iterators of its one consumer (none when
    it has several or none)."""
    consumers = consumers_of(state, state.stage_index(stage))
    if len(consumers) != 1:
        return []
    target = state.stages[consumers.pop()]
    return [(target.name, it.name) for it in target.iters]


@instruction("sample_compute_location", is_sampler=True)
def _sample_compute_location(sch, *, block, decision=None):
    places = compute_locations(sch.state, sch.block(block))
    if decision is None:
        decision = sch.rng.randrange(-1, len(places))
    samplers.check_index(decision, len(places), "compute-location", lowest=-1)
    place = None if decision == -1 else places[decision]
    return (sch.new_loop(*place) if place else sch.new_loop(None, None),), decision, len(places)
