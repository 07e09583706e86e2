"""The `cfg` a template receives: a ConfigSpace while the space is being collected, a ConfigEntity
(one point of it) when a config is applied, with the same `define_*` / `cfg[name]` interface.

As in AutoTVM, the template runs once on a ConfigSpace: each `define_*` adds a knob and
`cfg[name]` answers the knob's first entity, so that the schedule code runs through. A config's
index decomposes into one entity index per knob, the first knob varying fastest; the space's
length is the product of the knobs' lengths.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from autosched.errors import AutoschedError
from autosched.schedule.compute_dag import ComputeDAG
from autosched.spaces.knobs import (
    AnnotateSpace,
    OtherOptionSpace,
    ReorderSpace,
    Space,
    SplitSpace,
    extent_of,
)


class _Config:
    """What both kinds of cfg share: the knob table and the schedule's starting State."""

    def __init__(self, dag: ComputeDAG | None = None) -> None:
        self.space_map: dict[str, Space] = {}
        self.dag = dag

    def create_schedule(self, tensors: Sequence):
        """The initial State of the DAG of `tensors` (inputs and outputs). When the cfg is bound
        to a task's DAG, that DAG's State is given, so that every config schedules one DAG."""
        if self.dag is None:
            self.dag = ComputeDAG(list(tensors))
        return self.dag.get_init_state()

    # ---- knob definitions (AutoTVM's names and arguments) ----

    def define_split(
        self,
        name: str,
        axis: Any,
        num_outputs: int = 2,
        policy: str = "factors",
        candidate: Sequence[Sequence[int]] | None = None,
        max_factor: int | None = None,
        filter=None,
    ) -> None:
        """Tile sizes of a loop (`axis`: an int extent or an iterator) into `num_outputs` parts."""
        self._define(
            name,
            lambda: SplitSpace(extent_of(axis), num_outputs, policy, candidate, max_factor, filter),
        )

    def define_reorder(
        self, name: str, axes: Sequence, policy: str = "all", candidate=None
    ) -> None:
        """An order of `axes` ("all" permutations, "identity", or the "candidate" orders)."""
        self._define(name, lambda: ReorderSpace(len(axes), policy, candidate))

    def define_annotate(
        self, name: str, axes: Sequence, policy: str = "try_unroll", candidate=None
    ) -> None:
        """Per-axis annotations ("try_unroll", "try_vec", "try_unroll_vec", or "candidate")."""
        self._define(name, lambda: AnnotateSpace(len(axes), policy, candidate))

    def define_knob(self, name: str, values: Sequence) -> None:
        """Any list of values; `cfg[name].val` is the chosen one."""
        self._define(name, lambda: OtherOptionSpace(list(values)))

    def _define(self, name: str, make) -> None:
        """Add a knob (only a ConfigSpace does; a ConfigEntity already knows its knobs)."""


class ConfigSpace(_Config):
    """All configs of a template: an ordered table of knobs."""

    def _define(self, name: str, make) -> None:
        if name in self.space_map:
            raise AutoschedError(f"knob {name!r} is defined twice")
        self.space_map[name] = make()

    def __getitem__(self, name: str):
        """While collecting the space: the knob's first entity, to let the schedule run."""
        return self.space_map[name][0]

    def __len__(self) -> int:
        return math.prod(len(s) for s in self.space_map.values())

    def knob_indices(self, index: int) -> list[int]:
        """The entity index of each knob in config `index` (the first knob varies fastest)."""
        if not 0 <= index < len(self):
            raise AutoschedError(f"config index {index} is outside the space (len={len(self)})")
        out = []
        for space in self.space_map.values():
            index, i = divmod(index, len(space))
            out.append(i)
        return out

    def index_of(self, knob_indices: Sequence[int]) -> int:
        """The config index of one entity index per knob."""
        index, stride = 0, 1
        for i, space in zip(knob_indices, self.space_map.values(), strict=True):
            index += i * stride
            stride *= len(space)
        return index

    def get(self, index: int) -> ConfigEntity:
        """Config `index` of the space."""
        entities = {
            name: space[i]
            for (name, space), i in zip(
                self.space_map.items(), self.knob_indices(index), strict=True
            )
        }
        return ConfigEntity(self, index, entities)

    def from_dict(self, config: dict) -> ConfigEntity:
        """The config a record's `config` entry names (its knob values, or its index)."""
        if "knobs" in config:
            knobs = config["knobs"]
            return self.get(
                self.index_of([s.index_of(knobs[n]) for n, s in self.space_map.items()])
            )
        return self.get(int(config["index"]))

    def __repr__(self) -> str:
        lines = [f"ConfigSpace (len={len(self)}, space_map="]
        for i, (name, space) in enumerate(self.space_map.items()):
            lines.append(f"  {i:2d} {name}: {space!r} len={len(space)}")
        return "\n".join(lines) + "\n)"


class ConfigEntity(_Config):
    """One config: an entity per knob. `define_*` are no-ops (the knobs are known)."""

    def __init__(self, space: ConfigSpace, index: int, entities: dict) -> None:
        super().__init__(None)
        self.space_map = space.space_map
        self.index = index
        self.entity_map = entities

    def bind(self, dag: ComputeDAG) -> ConfigEntity:
        """This config scheduling `dag` (a task's DAG) when the template calls create_schedule."""
        self.dag = dag
        return self

    def __getitem__(self, name: str):
        return self.entity_map[name]

    def to_dict(self) -> dict:
        """What a record keeps of the config: its index and each knob's value (JSON values)."""
        return {"index": self.index, "knobs": {n: e.value for n, e in self.entity_map.items()}}

    def __repr__(self) -> str:
        items = [(n, e.value) for n, e in self.entity_map.items()]
        return f"{items},None,{self.index}"
