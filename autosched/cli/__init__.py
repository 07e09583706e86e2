"""The `autosched` command line: tune, resume, show, curve, dag (one module per command).

`main` parses the arguments and turns every error a user can cause into one line on stderr
(`autosched: ...`, exit status 2).
"""

from autosched.cli.app import main
from autosched.cli.summary import time_split

__all__ = ["main", "time_split"]
