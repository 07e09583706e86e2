"""Whether a decoded record can be trusted: its workload key builds a DAG, and (when asked)
its steps replay on that DAG. Records that fail are skipped by their readers, never shown as
correct or plotted, and counted in one warning line (`skip_summary`).

A record's costs are checked where the line is decoded (`records.decode`); this module holds
the checks that need the DAG, each key's DAG built once per reader.
"""

from __future__ import annotations

from collections.abc import Sequence

from autosched.schedule.compute_dag import ComputeDAG

# (line number, reason) of a skipped line
Skipped = tuple[int, str]


class RecordChecker:
    """The DAG of each workload key a log names (or why the key has none), and replay checks
    on it. One checker per read of a log: a key's DAG is built once."""

    def __init__(self) -> None:
        self._dags: dict[str, ComputeDAG | str] = {}

    def dag(self, key: str, serialized: dict | None = None) -> ComputeDAG | str:
        """The DAG of `key` (from the serialised DAG a record carries, else the registered
        workload), or the one-line reason the key builds none."""
        held = self._dags.get(key)
        if held is None:
            held = self._dags[key] = _build_dag(key, serialized)
        return held

    def key_problem(self, key: str, serialized: dict | None = None) -> str | None:
        """Why `key` names no DAG, or None when it does."""
        held = self.dag(key, serialized)
        return held if isinstance(held, str) else None

    def replay_problem(
        self, key: str, steps: Sequence, serialized: dict | None = None
    ) -> str | None:
        """Why the steps do not replay on `key`'s DAG, or None when they do."""
        held = self.dag(key, serialized)
        if isinstance(held, str):
            return held
        try:
            held.replay_steps(steps)
        except Exception as exc:  # noqa: BLE001 (any failure means: not this DAG's state)
            return f"its steps do not replay on the task's DAG ({type(exc).__name__}: {exc})"
        return None


def _build_dag(key: str, serialized: dict | None) -> ComputeDAG | str:
    try:
        if serialized is not None:
            return ComputeDAG.from_serialized(serialized, key)
        return ComputeDAG.from_workload_key(key)
    except Exception as exc:  # noqa: BLE001 (a user's workload function fails in many ways)
        return f"workload key {key!r:.120} names no DAG here ({type(exc).__name__}: {exc})"


def skip_summary(path: str, skipped: Sequence[Skipped]) -> str:
    """One line counting the skipped lines of a log and naming the first:
    `skipped 3 lines of log.json that are not valid records (first: line 4: ...)`."""
    lineno, why = skipped[0]
    if len(skipped) == 1:
        return f"skipped 1 line of {path} that is not a valid record (line {lineno}: {why})"
    return (
        f"skipped {len(skipped)} lines of {path} that are not valid records "
        f"(first: line {lineno}: {why})"
    )
