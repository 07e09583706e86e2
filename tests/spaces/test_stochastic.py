"""Stochastic schedules: samplers, trace printing and replay with changed decisions, random and
evolutionary search over the stochastic matmul schedule with the simulated measurer, and sampled
schedules run on the CPU interpreter against numpy."""

from __future__ import annotations

import json
import math
import random

import pytest

from autosched import ComputeDAG, te, topi
from autosched.records import load_records
from autosched.spaces.samplers import DecisionError, perfect_tilings, sample_perfect_tile
from autosched.spaces.stochastic import replay, trace_of
from autosched.spaces.stochastic_matmul import stochastic_matmul
from autosched.spaces.trace import Trace
from autosched.spaces.trace_search import TraceSearchParams, TraceSearchPolicy
from autosched.spaces.tune_space import tune_space
from autosched.task.search_task import SearchTask
from tests.interpreter_check import lower_and_compare
from tests.sim_measurer import SimulatedMeasurer


@pytest.fixture(scope="module")
def dag():
    a = te.placeholder((32, 16), name="A")
    b = te.placeholder((16, 32), name="B")
    return ComputeDAG([a, b, topi.matmul(a, b)])


def _tile_index(trace, nth: int = 0) -> int:
    return [i for i in trace.sampler_indices if "perfect" in trace.instructions[i].kind][nth]


def test_perfect_tiles_multiply_to_the_extent():
    rng = random.Random(0)
    for _ in range(50):
        t = sample_perfect_tile(rng, 48, 3, 4)
        assert math.prod(t) == 48 and t[-1] <= 4
    assert (2, 2, 2) in perfect_tilings(8, 3, 0)
    assert len(perfect_tilings(8, 2, 0)) == 4


def test_trace_prints_decisions_and_replays_to_the_same_text(dag):
    sch = trace_of(stochastic_matmul, dag, seed=3)
    text = sch.trace.to_python()
    assert "sch.sample_perfect_tile(loop=l2, n=3, max_innermost_factor=4, decision=[" in text
    again = replay(sch.trace, dag)
    assert again.trace.to_python() == text
    assert again.state == sch.state
    assert str(sch.trace) == text


def test_changed_decision_replays_with_the_new_split(dag):
    sch = trace_of(stochastic_matmul, dag, seed=3)
    i = _tile_index(sch.trace)
    new = [4, 8, 1] if list(sch.trace.instructions[i].decision) != [4, 8, 1] else [8, 2, 2]
    other = replay(sch.trace.with_decision(i, new), dag)
    assert other.state != sch.state
    assert f"decision={new}" in other.trace.to_python()
    split = next(s for s in other.state.steps if type(s).__name__ == "SplitStep")
    assert list(split.lengths) == new[1:]
    assert [it.extent for it in other.state["T_matmul"].iters][-2] == new[2]


@pytest.mark.parametrize("bad", [[3, 11, 1], [32, 1], [1, 4, 8]])
def test_a_decision_that_does_not_fit_raises_one_error(dag, bad):
    sch = trace_of(stochastic_matmul, dag, seed=3)
    with pytest.raises(DecisionError, match="does not fit"):
        replay(sch.trace.with_decision(_tile_index(sch.trace), bad), dag)
    with pytest.raises(DecisionError, match="not a sampler"):
        sch.trace.with_decision(0, [1])


def test_compute_location_sampler_replays(dag):
    def fn(sch):
        c = sch.get_block("T_matmul")
        local = sch.cache_write(c, "local")
        i, j = sch.get_loops(c)
        sch.bind(i, "blockIdx.x")
        sch.bind(j, "threadIdx.x")
        sch.compute_at(local, sch.sample_compute_location(local))

    sch = trace_of(fn, dag, 0)
    at = sch.trace.sampler_indices[0]
    for decision in (-1, 0, 1):
        again = replay(sch.trace.with_decision(at, decision), dag)
        assert replay(again.trace, dag).state == again.state
    assert again.state["T_matmul.local"].attach[1] == "j"
    lower_and_compare(dag, again.state)
    root = replay(sch.trace.with_decision(at, -1), dag)
    assert root.state["T_matmul.local"].compute_at == "root"
    with pytest.raises(DecisionError):
        replay(sch.trace.with_decision(at, 2), dag)


def test_sampled_matmul_schedules_match_numpy(dag):
    seen = set()
    for seed in range(6):
        sch = trace_of(stochastic_matmul, dag, seed)
        seen.add(sch.state.key())
        lower_and_compare(dag, sch.state, seed=seed)
    assert len(seen) > 1


def test_mutation_changes_one_decision(dag):
    policy = TraceSearchPolicy(SearchTask(dag=dag), stochastic_matmul, TraceSearchParams(seed=1))
    parent = policy.sample(1)[0]
    for _ in range(10):
        child = policy.mutate(parent)
        if child is None:
            continue
        changed = [
            i
            for i in parent.trace.sampler_indices
            if parent.trace.instructions[i].decision != child.trace.instructions[i].decision
        ]
        assert len(changed) == 1


@pytest.mark.parametrize("evolutionary", [False, True])
def test_search_writes_records_that_load_and_replay(dag, tmp_path, evolutionary):
    task = SearchTask(dag=dag)
    log = str(tmp_path / "log.json")
    params = TraceSearchParams(population=8, generations=1, evolutionary=evolutionary, seed=0)
    result = tune_space(
        task,
        stochastic_matmul,
        num_trials=8,
        log=log,
        per_round=4,
        params=params,
        measurer=SimulatedMeasurer(task),
    )
    assert math.isfinite(result.best_cost)
    records = list(load_records(log))
    assert len(records) == 8
    keys = {inp.steps for inp, _ in records}
    assert len(keys) == 8
    for inp, res in records:
        assert res.ok
        state = dag.replay_steps(inp.steps)
        assert state.key() == tuple(inp.steps)


def test_trace_json_round_trips_and_replays(dag):
    sch = trace_of(stochastic_matmul, dag, seed=5)
    data = json.loads(json.dumps(sch.trace.to_json()))
    again = Trace.from_json(data)
    assert again == sch.trace
    assert replay(again, dag).state == sch.state


def _search(task, log, trials, resume_from=None):
    measurer = SimulatedMeasurer(task)
    params = TraceSearchParams(population=8, generations=1, seed=len(resume_from or ""))
    result = tune_space(task, stochastic_matmul, num_trials=trials, log=log, per_round=4,
                  params=params, measurer=measurer, resume_from=resume_from)  # fmt: skip
    return result, measurer


def test_records_carry_traces_and_a_resumed_search_measures_no_state_twice(dag, tmp_path):
    task = SearchTask(dag=dag)
    log = str(tmp_path / "log.json")
    _search(task, log, 8)
    records = list(load_records(log))
    for inp, _ in records:
        assert replay(Trace.from_json(inp.trace), dag).state.key() == inp.steps
    best_before = min(r.mean_cost for _, r in records)
    _, measurer = _search(task, log, 8, resume_from=log)
    records = list(load_records(log))
    assert len(records) == 16 and measurer.count == 8
    assert len({inp.steps for inp, _ in records}) == 16
    policy = TraceSearchPolicy(task, stochastic_matmul)
    from autosched.spaces.trace_search import PreloadMeasuredTraces

    PreloadMeasuredTraces(log)(policy)
    assert len(policy.measured) == 16 and len(policy.schedules) == 16
    assert policy.best_state()[0] == min(best_before, min(r.mean_cost for _, r in records))


def test_show_prints_the_best_trace_as_python(dag, tmp_path, capsys):
    from autosched.cli import main

    task = SearchTask(dag=dag)
    log = str(tmp_path / "log.json")
    _search(task, log, 4)
    inp, _ = min(load_records(log), key=lambda r: r[1].mean_cost)
    assert main(["show", log]) == 0
    out = capsys.readouterr().out
    python = Trace.from_json(inp.trace).to_python()
    assert "  trace:\n" + "".join("    " + line + "\n" for line in python.splitlines()) in out
    assert "kernel " in out


def test_trace_search_params_name_a_bad_setting():
    with pytest.raises(ValueError, match="TraceSearchParams: eps_random must be in"):
        TraceSearchParams(eps_random=2.0)
    with pytest.raises(ValueError, match="TraceSearchParams: population must be >= 1"):
        TraceSearchParams(population=0)
