"""The workload a command names: a suite name with optional shape arguments, a registered
workload name with its arguments, or `module:function` with JSON arguments."""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from autosched.errors import AutoschedError
from autosched.task.workload_registry import WORKLOADS
from autosched.task.workloads import SUITE

WORKLOAD_HELP = (
    "a suite workload, optionally followed by its shape arguments; a registered workload "
    "followed by its arguments; or module:function (the module may be a .py file in the "
    "current directory) followed by the function's arguments as JSON values"
)


@dataclass(frozen=True)
class Workload:
    """A workload function and the arguments it is called with. `name` is the name the task's
    workload key records (the registered name, or `module:function`)."""

    name: str
    func: Callable
    args: tuple
    note: str = ""

    def describe(self) -> str:
        """`matmul(N=64, M=48, K=32)` plus where the arguments came from."""
        params = _parameters(self.func)
        if len(params) == len(self.args):
            shown = ", ".join(f"{p}={a!r}" for p, a in zip(params, self.args, strict=True))
        else:  # defaults or *args: the values alone
            shown = ", ".join(map(repr, self.args))
        return f"workload {self.name}({shown}){self.note}"

    def task(self, allow_tf32: bool = False):
        """The SearchTask (`allow_tf32`: see SearchTask); an error of the workload function is
        reported as one line."""
        from autosched.task.search_task import SearchTask

        try:
            return SearchTask(self.func, self.args, allow_tf32=allow_tf32)
        except AutoschedError:
            raise
        except Exception as exc:  # the user's function failed on these arguments
            shown = ", ".join(map(repr, self.args))
            raise AutoschedError(
                f"{self.name}({shown}) raised {type(exc).__name__}: {exc}"
            ) from None


def resolve(workload: str, args: list[str]) -> Workload:
    """The Workload `workload` and its command-line `args` name, or AutoschedError."""
    if workload in SUITE:
        return _suite(workload, args)
    if ":" in workload:
        return _module_function(workload, args)
    if workload in WORKLOADS:
        return _registered(workload, WORKLOADS[workload], args)
    raise AutoschedError(
        f"unknown workload {workload!r}: give a suite workload ({', '.join(SUITE)}) "
        "or module:function followed by its arguments"
    )


def suite_table() -> str:
    """The suite's workloads, their parameters and default sizes, one per line (for --help)."""
    width = max(map(len, SUITE))
    lines = ["suite workloads (default sizes; give the numbers after the name to change them):"]
    for name, (registered, full, _) in SUITE.items():
        params = " ".join(_parameters(WORKLOADS[registered]))
        lines.append(f"  {name:<{width}}  {params} = {' '.join(map(str, full))}")
    return "\n".join(lines)


def _suite(name: str, args: list[str]) -> Workload:
    registered, full, _ = SUITE[name]
    func = WORKLOADS[registered]
    if not args:
        params = " ".join(_parameters(func))
        return Workload(registered, func, full, f": the suite's size (give {params} to change it)")
    values = tuple(_parse_json(a) for a in args)
    _check_count(name, func, values)
    for param, text, value in zip(_parameters(func), args, values, strict=True):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise AutoschedError(f"{name}: {param}={text} is not a non-negative integer")
    return Workload(registered, func, values, ": the given shape")


def _registered(name: str, func: Callable, args: list[str]) -> Workload:
    values = tuple(_parse_json(a) for a in args)
    _check_count(name, func, values)
    return Workload(name, func, values)


def resolve_function(spec: str, what: str, example: str) -> Callable:
    """The function a `module:function` spec names (`what` and `example` word the errors);
    the module is looked up in the current directory too. One clear AutoschedError for each
    way the spec can be wrong."""
    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname:
        raise AutoschedError(
            f"{what} {spec!r}: write module:function, both parts non-empty (e.g. {example})"
        )
    module = _import(module_name)
    try:
        func = functools.reduce(getattr, qualname.split("."), module)
    except AttributeError:
        raise AutoschedError(
            f"module {module_name!r} ({_where(module)}) has no function {qualname!r}"
        ) from None
    if not callable(func):
        raise AutoschedError(f"{spec} is a {type(func).__name__}, not a function")
    return func


def _module_function(workload: str, args: list[str]) -> Workload:
    func = resolve_function(workload, "workload", "mymodule:my_workload")
    if not hasattr(func, "workload_name"):
        raise AutoschedError(
            f"{workload} is not a registered workload: decorate it with "
            "@autosched.register_workload"
        )
    values = tuple(_parse_json(a) for a in args)
    _check_count(workload, func, values)
    return Workload(getattr(func, "workload_name", workload), func, values)


def _import(module_name: str):
    """Import a workload module; the current directory is searched too (the `autosched`
    console script does not put it on sys.path)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):
            raise AutoschedError(
                f"no module named {module_name!r} (looked in the current directory and on sys.path)"
            ) from None
        raise AutoschedError(f"importing module {module_name!r} failed: {exc}") from None
    except Exception as exc:  # the module itself is broken: a SyntaxError, an error at import
        raise AutoschedError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None


def _where(module) -> str:
    return getattr(module, "__file__", None) or "built in"


def _parse_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        raise AutoschedError(
            f"argument {text!r} is not a JSON value (numbers as 3 or 0.5, strings in double "
            "quotes, lists as [1, 2])"
        ) from None


def _plain(signature: inspect.Signature) -> inspect.Signature:
    """`signature` as a message shows it: names and defaults, without type annotations."""
    return signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )


def _parameters(func: Callable) -> list[str]:
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return []


def _check_count(name: str, func: Callable, values: tuple) -> None:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # no signature to check against: the call itself will tell
        return
    try:
        signature.bind(*values)
    except TypeError as exc:
        raise AutoschedError(
            f"{name}{_plain(signature)} cannot take the {len(values)} arguments given: {exc}"
        ) from None
