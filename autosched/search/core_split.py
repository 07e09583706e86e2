"""How a pipelined tuning loop shares the CPU cores between the search and the compilers.

With `TuningOptions.pipeline` the next round is searched while this one is compiled and timed,
so the search's process pool and the NVRTC compile workers run at the same time. Each sized for
the whole machine (one search process a core, one compiler a core but one), they fight for the
cores: every compilation then takes about twice its CPU time in wall-clock time, and the
builder's timeout stretches with it. `pipeline_core_split` gives each side its share instead:
one core to the runner's launch loop and this process, half of the rest to the search's pool
and the other half to the compilers. The loop without pipelining keeps its defaults (each side
has every core while the other waits).
"""

from __future__ import annotations

from typing import NamedTuple


class CoreSplit(NamedTuple):
    """Processes for each side of a pipelined round."""

    search_jobs: int  # the search's process pool (`SearchParams.n_jobs`)
    build_jobs: int  # concurrent compilations (`LocalBuilder(n_parallel=...)`)


def pipeline_core_split(cores: int) -> CoreSplit:
    """The search's and the compilers' shares of `cores` (at least one each): one core is kept
    for the runner and the tuning loop, the search gets half of the rest (rounded down) and the
    compilers the remainder, so that together they use the cores and no more (but on machines
    of three cores or fewer, where each side still needs one)."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    spare = cores - 1
    search = max(1, spare // 2)
    return CoreSplit(search, max(1, spare - search))
