"""Exceptions a user can cause. Each names the problem in its message."""

from __future__ import annotations


class AutoschedError(Exception):
    """Base class of every error autosched raises on purpose."""


class TEError(AutoschedError, ValueError):
    """A tensor expression was built wrongly."""


class DTypeError(TEError):
    """Unknown dtype, or two operands of different dtypes without an explicit cast."""


class IndexCountError(TEError):
    """A tensor was indexed with the wrong number of indices."""


class ReduceAxisError(TEError):
    """A reduce axis was used where it is not allowed."""


class ScheduleError(AutoschedError, ValueError):
    """A transform step cannot be applied to a state."""


class LoweringError(AutoschedError):
    """A state cannot be lowered to a loop nest (or breaks a GPU limit)."""


class WorkloadError(AutoschedError, KeyError):
    """A workload key does not name a registered workload."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class RecordError(AutoschedError, ValueError):
    """A measurement record is malformed."""


class OptionError(AutoschedError, ValueError):
    """An argument or option has a value autosched cannot use; the message names the argument,
    what it got and what it takes."""


class ModelError(AutoschedError, ValueError):
    """A PyTorch model or its example inputs cannot be traced or run (the front end)."""
