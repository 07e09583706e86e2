"""Checks of the values users pass at autosched's entry points (options, task arguments): a
wrong value raises OptionError naming the argument, what it got and what it takes, instead of
being read as a default or failing deep inside."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from autosched.errors import OptionError


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.60}"


def integer(name: str, value: Any, least: int) -> int:
    """`value` when it is an integer >= `least` (a bool is not one), else OptionError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        what = "a positive integer" if least == 1 else f"an integer >= {least}"
        raise OptionError(f"{name} must be {what}, got {_shown(value)}")
    return int(value)


def optional_integer(name: str, value: Any, least: int) -> int | None:
    """None, or `integer(name, value, least)`."""
    return None if value is None else integer(name, value, least)


def boolean(name: str, value: Any) -> bool:
    """`value` when it is True or False (numpy's too), else OptionError: a string such as
    "no" is truthy, and reading it as True would be a silent wrong answer."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise OptionError(f"{name} must be True or False, got {_shown(value)}")


def optional_number(name: str, value: Any, least: float) -> float | None:
    """None, or `value` as a float when it is a finite real number >= `least` (a bool is not
    one), else OptionError."""
    if value is None:
        return None
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not real or not np.isfinite(value) or value < least:
        raise OptionError(f"{name} must be None or a number >= {least:g}, got {_shown(value)}")
    return float(value)
