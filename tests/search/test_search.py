"""Search mechanics on the CPU: mutations and crossover, candidate evaluation, the initial
population, retries, the per-round time split, and an end-to-end search with the real policy and
XGBoost model and a test-only measurer that runs lowered programs in the interpreter.
Resuming from a log is in test_resume.py."""

from __future__ import annotations

import collections
import json
import math
import random
import time
import warnings

import numpy as np
import pytest

import autosched
from autosched.cli import time_split
from autosched.features import state_features
from autosched.records import load_records
from autosched.schedule.steps import PragmaStep, SplitStep
from autosched.search.mutations import MUTATIONS, as_step, is_decision, structure_key
from autosched.search.policy import (
    SearchParams,
    SketchPolicy,
    SkipLoggedStates,
    as_records,
)
from autosched.search.workers import TaskContext, TaskSpec, Workers
from autosched.task.workloads import SUITE
from measure import MeasureErrorKind
from tests.sim_measurer import SimulatedMeasurer

PARAMS = SearchParams(population=48, generations=2, sample_init_min_population=24, n_jobs=1, seed=1)
# for the tests of a round's mechanics (retries, the time split), where the population's size
# changes nothing but the time a round takes
SMALL = SearchParams(population=16, generations=1, sample_init_min_population=8, n_jobs=1, seed=1)


def small_task(name: str = "matmul"):
    if name == "matmul":
        return autosched.SearchTask("matmul", (32, 32, 16))
    workload, _, small = SUITE[name]
    return autosched.SearchTask(workload, small)


def make_policy(task, params: SearchParams = PARAMS, model=None) -> SketchPolicy:
    return SketchPolicy(task, model or autosched.XGBModel(nthread=1, seed=0), params, verbose=0)


@pytest.fixture(scope="module", params=["matmul", "conv2d_bias_relu"])
def sampled(request):
    """A policy of a small task and 48 distinct valid fresh candidates."""
    policy = make_policy(small_task(request.param))
    fresh = policy.sample_fresh(48)
    assert len(fresh) >= 40
    return policy, fresh


# ---- mutations -------------------------------------------------------------------------------


def _decisions(records) -> dict[int, tuple]:
    return {k: r for k, r in enumerate(records) if is_decision(r)}


def _children(policy, fresh, name: str, n: int = 40, seed: int = 0) -> list[tuple]:
    """n children of rule `name` from random parents in `fresh`; the other parents of a
    multi-parent rule share the first one's structure (crossover mixes candidates of one sketch
    whose caches are double-buffered and padded alike, and gives None for any other pair)."""
    rule, rng = MUTATIONS[name], random.Random(seed)
    mates = collections.defaultdict(list)
    for r in fresh:
        mates[structure_key(r)].append(r)
    out = []
    for _ in range(4 * n):
        first = rng.choice(fresh)
        others = [r for r in mates[structure_key(first)] if r is not first]
        if len(others) < rule.N_PARENTS - 1:
            continue
        parents = [first, *rng.sample(others, rule.N_PARENTS - 1)]
        child = rule.apply(policy.mutation_ctx, parents, rng)
        if child is not None:
            out.append((parents, child))
        if len(out) == n:
            break
    assert len(out) == n, f"{name} failed too often"
    return out


def test_mutation_context_keys_each_candidate_by_its_own_structure(sampled):
    policy, fresh = sampled
    ctx = policy.mutation_ctx
    for r in fresh + fresh[::-1]:  # the key remembered last is another candidate's
        assert ctx.structure_key(r) == structure_key(r)
        assert ctx.decision_ids(r) == tuple(k for k, x in enumerate(r) if is_decision(x))


def test_tile_size_mutation_moves_one_factor_within_limits(sampled):
    policy, fresh = sampled
    ctx = policy.mutation_ctx
    for (parent,), child in _children(policy, fresh, "tile_size"):
        changed = [k for k in range(len(parent)) if parent[k] != child[k]]
        assert len(changed) == 1 and structure_key(child) == structure_key(parent)
        old, new = as_step(parent[changed[0]]), as_step(child[changed[0]])
        assert isinstance(new, SplitStep) and new.extent == old.extent
        assert new.extent % math.prod(new.lengths) == 0  # still a perfect tiling
        assert new.lengths[-1] <= ctx.max_innermost_factor
        policy.workers.context.replay(child)  # replays


def test_vectorised_split_keeps_a_vector_width(sampled):
    policy, fresh = sampled
    for _, child in _children(policy, fresh, "tile_size", n=80):
        vec = [k for k, r in enumerate(child) if r[0] == "AN" and r[3] == "vectorize"]
        assert vec, "the sketch has cooperative fetching"
        for k in vec:
            assert as_step(child[k - 1]).lengths[-1] <= policy.mutation_ctx.max_vector_length


def test_auto_unroll_mutation_picks_another_config(sampled):
    policy, fresh = sampled
    for (parent,), child in _children(policy, fresh, "auto_unroll"):
        changed = [k for k in range(len(parent)) if parent[k] != child[k]]
        assert len(changed) == 1
        step = as_step(child[changed[0]])
        assert isinstance(step, PragmaStep)
        assert step.parsed()[1] in policy.mutation_ctx.unroll_configs


def test_crossover_children_mix_parents_differ_from_both_and_stay_valid(sampled):
    policy, fresh = sampled
    pairs = _children(policy, fresh, "crossover", n=40)
    for (a, b), child in pairs:
        assert structure_key(child) == structure_key(a)
        for k, r in _decisions(child).items():
            assert r in (a[k], b[k])  # every decision comes from a parent
        assert child != a and child != b
        assert any(child[k] == a[k] != b[k] for k in _decisions(a))
        assert any(child[k] == b[k] != a[k] for k in _decisions(a))
    children = [c for _, c in pairs]
    for c in children:
        policy.workers.context.replay(c)  # every child replays
    outcomes = policy.workers.evaluate(children)
    valid = sum(isinstance(o, np.ndarray) for o in outcomes)
    # measured 95-98% on the suite's small shapes; the invalid break a GPU limit and are dropped
    assert valid >= 0.85 * len(children), [o for o in outcomes if isinstance(o, str)]
    kept, _ = policy.score(children)
    assert len(kept) == valid


def test_crossover_needs_two_differences_and_one_sketch(sampled):
    policy, fresh = sampled
    rule, rng = MUTATIONS["crossover"], random.Random(0)
    a = fresh[0]
    one_off = MUTATIONS["auto_unroll"].apply(policy.mutation_ctx, [a], rng)
    assert rule.apply(policy.mutation_ctx, [a, one_off], rng) is None  # would copy a parent
    b = next(
        r
        for r in fresh
        if structure_key(r) == structure_key(a)
        and len([k for k in _decisions(a) if a[k] != r[k]]) >= 2
    )
    k = next(k for k, r in enumerate(b) if r[0] == "AN")
    other_sketch = b[:k] + ((b[k][0], b[k][1], b[k][2], "unroll"),) + b[k + 1 :]
    assert rule.apply(policy.mutation_ctx, [a, other_sketch], rng) is None


# ---- candidate evaluation --------------------------------------------------------------------


def test_evaluation_reuses_one_lowering_and_matches_the_reference_features(sampled):
    policy, fresh = sampled
    context = policy.workers.context
    for records in fresh[:6]:
        cached = policy.features.get(records)  # extracted from the sampler's lowering
        again = context.evaluate_one(records)  # replay, lower, check, extract
        reference = state_features(context.replay(records))
        np.testing.assert_array_equal(cached, reference)
        np.testing.assert_array_equal(again, reference)


def test_evaluation_names_the_broken_gpu_limit(sampled):
    policy, fresh = sampled
    records = list(fresh[0])
    # every spatial axis of the tiled stage wholly in registers: more than 256 locals a thread
    for k, r in enumerate(records):
        if r[0] == "SP" and len(r[4]) == 4 and r[3] <= 64:
            records[k] = r[:4] + ((1, 1, 1, r[3]),) + r[5:]
    assert policy.workers.evaluate([tuple(records)]) == ["local_memory"]


def test_unreplayable_candidate_is_invalid_not_an_error(sampled):
    policy, fresh = sampled
    records = fresh[0]
    bad = records[:1] + (("SP", 99, 0, 8, (2,), True),) + records[1:]
    (outcome,) = policy.workers.evaluate([bad])
    assert outcome == "schedule_error"


def test_a_full_feature_cache_drops_old_entries_but_answers_every_candidate(sampled):
    policy, fresh = sampled
    small = make_policy(policy.task, SearchParams(**{**PARAMS.__dict__, "feature_cache_size": 8}))
    outcomes = small.outcomes(fresh[:20])
    assert all(isinstance(o, np.ndarray) for o in outcomes)
    assert len(small.features.entries) <= 8 and small.features.misses == 20
    kept, scores = small.score(fresh[:20])
    assert kept == fresh[:20] and len(scores) == 20


def test_pool_gives_the_same_samples_and_features_as_one_process():
    task = small_task()
    spec = TaskSpec.of(task.compute_dag, task.hardware_params)
    local = Workers(TaskContext(task.compute_dag, task.hardware_params), spec, n_jobs=1)
    pool = Workers(TaskContext(task.compute_dag, task.hardware_params), spec, n_jobs=2)
    assert pool.use_pool
    a, b = local.sample(40, random.Random(5)), pool.sample(40, random.Random(5))
    assert [s.records for s in a] == [s.records for s in b]
    assert [s.sketch for s in a] == [s.sketch for s in b]
    for sa, sb in zip(a, b, strict=True):
        np.testing.assert_array_equal(sa.features, sb.features)
    records = [s.records for s in a]
    for oa, ob in zip(local.evaluate(records), pool.evaluate(records), strict=True):
        np.testing.assert_array_equal(oa, ob)
    assert pool.cpu_seconds > 0


class FakeBuilder:
    """Yields a 'cubin' per artifact after a pause, like LocalBuilder.build_as_completed."""

    def __init__(self) -> None:
        self.artifacts = []

    def build_as_completed(self, artifacts):
        from measure import BuildResult

        self.artifacts = list(artifacts)
        for i, _ in enumerate(artifacts):
            time.sleep(0.01)
            yield i, BuildResult(b"cubin", {}, build_seconds=0.01)


class FakeRunner:
    """Times nothing: returns 1 us after a pause of 20 ms per kernel."""

    def run(self, artifacts, builds, references, cost_bound=None):
        from measure import RunResult

        assert set(references) == {a.reference_id for a in artifacts}
        time.sleep(0.02)
        return [RunResult((1e-6, 1e-6), run_seconds=0.02) for _ in artifacts]

    def close(self) -> None:
        pass


def test_program_measurer_generates_sources_in_the_workers_and_splits_build_from_run(sampled):
    from autosched.search.program_measurer import ProgramMeasurer

    policy, fresh = sampled
    states = [policy.workers.context.replay(r) for r in fresh[:4]]
    logged = []
    measurer = ProgramMeasurer(
        policy.task,
        FakeBuilder(),
        FakeRunner(),
        [lambda i, r: logged.extend(zip(i, r, strict=True))],
        workers=policy.workers,
    )
    t0 = time.perf_counter()
    results = measurer.measure(states)
    wall = time.perf_counter() - t0
    assert [r.mean_cost for r in results] == [1e-6] * 4
    artifacts = measurer.context.builder.artifacts
    assert [a.tag for a in artifacts] == [s.fingerprint() for s in states]
    assert all("__global__" in a.source for a in artifacts)
    assert [inp.steps for inp, _ in logged] == [s.key() for s in states]
    times = measurer.last_times
    assert times["run"] >= 4 * 0.02 and times["build"] >= 4 * 0.01
    assert times["build"] + times["run"] == pytest.approx(wall, abs=0.01)


def test_program_measurer_counts_run_seconds_per_gpu(sampled, monkeypatch):
    """Candidates run side by side on several GPUs: the run share of the wall time is their
    runners' seconds per GPU, so that it stays within the wall time."""
    from autosched.search.program_measurer import ProgramMeasurer

    policy, fresh = sampled
    states = [policy.workers.context.replay(r) for r in fresh[:4]]
    measurer = ProgramMeasurer(policy.task, FakeBuilder(), FakeRunner(), workers=policy.workers)
    monkeypatch.setattr(measurer.context, "gpu_count", lambda: 2)
    measurer.measure(states)
    assert measurer.last_times["run"] == pytest.approx(4 * 0.02 / 2)


class BoundRunner:
    """Runs kernels of the given costs in turn, recording the cost bound of each run; a kernel
    slower than its bound stops early, with one reading."""

    def __init__(self, costs) -> None:
        self.costs, self.bounds = list(costs), []

    def run(self, artifacts, builds, references, cost_bound=None):
        from measure import RunResult

        self.bounds.append(cost_bound)
        cost = self.costs.pop(0)
        if cost_bound is not None and cost > cost_bound:
            return [RunResult((cost,), stopped_early=True)]
        return [RunResult((cost,) * 3)]

    def close(self) -> None:
        pass


@pytest.mark.parametrize("factor", [1.5, None])
def test_program_measurer_bounds_a_batch_by_its_best_so_far(sampled, factor):
    """The first batch is timed in full; the next carries the best so far times the factor, and
    a candidate that stopped at it is logged as stopped early. No factor: never a bound."""
    from autosched.search.program_measurer import ProgramMeasurer

    policy, fresh = sampled
    states = [policy.workers.context.replay(r) for r in fresh[:3]]
    runner = BoundRunner([4e-6, 2e-6, 3e-6, 2.5e-6, 3.5e-6, 1e-6])
    logged = []
    measurer = ProgramMeasurer(
        policy.task,
        FakeBuilder(),
        runner,
        [lambda i, r: logged.extend(r)],
        workers=policy.workers,
        early_stop_factor=factor,
    )
    first = measurer.measure(states)
    assert measurer.best_cost == 2e-6 and [r.stopped_early for r in first] == [False] * 3
    second = measurer.measure(states)
    bound = None if factor is None else 2e-6 * factor
    assert runner.bounds == [None] * 3 + [bound] * 3
    stopped = [False, factor is not None, False]  # 3.5 us is over the bound of 3 us
    assert [r.stopped_early for r in second] == stopped == [r.stopped_early for r in logged[3:]]
    assert measurer.best_cost == 1e-6 and measurer.cost_bound() == (factor and 1e-6 * factor)


def test_program_measurer_refuses_an_early_stop_factor_under_one(sampled):
    from autosched.errors import OptionError
    from autosched.search.program_measurer import ProgramMeasurer

    with pytest.raises(OptionError, match="early_stop_factor must be None or a number >= 1"):
        ProgramMeasurer(sampled[0].task, FakeBuilder(), FakeRunner(), early_stop_factor=0.5)


def test_workers_rebuild_a_workload_registered_only_in_this_process_from_its_dag():
    """Spawned workers cannot import a workload registered only here (a script's `__main__`,
    say); they rebuild it from the serialised DAG of the TaskSpec, with the same results."""

    @autosched.register_workload(name="registered_only_in_this_process")
    def tiny_matmul(n, m, k):
        from autosched import te, topi

        a, b = te.placeholder((n, k), name="A"), te.placeholder((k, m), name="B")
        return [a, b, topi.matmul(a, b)]

    task = autosched.SearchTask("registered_only_in_this_process", (16, 16, 8))
    spec = TaskSpec.of(task.compute_dag, task.hardware_params)
    workers = Workers(TaskContext(task.compute_dag, task.hardware_params), spec, n_jobs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to this process
        got = workers.sample(24, random.Random(0))
    assert workers.use_pool and len(got) == 24
    local = Workers(TaskContext(task.compute_dag, task.hardware_params), spec, n_jobs=1)
    assert [s.records for s in local.sample(24, random.Random(0))] == [s.records for s in got]


# ---- rounds ----------------------------------------------------------------------------------


def test_initial_population_mixes_fresh_samples_with_a_fifth_of_the_best_measured():
    params = SearchParams(
        population=60, generations=1, sample_init_min_population=50, n_jobs=1, seed=2
    )
    policy = make_policy(small_task(), params)
    measured = policy.sample_fresh(40)
    for i, r in enumerate(measured):
        policy.add_measured_records(r, 1e-6 * (i + 1))
    fresh, init = policy.init_population()
    best = init[len(fresh) :]
    assert len(fresh) >= 50  # never fewer than sample_init_min_population
    assert best == measured[:12]  # 20% of the population, fastest first
    batch = policy.search_one_round(16)
    assert len(batch) == 16 and not {s.key() for s in batch} & set(measured)


def test_a_round_that_finds_nothing_new_searches_again(monkeypatch):
    policy = make_policy(small_task(), SMALL)
    calls = []
    real_pick = policy.pick

    def pick_nothing_first(ranked, fresh, num):
        calls.append(num)
        return [] if len(calls) == 1 else real_pick(ranked, fresh, num)

    monkeypatch.setattr(policy, "pick", pick_nothing_first)
    batch = policy.search_one_round(4)
    assert len(calls) == 2 and len(batch) == 4


def test_an_exhausted_space_gives_an_empty_batch_after_the_retries(monkeypatch):
    policy = make_policy(small_task())
    seen = policy.sample_fresh(8)
    for r in seen:
        policy.add_measured_records(r, 1e-6)
    attempts = []

    def only_measured():
        attempts.append(1)
        return list(seen), list(seen)

    monkeypatch.setattr(policy, "init_population", only_measured)
    monkeypatch.setattr(policy, "evolutionary_search", lambda init, out: list(init))
    assert policy.search_one_round(4) == []
    assert len(attempts) == 1 + PARAMS.empty_round_retries


# ---- end to end ------------------------------------------------------------------------------


def test_search_end_to_end_reports_the_time_split(tmp_path, capsys):
    log = tmp_path / "matmul.json"
    task = small_task()
    measurer = SimulatedMeasurer(task, [autosched.RecordToFile(str(log))])
    opts = autosched.TuningOptions(
        num_measure_trials=16, num_measures_per_round=8, measurer=measurer
    )
    model = autosched.XGBModel(nthread=1, seed=0, few_shot_threshold=0)  # steers round 2
    t0 = time.perf_counter()
    res = autosched.auto_schedule(task, make_policy(task, SMALL, model), opts)
    wall = time.perf_counter() - t0
    assert measurer.count == 16 and len(set(measurer.fingerprints)) == 16
    assert math.isfinite(res.best_cost) and len(list(load_records(str(log)))) == 16
    assert len(res.history) == 2
    for rec in res.history:
        for key in ("search_s", "build_s", "run_s", "model_s"):
            assert rec[key] > 0, key
        assert rec["measure_s"] == pytest.approx(rec["build_s"] + rec["run_s"])
        assert rec["wall_s"] == pytest.approx(sum(rec["split_s"].values()))
        # nothing overlaps (the first batch is measured alone, the last has no next batch):
        # the wall time is the sum, and a little bookkeeping
        parts = rec["search_s"] + rec["measure_s"] + rec["model_s"]
        assert parts <= rec["total_s"] <= parts + 0.1
        assert rec["split_s"]["gpu"] == rec["run_s"] and 0 < rec["gpu_busy"] < 1
        assert rec["trials_per_s"] == pytest.approx(8 / rec["wall_s"])
    assert sum(r["total_s"] for r in res.history) <= wall
    guessed, steered = (r["search_detail"] for r in res.history)
    assert guessed["sampled"] >= SMALL.sample_init_min_population and guessed["evaluated"] == 0
    assert steered["evaluated"] > 0 and steered["predict_s"] > 0
    for rec in res.history:
        detail = rec["search_detail"]
        assert detail["sample_s"] + detail["evaluate_s"] + detail["predict_s"] <= rec["search_s"]
    summary = time_split(res.history)
    assert summary.startswith("2 rounds: search ")
    assert "trials/s, GPU busy" in summary.splitlines()[1]
    out = capsys.readouterr().out
    assert out.count("search ") == 2 and "build " in out and "run " in out and "model " in out


def test_a_pipelined_search_with_its_own_model_measures_every_trial_once(tmp_path):
    """The pipelined loop with the real policy: batches measured two at a time (the simulated
    measurer from two threads), the policy's own model trained in the background; every trial
    is measured once and logged whole, and each round's wall split adds up."""
    log = tmp_path / "matmul.json"
    task = small_task()
    measurer = SimulatedMeasurer(task, [autosched.RecordToFile(str(log))])
    opts = autosched.TuningOptions(
        num_measure_trials=32, num_measures_per_round=8, measurer=measurer, pipeline=True
    )
    policy = SketchPolicy(task, params=SMALL, verbose=0)  # its own model: trained in a thread
    res = autosched.auto_schedule(task, policy, opts)
    assert measurer.count == 32 and len(set(measurer.fingerprints)) == 32
    logged = list(load_records(str(log)))
    assert len(logged) == 32 and len({tuple(map(str, i.steps)) for i, _ in logged}) == 32
    assert math.isfinite(res.best_cost) and [r["trials"] for r in res.history] == [8, 16, 24, 32]
    for rec in res.history:
        assert rec["wall_s"] == pytest.approx(sum(rec["split_s"].values()))
    assert policy.cost_model is not None and len(policy.measured) == 32


# ---- never a state measured twice ------------------------------------------------------------


class FailingMeasurer(SimulatedMeasurer):
    """Fails about a fifth of the states (those whose fingerprint is divisible by 5), as spills
    and build errors do on the GPU: their cost is inf."""

    def measure_one(self, state):
        if int(state.fingerprint(), 16) % 5 == 0:
            return self._failed(MeasureErrorKind.RESOURCE_LIMIT, "spills")
        return super().measure_one(state)


def _search_into(log, seed: int, trials: int, callbacks=()) -> FailingMeasurer:
    """A search of a tiny matmul (a space small enough that a long search comes back to the
    states it measured) appending every measurement to `log`."""
    task = autosched.SearchTask("matmul", (8, 8, 4))
    params = SearchParams(
        population=16, generations=1, sample_init_min_population=8, n_jobs=1, seed=seed
    )
    policy = SketchPolicy(task, autosched.XGBModel(nthread=1, seed=0), params, callbacks, verbose=0)
    measurer = FailingMeasurer(task, [autosched.RecordToFile(str(log))])
    opts = autosched.TuningOptions(
        num_measure_trials=trials, num_measures_per_round=32, measurer=measurer, verbose=0
    )
    autosched.auto_schedule(task, policy, opts)
    return measurer


def _logged_steps(log) -> list[str]:
    """Each record's steps as the log writes them."""
    return [json.dumps(json.loads(line)["steps"]) for line in log.read_text().splitlines()]


def test_a_long_search_and_a_second_one_into_its_log_measure_no_state_twice(tmp_path):
    """No two records of a log have the same steps: not across rounds of one search, failed
    measurements (inf) included, nor when a second search appends to the log of a first (as
    `autosched tune` does with its default log), which skips the states the log holds."""
    log = tmp_path / "matmul.json"
    first = _search_into(log, seed=1, trials=128)
    steps = _logged_steps(log)
    assert first.count == 128 and len(set(steps)) == 128
    failed = [json.loads(line)["result"]["error_kind"] for line in log.read_text().splitlines()]
    assert 10 <= sum(k != 0 for k in failed) < 64
    second = _search_into(log, seed=2, trials=64, callbacks=[SkipLoggedStates(str(log))])
    steps = _logged_steps(log)
    assert second.count == 64 and len(steps) == 192 and len(set(steps)) == 192


def _loose(v):
    """`v` as a hand-made caller might pass it: lists, numpy integers."""
    if isinstance(v, (list, tuple)):
        return [_loose(x) for x in v]
    return np.int64(v) if isinstance(v, int) and not isinstance(v, bool) else v


def test_records_in_a_log_s_form_are_the_records_the_search_makes(tmp_path):
    """A state given as lists with numpy integers (a log read by hand, a caller's arrays) is
    the same candidate as the tuples the search makes: once measured, never handed out."""
    policy = make_policy(small_task())
    fresh = policy.sample_fresh(8)
    records = fresh[0]
    loose = _loose(records)
    assert as_records(loose) == records
    assert json.dumps(as_records(loose)) == json.dumps(records)  # bools stay bools
    policy.add_measured_records(loose, math.inf)
    assert records in policy.measured and records in policy.picked
    assert records not in policy.pick([records], fresh[:4], 4)
    SkipLoggedStates(str(tmp_path / "missing.json"))(policy)  # a new log: nothing to skip


def test_a_policy_samples_with_the_sketch_params_it_is_given():
    """SketchPolicy's sketch_params reach its sampler and, through the task spec, the worker
    processes; without them the task's own (its TF32 option) are used."""
    from autosched.sketch import SketchParams

    task = small_task()
    given = SketchParams(shared_padding_probability=1.0)
    policy = SketchPolicy(task, autosched.XGBModel(nthread=1, seed=0), SMALL, sketch_params=given)
    assert policy.sampler.params is given and policy.workers.spec.sketch_params is given
    default = make_policy(task, SMALL)
    assert default.sampler.params == SketchParams.for_task(task)


def test_a_round_of_few_candidates_evolves_a_population_in_proportion():
    """A model's warm-up rounds measure a few candidates per task: such a round samples and
    evolves population_per_trial states a candidate (at least min_round_population), a full
    round the whole population."""
    params = SearchParams(
        population=64,
        population_per_trial=4,
        min_round_population=16,
        generations=1,
        sample_init_min_population=8,
        n_jobs=1,
        seed=1,
    )
    policy = make_policy(small_task(), params)
    assert [policy.population_for(n) for n in (1, 4, 8, 16, 100)] == [16, 16, 32, 64, 64]
    batch = policy.search_one_round(2)
    assert len(batch) == 2 and policy.round_population == 16
    assert policy.n_sampled == 16  # fresh samples for the whole (first) round's population
