"""The parser and `main`: the command table, and the one-line error report every failure a
user can cause ends in (`autosched: ...` on stderr, exit status 2)."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import NoReturn

from autosched.cli import curve, dag, doctor, model, resume, show, tune
from autosched.cli.arguments import Command, HelpFormatter
from autosched.errors import AutoschedError
from autosched.records import MalformedRecordWarning

# The subcommands, in the order --help lists them.
COMMANDS: tuple[Command, ...] = (
    tune.COMMAND,
    resume.COMMAND,
    show.COMMAND,
    curve.COMMAND,
    dag.COMMAND,
    model.TASKS_COMMAND,
    model.TUNE_MODEL_COMMAND,
    doctor.COMMAND,
)

USAGE_ERROR = 2
BROKEN_PIPE = 128 + 13  # what a shell reports for a process killed by SIGPIPE
INTERRUPTED = 128 + 2  # SIGINT, as a shell reports it


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise AutoschedError (one line, not the usage
    block), and whose exits flush stdout where a broken pipe can still be caught."""

    def error(self, message: str) -> NoReturn:
        raise AutoschedError(f"{message} (see '{self.prog} --help')")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message.rstrip("\n"), file=sys.stderr)
        sys.stdout.flush()
        raise SystemExit(status)


def build_parser() -> Parser:
    """The `autosched` parser with one subparser per entry of COMMANDS."""
    parser = Parser(
        prog="autosched",
        description="Template-free auto-scheduler for CUDA",
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            epilog=command.epilog or None,
            formatter_class=HelpFormatter,
        )
        command.add_arguments(p)
        p.set_defaults(command=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status (2 for any error a user can cause)."""
    try:
        ns = build_parser().parse_args(argv)
        with warnings.catch_warnings():
            # Commands read logs through record_log, which reports skipped lines once.
            warnings.simplefilter("ignore", MalformedRecordWarning)
            warnings.showwarning = _show_warning
            status = ns.command.run(ns)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status
    except AutoschedError as exc:
        print(f"autosched: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE
    except KeyboardInterrupt:
        print("autosched: interrupted", file=sys.stderr)
        return INTERRUPTED


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Python warnings in the command line's own one-line format."""
    print(f"autosched: warning: {message}", file=sys.stderr)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a file (tests, embedding)
        pass
