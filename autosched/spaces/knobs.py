"""The knobs of a config space, as AutoTVM defines them: each space lists its entities (the
values one knob can take), and each entity applies itself to a State as transform steps.

Kinds: Split (tile sizes of one loop), Reorder (a permutation of loops), Annotate (unroll /
vectorize per loop) and OtherOption (any list of values, `define_knob`). A space's entities are
enumerated eagerly, in AutoTVM's order, so that `len(space)` counts them as AutoTVM does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autosched.errors import AutoschedError


def extent_of(axis: Any) -> int:
    """The extent of an int or of an iterator (anything with an `.extent`)."""
    extent = axis if isinstance(axis, int) else getattr(axis, "extent", None)
    if not isinstance(extent, int) or extent < 1:
        raise AutoschedError(f"a knob needs a loop of known extent, got {axis!r}")
    return extent


def factors_of(n: int) -> list[int]:
    """The divisors of n, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def powers_of_two(n: int) -> list[int]:
    """1, 2, 4, ... up to n."""
    return [1 << k for k in range(n.bit_length()) if 1 << k <= n]


# ---- entities: one knob's chosen value --------------------------------------------------------


@dataclass(frozen=True)
class SplitEntity:
    """Tile sizes `[-1, f1, ..., fk]` (outer to inner; -1 is the remainder), as AutoTVM."""

    size: tuple[int, ...]

    def apply(self, state, stage, axis):
        """Split `axis` of `stage` into len(size) loops; returns (state, their names, outer
        first)."""
        si = state.stage_index(stage)
        ii = state.stages[si].iter_index(axis)
        before = len(state.stages[si].iters)
        state = state.split(si, ii, list(self.size[1:]))
        added = len(state.stages[si].iters) - before
        return state, [it.name for it in state.stages[si].iters[ii : ii + added + 1]]

    @property
    def value(self) -> list[int]:
        return list(self.size)


@dataclass(frozen=True)
class ReorderEntity:
    """A permutation: the new position i holds the `perm[i]`-th given axis."""

    perm: tuple[int, ...]

    def apply(self, state, stage, axes: Sequence):
        """Reorder `axes` (iterator names) of `stage` by the permutation, in the loop positions
        they hold (the other loops stay); returns (state, the axes in their new order)."""
        order = [axes[i] for i in self.perm]
        names = [it.name for it in state[stage].iters]
        slots = sorted(names.index(a) for a in axes)
        for slot, name in zip(slots, order, strict=True):
            names[slot] = name
        return state.reorder(stage, names), order

    @property
    def value(self) -> list[int]:
        return list(self.perm)


# annotation name in a config -> the State annotation it applies ("none": leave the loop alone)
ANNOTATIONS = {"none": None, "unroll": "unroll", "vec": "vectorize"}


@dataclass(frozen=True)
class AnnotateEntity:
    """One annotation per axis ("none", "unroll" or "vec")."""

    anns: tuple[str, ...]

    def apply(self, state, stage, axes: Sequence):
        """Annotate each axis; returns the new state."""
        for axis, ann in zip(axes, self.anns, strict=True):
            if ANNOTATIONS[ann] is not None:
                state = state.annotate(stage, axis, ANNOTATIONS[ann])
        return state

    @property
    def value(self) -> list[str]:
        return list(self.anns)


@dataclass(frozen=True)
class OtherOptionEntity:
    """A `define_knob` value."""

    val: Any

    @property
    def value(self) -> Any:
        return self.val


# ---- spaces: one knob's entities --------------------------------------------------------------


class Space:
    """A knob's entities; `index_of(value)` finds the entity of a recorded value."""

    entities: list

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, i: int):
        return self.entities[i]

    def index_of(self, value: Any) -> int:
        for i, e in enumerate(self.entities):
            if e.value == value:
                return i
        raise AutoschedError(f"{value!r} is not an entity of {self!r}")


# split policy -> the candidate factors of one part, given the loop's extent
SPLIT_FACTORS: dict[str, Callable[[int], list[int]]] = {
    "factors": factors_of,
    "power2": powers_of_two,
    "verbose": lambda n: sorted(set(factors_of(n)) | set(powers_of_two(n))),
}


class SplitSpace(Space):
    """Every `[-1, f1, .., fk]` whose inner parts come from the policy's factors and multiply to
    at most the extent (to a divisor of it for "factors"); "candidate" lists them explicitly."""

    def __init__(
        self,
        product: int,
        num_outputs: int,
        policy: str = "factors",
        candidate: Sequence[Sequence[int]] | None = None,
        max_factor: int | None = None,
        filter: Callable[[SplitEntity], bool] | None = None,
    ) -> None:
        self.product, self.num_outputs, self.policy = product, num_outputs, policy
        if policy == "candidate":
            if not candidate:
                raise AutoschedError("define_split(policy='candidate') needs candidate=[...]")
            sizes = [tuple(c) for c in candidate]
        elif policy in SPLIT_FACTORS:
            pool = [f for f in SPLIT_FACTORS[policy](product) if f <= (max_factor or product)]
            sizes = []  # AutoTVM's order: the innermost part varies slowest
            for inner in itertools.product(pool, repeat=num_outputs - 1):
                prod = math.prod(inner)
                if prod <= product and (policy != "factors" or product % prod == 0):
                    sizes.append((-1, *reversed(inner)))
        else:
            raise AutoschedError(f"unknown split policy {policy!r}")
        self.entities = [SplitEntity(s) for s in sizes]
        if filter is not None:
            self.entities = [e for e in self.entities if filter(e)]

    def __repr__(self) -> str:
        return (
            f"Split(policy={self.policy}, product={self.product}, num_outputs={self.num_outputs})"
        )


class ReorderSpace(Space):
    """All permutations of the axes, or the given candidate orders."""

    def __init__(self, n_axes: int, policy: str = "all", candidate=None) -> None:
        self.policy = policy
        if policy == "all":
            perms = list(itertools.permutations(range(n_axes)))
        elif policy == "identity":
            perms = [tuple(range(n_axes))]
        elif policy == "candidate":
            if not candidate:
                raise AutoschedError("define_reorder(policy='candidate') needs candidate=[...]")
            perms = [tuple(p) for p in candidate]
        else:
            raise AutoschedError(f"unknown reorder policy {policy!r}")
        self.entities = [ReorderEntity(p) for p in perms]

    def __repr__(self) -> str:
        return f"Reorder(policy={self.policy})"


# annotate policy -> the choices of one axis
ANNOTATE_CHOICES = {
    "try_unroll": ("none", "unroll"),
    "try_vec": ("none", "vec"),
    "try_unroll_vec": ("none", "unroll", "vec"),
}


class AnnotateSpace(Space):
    """Every combination of the policy's per-axis choices, or the given candidates."""

    def __init__(self, n_axes: int, policy: str = "try_unroll", candidate=None) -> None:
        self.policy = policy
        if policy == "candidate":
            if not candidate:
                raise AutoschedError("define_annotate(policy='candidate') needs candidate=[...]")
            combos = [tuple(c) for c in candidate]
        elif policy in ANNOTATE_CHOICES:
            combos = list(itertools.product(ANNOTATE_CHOICES[policy], repeat=n_axes))
        else:
            raise AutoschedError(f"unknown annotate policy {policy!r}")
        for combo in combos:
            if len(combo) != n_axes or any(a not in ANNOTATIONS for a in combo):
                raise AutoschedError(f"bad annotation candidate {combo!r}")
        self.entities = [AnnotateEntity(c) for c in combos]

    def __repr__(self) -> str:
        return f"Annotate(policy={self.policy})"


class OtherOptionSpace(Space):
    """The values given to `define_knob`."""

    def __init__(self, values: Sequence) -> None:
        if not values:
            raise AutoschedError("define_knob needs at least one value")
        self.entities = [OtherOptionEntity(v) for v in values]

    def __repr__(self) -> str:
        return f"OtherOption({[e.val for e in self.entities]})"
