"""Reading a record log for a command: its valid records (keys that name a DAG, steps that
replay, costs that are positive finite times), or one line saying why the file holds none;
skipped lines are counted in one warning line."""

from __future__ import annotations

import os
import sys

from autosched.errors import AutoschedError
from autosched.record_check import Skipped, skip_summary
from autosched.records import Record, load_records


def read_log(path: str) -> list[Record]:
    """Every valid record of the log at `path`; AutoschedError when it holds none."""
    skipped: list[Skipped] = []
    records = list(
        load_records(path, on_skip=lambda lineno, why: skipped.append((lineno, why)), replay=True)
    )
    if not records:
        raise AutoschedError(_why_no_records(path, skipped))
    if skipped:
        print(f"autosched: warning: {skip_summary(path, skipped)}", file=sys.stderr)
    return records


def _why_no_records(path: str, skipped: list[Skipped]) -> str:
    if not skipped:
        if os.path.getsize(path) == 0:
            return f"{path} is empty: no records to read"
        return f"{path} holds no records, only blank lines"
    lineno, why = skipped[0]
    if len(skipped) == 1:
        return f"{path} is not a record log: its one line is not a record: {why}"
    return (
        f"{path} is not a record log: none of its {len(skipped)} lines is a record "
        f"(line {lineno}: {why})"
    )
