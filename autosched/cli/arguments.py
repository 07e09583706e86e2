"""What the commands share: the Command record, argument types, the help formatter, and the
search options of `tune` and `resume`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one-line help, how it adds its arguments, and what it runs
    (returning the exit status)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    epilog: str = ""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help (unless it has none), descriptions and epilogs
    printed as written (the suite's table keeps its columns)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _bounded_int(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _bounded_int(text, 0, "a non-negative integer")


def _bounded_int(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def add_search_arguments(parser: argparse.ArgumentParser, trials: int) -> None:
    """The options of a search: trials, measurements per round, worker processes, seed."""
    parser.add_argument("--trials", type=positive_int, default=trials, help="measurements in all")
    parser.add_argument(
        "--per-round", type=positive_int, default=64, help="measurements per search round"
    )
    parser.add_argument(
        "--n-jobs",
        type=positive_int,
        default=None,
        help="search worker processes (default: one per core)",
    )
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the search's random choices"
    )
    parser.add_argument(
        "--no-pretrained",
        action="store_true",
        help="a random first round (default: ranked by the cost model shipped in the package, "
        "pre-trained on other workloads)",
    )
    parser.add_argument(
        "--population",
        type=positive_int,
        default=None,
        help="states the evolutionary search evolves per round, at most (default: "
        "SearchParams.population); fewer make a round's search cheaper",
    )


def add_tf32_argument(parser: argparse.ArgumentParser) -> None:
    """`--tf32`: the task's float32 matrix products may use TF32 Tensor Cores (off: exact
    float32 arithmetic)."""
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="let float32 matrix products use TF32 Tensor Cores (operands rounded to a 10-bit "
        "mantissa; results checked with a TF32 tolerance; logged as a task of its own)",
    )


def search_params(ns: argparse.Namespace):
    """The SearchParams the search options ask for."""
    from autosched.search.policy import SearchParams

    population = {} if ns.population is None else {"population": ns.population}
    return SearchParams(
        n_jobs=ns.n_jobs, seed=ns.seed, pretrained=not ns.no_pretrained, **population
    )
