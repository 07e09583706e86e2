"""The seams of the tuning loop: what a search policy and a measurer must offer.

`search.auto_schedule.run_trials` drives every search through these two interfaces, so the
sketch search (`SketchPolicy`), a user's stochastic schedule space (`TraceSearchPolicy`) and an
AutoTVM-style template tuner (`spaces.tuners.Tuner`) share one round loop, and any of them can be
measured by the GPU measurer (`ProgramMeasurer`) or by a test's simulated one. The cost model's
interface is `costmodel.CostModel` (it lives there because costmodel never imports autosched);
the interface of where kernels are built and run is `measure.MeasureContext`.

`TaskTuner` is what the task scheduler tunes each task of a model through. All are
`typing.Protocol`s: a class implements one by having its methods, without inheriting, and
`isinstance(x, SearchPolicy)` checks that the methods are there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from autosched.records import MeasureInput, MeasureRecordResult
    from autosched.schedule.loop_state import State

# Called after every measured batch with its inputs and results, in order (e.g. RecordToFile).
MeasureCallback = Callable[[Sequence["MeasureInput"], Sequence["MeasureRecordResult"]], None]


@runtime_checkable
class SearchPolicy(Protocol):
    """Proposes States to measure and learns from their measured costs, one round at a time.

    The tuning loop calls `search_one_round`, measures what it returns, hands every cost back
    through `add_measured` and then the whole batch through `update_model`. A policy never hands
    out a State twice (nor one it was told was measured)."""

    # what the last round did (times and counts, by name); empty when the policy keeps none
    last_round: dict[str, float]

    def search_one_round(self, num_measure: int) -> list[State]:
        """Up to `num_measure` States never handed out before; empty when the space is spent."""
        ...

    def add_measured(self, state: State, cost: float) -> None:
        """Record a measured State's mean cost in seconds (inf for a failure)."""
        ...

    def update_model(self, states: Sequence[State], costs: Sequence[float]) -> None:
        """Learn from a measured batch (costs in seconds, inf for a failure)."""
        ...

    def best_state(self) -> tuple[float, State] | None:
        """(cost, State) of the fastest correct State measured or preloaded, or None."""
        ...


@runtime_checkable
class Measurer(Protocol):
    """Builds and times States for one task.

    `measure` returns one result per State, in order, and never raises for one State's failure
    (a failed State's result says why); after each call it runs `callbacks(inputs, results)` and
    leaves in `last_times` how the call's wall-clock seconds split into "build" and "run".
    The pipelined tuning loop calls `measure` from two threads at once (a batch starts to
    compile beside the end of the one before) and reads `last_times` in the calling thread
    right after its call: a measurer keeps it per thread to report each call's own."""

    callbacks: list[MeasureCallback]

    @property
    def last_times(self) -> dict[str, float]: ...

    def measure(self, states: Sequence[State]) -> list[MeasureRecordResult]:
        """Build and run every State; one result per State, in order."""
        ...

    def close(self) -> None:
        """Release what measuring holds (build and run processes); measuring again after it
        is not supported."""
        ...


@runtime_checkable
class TaskTuner(Protocol):
    """The task scheduler's handle on one task of a model (`tune_model.PolicyTuner`, which runs
    the tuning loop on the task's own policy; tests plug in simulated latency curves)."""

    # the best cost so far after each of the task's trials already logged (resuming); may be []
    curve: list[float]

    def tune(self, n: int) -> tuple[int, float]:
        """Measure up to n more states; (states measured, best cost so far). Fewer than n
        measured means the task's space is exhausted."""
        ...

    def best(self) -> tuple[float, State] | None:
        """(cost, State) of the best correct state found or preloaded, or None."""
        ...
