"""Which stages of a State read which: the producer / consumer queries over stage indices.

These follow a State, not the DAG: cache stages, rfactor stages and the redirects of readers
(a reader of a cached tensor reads the cache stage) are all part of the answer. The queries are
recomputed from the stages on every call, since States change with every step.
"""

from __future__ import annotations

from autosched.errors import ScheduleError
from autosched.schedule.stage import HasStages
from autosched.te.tensor import ComputeOp


def producer_map(state: HasStages) -> dict[int, int]:
    """id(op) -> index of the stage whose result a load of op's tensor reads."""
    return {id(s.produces): i for i, s in enumerate(state.stages)}


def reads_of(state: HasStages, index: int, producers: dict[int, int] | None = None) -> set[int]:
    """Stages whose results stage `index` reads (after its redirects). `producers`, from
    `producer_map(state)`, saves the lookup when calling this for many stages."""
    stage = state.stages[index]
    if not isinstance(stage.op, ComputeOp):
        return set()
    if producers is None:
        producers = producer_map(state)
    redirect = {id(a): b for a, b in stage.redirects} if stage.redirects else None
    out: set[int] = set()
    for t in stage.op.input_tensors:
        op = t.op
        while redirect and id(op) in redirect:  # a cache of a cache: follow the chain
            op = redirect[id(op)]
        j = producers.get(id(op))
        if j is None:
            raise ScheduleError(f"no stage produces {op.name!r}")
        out.add(j)
    return out


def consumers_of(state: HasStages, index: int) -> set[int]:
    """Stages that read stage `index`'s result directly."""
    producers = producer_map(state)
    return {j for j in range(len(state.stages)) if index in reads_of(state, j, producers)}


def transitive_consumers(state: HasStages, index: int) -> set[int]:
    """Stages that read stage `index`'s result directly or through other stages."""
    producers = producer_map(state)
    consumers: dict[int, list[int]] = {}
    for j in range(len(state.stages)):
        for i in reads_of(state, j, producers):
            consumers.setdefault(i, []).append(j)
    out: set[int] = set()
    todo = [index]
    while todo:
        for c in consumers.get(todo.pop(), ()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out
