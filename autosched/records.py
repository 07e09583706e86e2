"""Measurement records: one JSON object per line (task, steps, result).

Appending is one `write` + flush per line, so a crash tears at most the last line. Reading
validates: a torn line, a cost that is not a positive finite time, a workload key that names no
DAG, steps that do not replay (when asked) are skipped, and one warning counts them. A log whose
name ends in `.gz` is written as gzip, one gzip member per append (concatenated members are one
valid gzip file).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from autosched.errors import RecordError
from autosched.record_check import RecordChecker, Skipped, skip_summary
from autosched.schedule.compute_dag import ComputeDAG
from autosched.task.workload_registry import remember_serialized
from measure import MeasureErrorKind

RECORD_VERSION = 1
RECORD_FIELDS = ("v", "task", "steps", "result")
GZIP_MAGIC = b"\x1f\x8b"

# JSON's names of the types `json.loads` returns, for messages about what a line holds instead.
_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_ERROR_KINDS = frozenset(int(kind) for kind in MeasureErrorKind)


class MalformedRecordWarning(UserWarning):
    """Lines of a record log that are not records to trust were skipped (torn writes, garbage,
    impossible costs, unknown workload keys, steps that do not replay); one warning counts
    them."""


@dataclass(frozen=True)
class MeasureInput:
    """What was measured: the task's workload key and the state's step records.

    `dag` is the task's serialised DAG (`ComputeDAG.serialized()`): a log carries it in the first
    record of each task that a `RecordToFile` writes, so that the log can be read, shown and
    resumed in a process that does not have the workload's module. `config` is the config of a
    template task (`autosched.spaces`) the state was made from: its index and knob values.
    `trace` is the trace (`Trace.to_json()`) of the stochastic schedule that made the state,
    when a trace search measured it.
    """

    workload_key: str
    steps: tuple
    target: str = "cuda"
    hardware: dict = field(default_factory=dict)
    dag: dict | None = field(default=None, compare=False, repr=False)
    config: dict | None = field(default=None, compare=False)
    trace: dict | None = field(default=None, compare=False, repr=False)

    @property
    def state(self):
        """Rebuild the State (from the registered workload, or the DAG its log carried)."""
        if self.dag is not None:
            dag = ComputeDAG.from_serialized(self.dag, self.workload_key)
        else:
            dag = ComputeDAG.from_workload_key(self.workload_key)
        return dag.replay_steps(self.steps)


@dataclass(frozen=True)
class MeasureRecordResult:
    """How it went: costs in seconds (one per repeat), error kind and message, timings;
    `stopped_early` when the timing stopped at the search's cost bound (fewer repeats)."""

    costs: tuple[float, ...]
    error_kind: int = 0
    error_msg: str = ""
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    timestamp: float = 0.0
    stopped_early: bool = False

    @property
    def ok(self) -> bool:
        return self.error_kind == MeasureErrorKind.NO_ERROR and len(self.costs) > 0

    @property
    def mean_cost(self) -> float:
        return sum(self.costs) / len(self.costs) if self.ok else float("inf")


def encode(inp: MeasureInput, res: MeasureRecordResult, with_dag: bool = False) -> str:
    """One record as a JSON line (no trailing newline); `with_dag` adds the serialised DAG."""
    task: dict = {"workload_key": inp.workload_key, "target": inp.target, "hardware": inp.hardware}
    if with_dag and inp.dag is not None:
        task["dag"] = inp.dag
    if inp.config is not None:
        task["config"] = inp.config
    if inp.trace is not None:
        task["trace"] = inp.trace
    result = {
        "costs": list(res.costs),
        "error_kind": int(res.error_kind),
        "error_name": MeasureErrorKind(res.error_kind).name,
        "error_msg": res.error_msg[:500],
        "build_s": round(res.build_seconds, 4),
        "run_s": round(res.run_seconds, 4),
        "timestamp": res.timestamp,
    }
    if res.stopped_early:  # written only when true: a record without it was timed in full
        result["stopped_early"] = True
    return json.dumps(
        {
            "v": RECORD_VERSION,
            "task": task,
            "steps": [list(s) for s in inp.steps],
            "result": result,
        },
        separators=(",", ":"),
    )


def decode(line: str) -> tuple[MeasureInput, MeasureRecordResult]:
    """Parse one line; raises RecordError naming what is wrong."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordError(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        kind = _JSON_TYPE_NAMES.get(type(obj), "null")
        raise RecordError(f"a JSON {kind}, not a record object")
    if not any(name in obj for name in RECORD_FIELDS):
        raise RecordError(f"a JSON object without a record's fields {', '.join(RECORD_FIELDS)}")
    try:
        if obj.get("v") != RECORD_VERSION:
            raise RecordError(f"unsupported record version {obj.get('v')!r}")
        t, r = obj["task"], obj["result"]
        inp = MeasureInput(
            t["workload_key"],
            tuple(_tuplify(s) for s in obj["steps"]),
            t.get("target", "cuda"),
            t.get("hardware", {}),
            t.get("dag"),
            t.get("config"),
            t.get("trace"),
        )
        if inp.dag is not None:
            remember_serialized(inp.workload_key, inp.dag)
        res = MeasureRecordResult(
            tuple(float(c) for c in r["costs"]),
            int(r["error_kind"]),
            r.get("error_msg", ""),
            float(r.get("build_s", 0)),
            float(r.get("run_s", 0)),
            float(r.get("timestamp", 0)),
            bool(r.get("stopped_early", False)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"missing or malformed field ({exc})") from None
    problem = result_problem(res)
    if problem is not None:
        raise RecordError(problem)
    return inp, res


def result_problem(res: MeasureRecordResult) -> str | None:
    """Why a result cannot be true, or None: an unknown error kind, or a measurement without
    error whose costs are missing, zero, negative, NaN or infinite."""
    if res.error_kind not in _ERROR_KINDS:
        return f"unknown error kind {res.error_kind}"
    if res.error_kind != MeasureErrorKind.NO_ERROR:
        return None
    if not res.costs:
        return "a measurement without error but without costs"
    bad = next((c for c in res.costs if not (math.isfinite(c) and c > 0)), None)
    if bad is not None:
        return f"cost {bad!r} s is not a positive, finite time"
    return None


def _tuplify(v):
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


def is_gzip(path: str) -> bool:
    """True when the file starts with gzip's magic bytes."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def seal_torn_line(path: str) -> bool:
    """Append a newline when the file does not end with one; True when it did not.

    A gzip log is left alone: each append is a gzip member of its own, never a torn text line.
    """
    if is_gzip(path):
        return False
    with open(path, "rb+") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return False
        f.write(b"\n")
        return True


class RecordToFile:
    """Measure callback: append one line per measurement to `path` and flush.

    A path ending in `.gz` gets one gzip member per call, which `load_records` reads back. The
    first record written of each task carries the task's serialised DAG. Calls from several
    threads (batches measured at once) append one after the other.
    """

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self.compressed = self.path.endswith(".gz")
        self._dag_written: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, inputs, results) -> None:
        with self._lock:
            self._append(inputs, results)

    def _append(self, inputs, results) -> None:
        lines = []
        for inp, res in zip(inputs, results, strict=True):
            first = inp.dag is not None and inp.workload_key not in self._dag_written
            if first:
                self._dag_written.add(inp.workload_key)
            lines.append(encode(inp, res, with_dag=first) + "\n")
        text = "".join(lines)
        if not self.compressed and os.path.exists(self.path):
            seal_torn_line(self.path)  # a crash may have torn the last line: end it first
        with open(self.path, "ab") as f:
            data = text.encode("utf-8")
            f.write(gzip.compress(data) if self.compressed else data)
            f.flush()
            os.fsync(f.fileno())


OnSkip = Callable[[int, str], None]
Record = tuple[MeasureInput, MeasureRecordResult]


def _open_log(path: str):
    """The log as text lines, through gzip when it is gzip data; RecordError when unreadable."""
    if not os.path.exists(path):
        raise RecordError(f"record file {path!r} does not exist")
    if os.path.isdir(path):
        raise RecordError(f"{path} is a directory, not a record file")
    try:
        compressed = is_gzip(path)
        if not compressed and path.endswith(".gz") and os.path.getsize(path) > 0:
            raise RecordError(f"{path} is named .gz but is not gzip-compressed data")
        if compressed:
            return gzip.open(path, "rt", encoding="utf-8")
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise RecordError(f"cannot read {path}: {exc.strerror or exc}") from None


def load_records(
    path: str, on_skip: OnSkip | None = None, replay: bool = False
) -> Iterator[Record]:
    """Yield (input, result) per valid record of a log (plain text or gzip, told by its bytes).

    A line that is not a record to trust is skipped: torn or malformed, a cost that is not a
    positive finite time, a workload key that names no DAG here (unknown, or the wrong number
    of arguments) and, with `replay`, steps that do not replay on the task's DAG (about a
    millisecond a record). `on_skip(line_number, reason)` is called per skipped line when
    given; else one MalformedRecordWarning counts them once the log is read. A file that
    cannot be a record log (missing, a directory, not UTF-8 text, a `.gz` name without gzip
    data) raises RecordError.
    """
    path = str(path)
    skipped: list[Skipped] = []
    skip = on_skip or (lambda lineno, why: skipped.append((lineno, why)))
    for _, inp, res in _checked(path, skip, RecordChecker(), replay):
        yield inp, res
    _warn_skipped(path, skipped)


def _checked(
    path: str, skip: OnSkip, checker: RecordChecker, replay: bool
) -> Iterator[tuple[int, MeasureInput, MeasureRecordResult]]:
    """(line number, input, result) of each record that decodes and whose key names a DAG
    (and, with `replay`, whose steps replay on it); `skip` hears of every other line."""
    for lineno, inp, res in _decoded(path, skip):
        if replay:
            problem = checker.replay_problem(inp.workload_key, inp.steps, inp.dag)
        else:
            problem = checker.key_problem(inp.workload_key, inp.dag)
        if problem is None:
            yield lineno, inp, res
        else:
            skip(lineno, problem)


def _decoded(path: str, skip: OnSkip) -> Iterator[tuple[int, MeasureInput, MeasureRecordResult]]:
    """(line number, input, result) of each line that decodes; `skip` hears of the others."""
    lineno = 0
    with _open_log(path) as f:
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    inp, res = decode(line)
                except RecordError as exc:
                    skip(lineno, str(exc))
                    continue
                yield lineno, inp, res
        except UnicodeDecodeError:
            where = f"after line {lineno}" if lineno else "from its start"
            raise RecordError(
                f"{path} is not a record log: binary data, not UTF-8 text ({where})"
            ) from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            if lineno == 0:
                raise RecordError(f"{path}: corrupt gzip data ({exc})") from None
            skip(lineno + 1, f"gzip data cut short or corrupt, the rest is unreadable ({exc})")


def _warn_skipped(path: str, skipped: list[Skipped]) -> None:
    if skipped:
        warnings.warn(skip_summary(path, skipped), MalformedRecordWarning, stacklevel=3)


def best_records(
    path: str, where: Callable[[MeasureInput], bool] | None = None
) -> dict[str, Record]:
    """The fastest correct record of each workload key (only records whose input `where`
    accepts, when given) whose steps replay; records skipped on the way are counted in one
    MalformedRecordWarning."""
    path = str(path)
    skipped: list[Skipped] = []
    checker = RecordChecker()
    candidates: dict[str, list[tuple[float, int, Record]]] = {}
    for lineno, inp, res in _checked(path, lambda n, why: skipped.append((n, why)), checker, False):
        if res.ok and (where is None or where(inp)):
            candidates.setdefault(inp.workload_key, []).append((res.mean_cost, lineno, (inp, res)))
    best: dict[str, Record] = {}
    for key, ranked in candidates.items():
        for _, lineno, (inp, res) in sorted(ranked, key=lambda c: c[:2]):
            problem = checker.replay_problem(key, inp.steps)
            if problem is None:
                best[key] = (inp, res)
                break
            skipped.append((lineno, problem))
    _warn_skipped(path, sorted(skipped))
    return best


def load_best(
    path: str,
    workload_key: str | None = None,
    where: Callable[[MeasureInput], bool] | None = None,
) -> Record | None:
    """The fastest correct record whose steps replay (of one workload key, if given; of records
    `where` accepts), or None."""
    best = best_records(path, where)
    if workload_key is not None:
        return best.get(workload_key)
    return min(best.values(), key=lambda r: r[1].mean_cost, default=None)


def apply_steps(dag, record: tuple[MeasureInput, MeasureRecordResult] | MeasureInput):
    """Rebuild the state of a record on `dag`."""
    inp = record[0] if isinstance(record, tuple) else record
    return dag.replay_steps(inp.steps)


def now() -> float:
    return round(time.time(), 3)
