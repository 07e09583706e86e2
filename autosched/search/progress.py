"""What the tuning loop records and prints per round: trials, best, and where the round's
wall-clock time went.

A round's wall time runs from the end of the previous round to the end of this one. With a
pipelined loop the search of the next batch runs while this batch runs on the GPU, and the
next batch starts to compile before this one ends, so the activities overlap; `split_s`
therefore splits the wall time by what the loop was waiting on, so that its four parts add up
to the wall time:

- "gpu": the runners timing and checking kernels (per GPU, when there are several),
- "build": the rest of the measurement (compilers, lowering, transfers),
- "search": search time not hidden behind a measurement,
- "idle": everything else (training the model, bookkeeping).

`gpu_busy` is the share of the wall time the GPU was working: what the overlap is for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    """An interval of `time.perf_counter()` seconds."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def overlap(self, other: Span) -> float:
        """Seconds this span and `other` share."""
        return max(0.0, min(self.end, other.end) - max(self.start, other.start))


@dataclass
class RoundTimes:
    """When a round's work ran: `window` from the previous round's end to this one's, the
    seconds its batch's search took (perhaps in the previous window), the measurement of its
    batch (with the measurer's build / run split of it, in seconds), the model update's seconds
    and the searches that ran in the window (of this batch or the next)."""

    window: Span
    search: float
    measure: Span
    build: float
    run: float
    model: float
    searches: list[Span] = field(default_factory=list)

    def split(self) -> dict[str, float]:
        """The window's seconds by what the loop waited on (see the module docstring). A
        measurement that started before the window (beside the previous batch's) counts with
        its part inside it; its GPU time is taken to lie there, as the runs follow the builds."""
        exposed = sum(max(0.0, s.seconds - s.overlap(self.measure)) for s in self.searches)
        wall = self.window.seconds
        inside = self.measure.overlap(self.window)
        run = min(self.run, inside)
        build = min(self.build, inside - run)
        idle = max(0.0, wall - exposed - build - run)
        return {"search": exposed, "build": build, "gpu": run, "idle": idle}


def round_record(
    rnd: int,
    done: int,
    costs: Sequence[float],
    best_cost: float,
    flop: float,
    times: RoundTimes,
) -> dict:
    """One history record: counts, the best cost so far (seconds) and its GFLOP/s, seconds per
    activity (`search_s` ... `model_s`, which may overlap), the wall time and its split,
    trials/s and how busy the GPU was."""
    n_ok = sum(math.isfinite(c) for c in costs)
    wall = times.window.seconds
    return {
        "round": rnd,
        "trials": done,
        "ok": n_ok,
        "best_us": best_cost * 1e6,
        "gflops": flop / best_cost / 1e9 if math.isfinite(best_cost) else 0.0,
        "batch_best_us": min(costs) * 1e6 if n_ok else math.inf,
        "search_s": times.search,
        "build_s": times.build,
        "run_s": times.run,
        "measure_s": times.build + times.run,
        "model_s": times.model,
        "total_s": wall,
        "wall_s": wall,
        "split_s": times.split(),
        "trials_per_s": len(costs) / wall if wall > 0 else 0.0,
        "gpu_busy": min(1.0, times.run / wall) if wall > 0 else 0.0,
    }


def progress_line(rec: dict, batch_size: int) -> str:
    """The line printed after a round."""
    return (
        f"[round {rec['round']:3d}] trials {rec['trials']:5d}  ok {rec['ok']:3d}/{batch_size:3d}"
        f"  best {rec['best_us']:9.2f} us  {rec['gflops']:8.1f} GFLOP/s"
        f"  | {rec['trials_per_s']:6.1f} trials/s  GPU busy {rec['gpu_busy']:4.0%}"
        f"  | search {rec['search_s']:5.2f}s"
        f"  build {rec['build_s']:5.2f}s  run {rec['run_s']:5.2f}s  model {rec['model_s']:5.2f}s"
    )
