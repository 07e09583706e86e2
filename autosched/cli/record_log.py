"""Reading a record log for a command: all its records, or one line saying why the file is not
a record log; malformed lines are counted and reported as one warning line."""

from __future__ import annotations

import os
import sys

from autosched.errors import AutoschedError
from autosched.records import Record, load_records


def read_log(path: str) -> list[Record]:
    """Every record of the log at `path`; AutoschedError when it holds none."""
    skipped: list[tuple[int, str]] = []
    records = list(load_records(path, on_skip=lambda lineno, why: skipped.append((lineno, why))))
    if not records:
        raise AutoschedError(_why_no_records(path, skipped))
    if skipped:
        lineno, why = skipped[0]
        print(
            f"autosched: warning: skipped {len(skipped)} malformed "
            f"line{'s' if len(skipped) > 1 else ''} of {path} (first: line {lineno}: {why})",
            file=sys.stderr,
        )
    return records


def _why_no_records(path: str, skipped: list[tuple[int, str]]) -> str:
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
