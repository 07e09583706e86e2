"""The random draws behind a stochastic schedule's samplers, and the checks that a recorded
decision still fits.

Kept apart from the Schedule so the search's mutator draws "another decision for the same
sampler" with the same code that drew the first one. A decision that does not fit raises
DecisionError, the one error replay gives for a changed or stale decision.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache

from autosched.errors import ScheduleError


class DecisionError(ScheduleError):
    """A sampler's recorded decision does not fit the loop or candidates it is replayed on."""


@lru_cache(maxsize=4096)
def perfect_tilings(extent: int, n: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """Every way to write `extent` as an ordered product of `n` factors (outer to inner) whose
    innermost factor is at most `max_innermost` (0: no limit)."""
    if n == 1:
        return ((extent,),) if not max_innermost or extent <= max_innermost else ()
    out: list[tuple[int, ...]] = []
    for d in range(1, extent + 1):
        if extent % d == 0:
            out.extend((d,) + rest for rest in perfect_tilings(extent // d, n - 1, max_innermost))
    return tuple(out)


def sample_perfect_tile(
    rng: random.Random, extent: int, n: int, max_innermost: int
) -> tuple[int, ...]:
    """A uniformly random tiling from `perfect_tilings` (there is always one: innermost 1)."""
    return rng.choice(perfect_tilings(extent, n, max_innermost))


def check_perfect_tile(decision: Sequence[int], extent: int, n: int, max_innermost: int) -> None:
    """Raise DecisionError unless `decision` is n positive factors of `extent` within the limit."""
    d = tuple(decision)
    product = 1
    for f in d:
        product *= f
    if (
        len(d) != n
        or any(not isinstance(f, int) or f < 1 for f in d)
        or product != extent
        or (max_innermost and d[-1] > max_innermost)
    ):
        raise DecisionError(
            f"perfect-tile decision {list(d)} does not fit a loop of extent {extent} split into "
            f"{n} factors (innermost at most {max_innermost or 'any'})"
        )


def sample_categorical(rng: random.Random, probs: Sequence[float]) -> int:
    """An index drawn with weights `probs`."""
    return rng.choices(range(len(probs)), weights=probs)[0]


def check_index(decision: int, n: int, what: str, lowest: int = 0) -> None:
    """Raise DecisionError unless `lowest <= decision < n`."""
    if not isinstance(decision, int) or not lowest <= decision < n:
        raise DecisionError(f"{what} decision {decision!r} is not in {lowest}..{n - 1}")


def other_decision(rng: random.Random, kind: str, decision, attrs: dict, context) -> object:
    """A different decision for the same sampler, or None when it has no other choice.
    `context` is what the sampler saw: the loop extent (perfect tile) or the number of
    candidates (categorical, compute location)."""
    others: list[list[int]] | list[int]
    if kind == "sample_perfect_tile":
        options = perfect_tilings(context, attrs["n"], attrs["max_innermost_factor"])
        others = [list(t) for t in options if list(t) != list(decision)]
    else:
        lowest = -1 if kind == "sample_compute_location" else 0
        others = [k for k in range(lowest, context) if k != decision]
    return rng.choice(others) if others else None
