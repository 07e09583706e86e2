"""Registered workloads: a workload key (name + args) re-creates the same DAG in any process."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any, TypeVar, overload

from autosched.errors import TEError, WorkloadError
from autosched.te.serialize import load_tensors

WORKLOADS: dict[str, Callable[..., list]] = {}
WorkloadFn = TypeVar("WorkloadFn", bound=Callable[..., list])


@overload
def register_workload(func: WorkloadFn, *, name: str | None = None) -> WorkloadFn: ...


@overload
def register_workload(
    func: None = None, *, name: str | None = None
) -> Callable[[WorkloadFn], WorkloadFn]: ...


def register_workload(
    func: WorkloadFn | None = None, *, name: str | None = None
) -> WorkloadFn | Callable[[WorkloadFn], WorkloadFn]:
    """Decorator: register a function returning [input and output tensors] under its name."""

    def wrap(f: WorkloadFn) -> WorkloadFn:
        key = name or f"{f.__module__}:{f.__qualname__}"
        WORKLOADS[key] = f
        WORKLOADS.setdefault(f.__name__, f)
        f.workload_name = key  # type: ignore[attr-defined]
        return f

    return wrap(func) if func is not None else wrap


def _jsonable(args: Any) -> Any:
    if isinstance(args, (list, tuple)):
        return [_jsonable(a) for a in args]
    if isinstance(args, (int, float, str, bool)) or args is None:
        return args
    raise WorkloadError(
        f"workload argument {args!r} is not JSON-serialisable (use ints, floats, strings, tuples)"
    )


def make_workload_key(func: Callable | str, args: Any) -> str:
    """The key of a registered function called with `args`."""
    name = func if isinstance(func, str) else getattr(func, "workload_name", None)
    if name is None:
        raise WorkloadError(
            f"{getattr(func, '__name__', func)!r} is not registered; decorate it with "
            "@autosched.register_workload"
        )
    return json.dumps([name, *_jsonable(list(args))])


def lookup(name: str) -> Callable[..., list]:
    """The registered function of a name, importing its module when it is `module:qualname`."""
    if name not in WORKLOADS and ":" in name:
        module = name.split(":")[0]
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise WorkloadError(
                f"workload {name!r}: cannot import module {module!r} ({exc})"
            ) from exc
    if name not in WORKLOADS:
        raise WorkloadError(
            f"no workload named {name!r} is registered; known: {sorted(WORKLOADS)[:20]}"
        )
    return WORKLOADS[name]


# A task that allows TF32 Tensor Cores for its float32 matrix products (`SearchTask.allow_tf32`)
# has the plain key behind this prefix: the same DAG, but other programs, other tolerances and
# other costs, so its records, model data and references never mix with the float32 task's.
TF32_KEY_PREFIX = "tf32:"


def tf32_workload_key(key: str, allow_tf32: bool) -> str:
    """The workload key of the task of `key`'s DAG with TF32 allowed or not."""
    base, _ = split_workload_key(key)
    return TF32_KEY_PREFIX + base if allow_tf32 else base


def split_workload_key(key: str) -> tuple[str, bool]:
    """(the plain workload key, whether the key's task allows TF32)."""
    if key.startswith(TF32_KEY_PREFIX):
        return key[len(TF32_KEY_PREFIX) :], True
    return key, False


# workload key -> serialised DAG (te.serialize), as record logs carry them
SERIALIZED_DAGS: dict[str, dict] = {}


def remember_serialized(key: str, data: dict) -> None:
    """Keep the serialised DAG of a workload key (read from a record log), so that the key can
    be rebuilt in this process without the module that defined the workload."""
    SERIALIZED_DAGS.setdefault(key, data)


def workload_tensors(key: str) -> list:
    """The tensors of a workload key: its registered function called with the key's arguments,
    else the serialised DAG remembered for the key."""
    plain = split_workload_key(key)[0]  # a TF32 task's key names its plain workload
    remembered = SERIALIZED_DAGS.get(key, SERIALIZED_DAGS.get(plain))
    try:
        name, *args = json.loads(plain)
    except (ValueError, TypeError) as exc:
        if remembered is not None:
            return load_tensors(remembered)
        raise WorkloadError(f"malformed workload key {key!r}") from exc
    try:
        func = lookup(name)
    except WorkloadError:
        if remembered is not None:
            return load_tensors(remembered)
        raise
    tensors = func(*_tuplify(args))
    if not isinstance(tensors, (list, tuple)):
        raise TEError(
            f"workload {name!r} returned {type(tensors).__name__} {tensors!r:.80}; a workload "
            "must return a list of its tensors, inputs then outputs"
        )
    return list(tensors)


def _tuplify(v: Any) -> Any:
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v
