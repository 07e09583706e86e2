"""The seam between a search and where its kernels are built and run: `MeasureContext`.

`LocalMeasureContext` builds on this host and runs on its GPUs (one runner, or a `RunnerPool`
over several); autosched's `DaskMeasureContext` sends the same artifacts to the GPU workers of a
cluster. A measurer takes either and gets the same results, so the search never knows which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from measure.artifact import KernelArtifact
    from measure.context import MeasureResult
    from measure.reference import Reference


@runtime_checkable
class MeasureContext(Protocol):
    """Builds and runs batches of kernels. Thread-safe: the tasks of a model tuned at once
    measure through one context."""

    def measure_batch(
        self,
        artifacts: Sequence[KernelArtifact],
        references: Mapping[str, Reference] | None = None,
        cost_bound: float | None = None,
    ) -> list[MeasureResult]:
        """Build and run every artifact (checked against its reference, by `reference_id`);
        one result per artifact, in order, a failure as a result that says why. With a
        `cost_bound` (seconds per run), a candidate shown slower than it may stop timing with
        fewer repeats (`MeasureResult.stopped_early`); None times every candidate in full."""
        ...

    def gpu_count(self) -> int:
        """How many candidates it can run at once (GPUs, or a cluster's GPU workers now); at
        least 1."""
        ...

    def close(self) -> None:
        """Stop its build and run processes."""
        ...
