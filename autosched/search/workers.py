"""The per-candidate work of the search and of the cost model — sample, replay, check validity,
extract features, generate CUDA — in this process or spread over a pool of spawned worker
processes. It is the one place autosched runs work in other processes.

States do not pickle (te objects hold lambdas) and Step objects pickle slowly, so candidates
cross the process boundary as step-record tuples; a worker rebuilds the task once from its
`TaskSpec` (the serialised DAG; the sketches and the sampler when it first samples) and keeps
it, so a workload defined anywhere, a script's `__main__` included, runs in parallel. A
candidate is lowered once: sampling keeps the program it lowered to check the GPU limits and
extracts features from it, and evaluation checks limits and extracts from one lowering.

    workers = Workers(TaskContext(dag, hardware), TaskSpec.of(dag, hardware), n_jobs=16)
    fresh = workers.sample(512, rng)             # [Sampled], valid and distinct
    outcomes = workers.evaluate(candidates)      # features, or the reason a candidate is invalid
    feats = features_for_states(states, n_jobs)  # features of States (None where they fail)

Results do not depend on n_jobs: sampling is cut into fixed-size chunks with their own seeds.
One failure policy for all of it: a DAG that cannot be serialised is done in this process, with
a warning; so is everything after a worker dies.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import time
import warnings
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from autosched.codegen.build import build
from autosched.errors import AutoschedError, TEError, WorkloadError
from autosched.features.extract import extract_features, state_features
from autosched.schedule.compute_dag import ComputeDAG
from autosched.search.collector import collector_paused, young_objects_only
from autosched.search.mutations import Records
from autosched.search.process_pool import COMPILERS_FIRST, get_pool, shutdown_pools
from autosched.search.replay_cache import PrefixReplay
from autosched.sketch import SketchParams, SketchSampler, generate_sketches
from autosched.sketch.validity import check_candidate, reason_for
from measure.builder import available_cores
from measure.hardware import HardwareParams

log = logging.getLogger(__name__)

SAMPLE_CHUNK = 8  # states per sampling job (fixed, so results do not depend on n_jobs)
Outcome = Any  # np.ndarray (features) for a valid candidate, str (the reason) for an invalid one


class Sampled(NamedTuple):
    """A fresh state: its records, the features of its program and the index of the sketch it
    was drawn from (in the task's sketch list), so that a search can spread what it draws at
    random over the sketches."""

    records: Records
    features: np.ndarray
    sketch: int


@dataclass(frozen=True)
class TaskSpec:
    """What a worker needs to rebuild a task's context (hashable: the worker's cache key). The
    DAG travels serialised, so a workload defined anywhere (a script's `__main__` included)
    is rebuilt without importing the module that defined it."""

    workload_key: str
    dag_json: str
    hardware: HardwareParams | None = None  # None for the defaults
    sketch_params: SketchParams | None = None  # None for the defaults

    @classmethod
    def of(
        cls,
        dag: ComputeDAG,
        hardware: HardwareParams | None = None,
        sketch_params: SketchParams | None = None,
    ) -> TaskSpec | None:
        """The spec of a DAG, or None when its expressions cannot be serialised."""
        try:
            text = json.dumps(dag.serialized(), separators=(",", ":"))
        except TEError as exc:
            log.warning("the DAG cannot go to worker processes: %s", exc)
            return None
        return cls(dag.workload_key, text, hardware, sketch_params)


class TaskContext:
    """One task's DAG, GPU limits and sampler, and the per-candidate work on them. The sketches
    and the sampler are made on first use (evaluation and features need neither)."""

    def __init__(
        self,
        dag: ComputeDAG,
        hardware: HardwareParams | None = None,
        sketch_params: SketchParams | None = None,
        sketches=None,
    ) -> None:
        self.dag = dag
        self.hardware = hardware or HardwareParams()
        self.params = sketch_params or SketchParams()
        self._sketches = sketches

    @classmethod
    def from_spec(cls, spec: TaskSpec) -> TaskContext:
        dag = ComputeDAG.from_serialized(json.loads(spec.dag_json), spec.workload_key)
        return cls(dag, spec.hardware, spec.sketch_params)

    @functools.cached_property
    def sampler(self) -> SketchSampler:
        """The task's sampler (it analyses each sketch once), verifying what it draws."""
        sketches = self._sketches
        if sketches is None:
            sketches = generate_sketches(self.dag, self.hardware, self.params)
        return SketchSampler(sketches, self.hardware, self.params)

    @functools.cached_property
    def replays(self) -> PrefixReplay:
        """The task's replays, each from the state of its longest prefix replayed before."""
        return PrefixReplay(self.dag.get_init_state())

    def replay(self, records: Records):
        """The State of a candidate (raises AutoschedError when the records do not replay)."""
        return self.replays.replay(records)

    def sample(self, n: int, seed: int) -> list[Sampled]:
        """Up to n distinct valid fresh states (the cycle collector paused while they are drawn,
        lowered and their features extracted: `collector.collector_paused`)."""
        sampler = self.sampler
        with collector_paused():
            states = sampler.sample(n, random.Random(seed))
            programs = sampler.programs  # what the sampler lowered to check them
            return [
                Sampled(s.key(), extract_features(programs[s.key()]), sampler.sketch_of[s.key()])
                for s in states
            ]

    def evaluate(self, candidates: Sequence[Records]) -> list[Outcome]:
        """Per candidate: its features, or why it is invalid (a reason of sketch/validity.py);
        the cycle collector paused while each is lowered (`collector.collector_paused`)."""
        out = []
        for records in candidates:
            with collector_paused():
                out.append(self.evaluate_one(records))
        return out

    def evaluate_one(self, records: Records) -> Outcome:
        """Replay, check validity (lowering once), extract features from that lowering."""
        try:
            state = self.replay(records)
        except Exception as exc:
            return reason_for(exc, "replaying a candidate")
        program, reason = check_candidate(state, self.hardware, self.params)
        if program is None:
            return reason
        return extract_features(program)

    def features(self, candidates: Sequence[Records]) -> list[np.ndarray | None]:
        """Per candidate: the features of its lowered program, with no GPU limit checked; None
        when it does not replay or lower (the cycle collector paused for each, as in
        `evaluate`)."""
        out: list[np.ndarray | None] = []
        for records in candidates:
            with collector_paused():
                try:
                    state = self.replay(records)
                except AutoschedError:
                    out.append(None)
                    continue
                out.append(state_features(state))
        return out

    def build(self, candidates: Sequence[Records], tags: Sequence[str]) -> list[Any]:
        """Per candidate: its measure/ KernelArtifact, or an error text when it cannot be built
        (the cycle collector paused for each, as in `evaluate`)."""
        out: list[Any] = []
        for records, tag in zip(candidates, tags, strict=True):
            with collector_paused():
                try:
                    kernel = build(self.dag, self.replay(records))
                    out.append(kernel.artifact(reference_id=self.dag.workload_key, tag=tag))
                except Exception as exc:  # a state that cannot be lowered costs one failed record
                    out.append(f"{type(exc).__name__}: {exc}")
        return out


class Workers:
    """Runs TaskContext methods on chunks of candidates, here or in a pool of n_jobs processes.
    `n_jobs=None` means one process per CPU core; 1 means this process only. The pool's
    processes run `niceness` above this one (`SearchParams.worker_niceness`)."""

    def __init__(
        self,
        context: TaskContext,
        spec: TaskSpec | None,
        n_jobs: int | None = 1,
        niceness: int = COMPILERS_FIRST,
    ) -> None:
        self.context = context
        self.spec = spec
        self.niceness = niceness
        self.n_jobs = resolve_n_jobs(n_jobs)
        self.use_pool = self.n_jobs > 1 and spec is not None
        self.cpu_seconds = 0.0  # CPU time the chunks took, wherever they ran
        if self.n_jobs > 1 and not self.use_pool:
            warnings.warn(
                f"the DAG of {context.dag.workload_key!r} cannot be serialised for worker "
                "processes: its work is done in this process",
                stacklevel=2,
            )

    def sample(self, n: int, rng: random.Random) -> list[Sampled]:
        """About n distinct valid fresh states (fewer when the sampler rejects most draws)."""
        sizes = [min(SAMPLE_CHUNK, n - k) for k in range(0, n, SAMPLE_CHUNK)]
        chunks = [(size, rng.getrandbits(63)) for size in sizes]
        seen, out = set(), []
        for part in self.map("sample", chunks):
            for fresh in part:
                if fresh.records not in seen:
                    seen.add(fresh.records)
                    out.append(fresh)
        return out

    def evaluate(self, candidates: Sequence[Records]) -> list[Outcome]:
        """Features or invalidity reason per candidate, in order."""
        return self._per_candidate("evaluate", candidates)

    def features(self, candidates: Sequence[Records]) -> list[np.ndarray | None]:
        """Features (no GPU limit checked; None where it does not lower) per candidate."""
        return self._per_candidate("features", candidates)

    def _per_candidate(self, method: str, candidates: Sequence[Records]) -> list:
        """`context.<method>` over the candidates, cut into about 4 chunks per process."""
        candidates = list(candidates)
        size = max(4, -(-len(candidates) // (4 * self.n_jobs)))
        chunks = [(candidates[k : k + size],) for k in range(0, len(candidates), size)]
        return [o for part in self.map(method, chunks) for o in part]

    def build(self, candidates: Sequence[Records], tags: Sequence[str]) -> list[Any]:
        """KernelArtifact (or error text) per candidate, in order."""
        candidates, tags = list(candidates), list(tags)
        size = max(1, -(-len(candidates) // self.n_jobs))
        starts = range(0, len(candidates), size)
        chunks = [(candidates[k : k + size], tags[k : k + size]) for k in starts]
        return [a for part in self.map("build", chunks) for a in part]

    def map(self, method: str, chunks: list[tuple]) -> list:
        """`context.<method>(*chunk)` for every chunk, results in chunk order."""
        if self.use_pool and len(chunks) > 1:
            try:
                return self._map_pool(method, chunks)
            except (BrokenProcessPool, WorkloadError) as exc:
                shutdown_pools()
                self.use_pool = False
                hint = (
                    ' (a script that uses worker processes needs the `if __name__ == "__main__":`'
                    " guard of spawned processes)"
                    if isinstance(exc, BrokenProcessPool)
                    else ""
                )
                warnings.warn(
                    f"search workers failed ({type(exc).__name__}: {exc}); the work goes on "
                    f"in this process{hint}",
                    stacklevel=2,
                )
        out = []
        for chunk in chunks:
            result, cpu = _timed(self.context, method, chunk)
            self.cpu_seconds += cpu
            out.append(result)
        return out

    def _map_pool(self, method: str, chunks: list[tuple]) -> list:
        assert self.spec is not None, "a pool is used only with a spec (use_pool)"
        pool = get_pool(self.n_jobs, self.niceness)
        futures = [pool.submit(_work, self.spec, method, chunk) for chunk in chunks]
        out = []
        for fut in futures:
            result, cpu = fut.result()
            self.cpu_seconds += cpu
            out.append(result)
        return out


def features_for_states(states: Sequence, n_jobs: int = 1) -> list[np.ndarray | None]:
    """One feature matrix per state (statements x features; no GPU limit checked), None for a
    state that fails to lower. With n_jobs > 1 each workload's states go to `Workers` as step
    records, under their failure policy (a DAG that is not a registered workload is done in this
    process, with a warning)."""
    states = list(states)
    if n_jobs <= 1 or len(states) < 2:
        return [state_features(s) for s in states]
    by_key: dict[str, list[int]] = {}
    for i, s in enumerate(states):
        by_key.setdefault(s.dag.workload_key, []).append(i)
    out: list[np.ndarray | None] = [None] * len(states)
    for index in by_key.values():
        dag = states[index[0]].dag
        workers = Workers(TaskContext(dag), TaskSpec.of(dag), n_jobs)
        got = workers.features([states[i].key() for i in index])
        for i, f in zip(index, got, strict=True):
            out[i] = f
    return out


def resolve_n_jobs(n_jobs: int | None) -> int:
    """None -> the CPU cores this process may use; otherwise at least 1."""
    return available_cores() if n_jobs is None else max(1, n_jobs)


def _timed(context: TaskContext, method: str, chunk: tuple) -> tuple[Any, float]:
    start = time.process_time()
    with young_objects_only():  # the collector walks the chunk's objects, not the task's
        result = getattr(context, method)(*chunk)
    return result, time.process_time() - start


_CONTEXTS: dict[TaskSpec, TaskContext] = {}  # in a worker: its rebuilt tasks


def _work(spec: TaskSpec, method: str, chunk: tuple) -> tuple[Any, float]:
    """In a worker: the task's context (rebuilt on first use), then one chunk."""
    context = _CONTEXTS.get(spec)
    if context is None:
        context = _CONTEXTS[spec] = TaskContext.from_spec(spec)
    return _timed(context, method, chunk)


__all__ = [
    "Outcome",
    "TaskContext",
    "TaskSpec",
    "Workers",
    "features_for_states",
    "resolve_n_jobs",
    "shutdown_pools",
]
