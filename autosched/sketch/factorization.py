"""Tile sizes as factorisations: the perfect tilings of an extent, the padded extents an axis may
be tiled for, and the uniform pick the init rules draw them with."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from typing import TypeVar

_T = TypeVar("_T")


@functools.cache
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of n, ascending."""
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return tuple(small + large[::-1])


def pick(options: Sequence[_T], rng: random.Random) -> _T:
    """One of `options`, uniformly (one `rng.random()` draw)."""
    return options[int(rng.random() * len(options))]


@functools.cache
def factorization_schemes(
    extent: int, n_lengths: int, max_innermost: int
) -> tuple[tuple[int, ...], ...]:
    """Every perfect tiling of `extent` into `n_lengths` inner lengths (outer to inner): tuples
    whose product divides `extent` (the outermost part takes the rest) and whose last entry is at
    most `max_innermost`. Cached: the search asks for the same few extents millions of times."""
    if n_lengths == 0:
        return ((),)
    out: list[tuple[int, ...]] = []
    for last in divisors(extent):
        if last > max_innermost:
            break
        for head in factorization_schemes(extent // last, n_lengths - 1, extent):
            out.append(head + (last,))
    return tuple(out)


# An extent over PAD_MIN_EXTENT that is not a multiple of PAD_MULTIPLE (1023, 999, 112) may also be
# tiled as if it were the next multiple: its divisors alone would leave odd or tiny tiles, and the
# overhanging iterations cost only guards (lowering adds them for any split that does not divide).
PAD_MULTIPLE = 32
PAD_MIN_EXTENT = 64


@functools.cache
def tiling_extents(extent: int) -> tuple[int, ...]:
    """The extents a spatial split of `extent` may be tiled for: itself, and its next multiple
    of PAD_MULTIPLE when it is over PAD_MIN_EXTENT and not a multiple already."""
    if extent > PAD_MIN_EXTENT and extent % PAD_MULTIPLE:
        return (extent, -(-extent // PAD_MULTIPLE) * PAD_MULTIPLE)
    return (extent,)


__all__ = [
    "PAD_MIN_EXTENT",
    "PAD_MULTIPLE",
    "divisors",
    "factorization_schemes",
    "pick",
    "tiling_extents",
]
