"""The `autosched` command line: tune, resume, show, curve, dag, tasks, tune-model, doctor (one
module per command).

`main` parses the arguments and turns every error a user can cause into one line on stderr
(`autosched: ...`, exit status 2). The commands load here, inside `main`: a Ctrl-C while they
load ends in one line too, not in an import traceback.
"""

from __future__ import annotations

import sys

from autosched.cli.summary import time_split

INTERRUPTED = 128 + 2  # what a shell reports for a process ended by SIGINT


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status (2 for any error a user can cause)."""
    try:
        from autosched.cli.app import main as run
    except KeyboardInterrupt:
        print("autosched: interrupted", file=sys.stderr)
        return INTERRUPTED
    return run(argv)


__all__ = ["main", "time_split"]
