"""The contracts of the tuning loop's seams (`autosched.search.protocols`), one test per
contract, parametrised over every implementation: the sketch, trace and template searches are
`SearchPolicy`s (and the tuning loop drives each), `PolicyTuner` over either kind of policy is the
task scheduler's `TaskTuner`, and the GPU measurer (over a fake measure context) and the tests'
simulated one are `Measurer`s. All on the CPU, with small spaces."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import autosched
from autosched import te, topi
from autosched.records import MeasureRecordResult
from autosched.schedule.compute_dag import ComputeDAG
from autosched.search.auto_schedule import BestSoFar, TuningOptions, run_trials
from autosched.search.params import SearchParams
from autosched.search.policy import SketchPolicy
from autosched.search.program_measurer import ProgramMeasurer
from autosched.search.protocols import Measurer, SearchPolicy, TaskTuner
from autosched.search.tune_model import PolicyTuner
from autosched.spaces.model_tuner import XGBTuner
from autosched.spaces.stochastic_matmul import stochastic_matmul
from autosched.spaces.template import TemplateTask
from autosched.spaces.trace_search import TraceSearchParams, TraceSearchPolicy
from autosched.spaces.tuners import GATuner, GridSearchTuner, RandomTuner
from autosched.task.search_task import SearchTask
from measure import MeasureErrorKind, MeasureResult
from tests.sim_measurer import SimulatedMeasurer
from tests.spaces.test_templates import matmul_template

SMALL = SearchParams(population=16, generations=1, sample_init_min_population=8, n_jobs=1, seed=1)


def quick_model() -> autosched.XGBModel:
    """A cost model that trains in a few boosting rounds (what it ranks does not matter here)."""
    return autosched.XGBModel(nthread=1, seed=0, num_boost_round=5)


def matmul_task() -> SearchTask:
    a = te.placeholder((32, 16), name="A")
    b = te.placeholder((16, 32), name="B")
    return SearchTask(dag=ComputeDAG([a, b, topi.matmul(a, b)]))


def sketch_search():
    task = autosched.SearchTask("matmul", (32, 32, 16))
    return task, SketchPolicy(task, quick_model(), SMALL, verbose=0)


def trace_search():
    task = matmul_task()
    params = TraceSearchParams(population=8, generations=1, seed=0)
    return task, TraceSearchPolicy(task, stochastic_matmul, params, quick_model())


def template_search(make):
    def build():
        task = TemplateTask(matmul_template, (8, 8, 4))
        return task, make(task)

    return build


POLICIES = {
    "sketch": sketch_search,
    "trace": trace_search,
    "template-random": template_search(RandomTuner),
    "template-grid": template_search(GridSearchTuner),
    "template-ga": template_search(lambda t: GATuner(t, pop_size=4, elite_num=2)),
    "template-xgb": template_search(lambda t: XGBTuner(t, quick_model(), pool_size=12)),
}


def made_up_cost(state) -> float:
    """A deterministic cost per State (seconds), with every fifth State failed."""
    h = zlib.crc32(repr(state.key()).encode())
    return math.inf if h % 5 == 0 else 1e-6 * (1 + h % 97)


@pytest.mark.parametrize("make", POLICIES.values(), ids=POLICIES.keys())
def test_a_search_policy_hands_out_new_states_and_keeps_the_best_measured(make):
    task, policy = make()
    assert isinstance(policy, SearchPolicy)
    assert policy.best_state() is None
    seen: set = set()
    costs: dict = {}
    for _ in range(3):
        batch = policy.search_one_round(4)
        assert 0 < len(batch) <= 4
        keys = [s.key() for s in batch]
        assert len(set(keys)) == len(keys) and not set(keys) & seen, "a State handed out twice"
        seen.update(keys)
        batch_costs = [made_up_cost(s) for s in batch]
        for state, cost in zip(batch, batch_costs, strict=True):
            policy.add_measured(state, cost)
            costs[state.key()] = cost
        policy.update_model(batch, batch_costs)
        assert isinstance(policy.last_round, dict)
    best = policy.best_state()
    fastest = min(costs.values())
    if math.isfinite(fastest):
        assert best is not None and best[0] == fastest and costs[best[1].key()] == fastest
    else:
        assert best is None


@pytest.mark.parametrize("make", POLICIES.values(), ids=POLICIES.keys())
def test_the_tuning_loop_drives_every_search_policy(make):
    task, policy = make()
    measurer = SimulatedMeasurer(task)
    opts = TuningOptions(num_measure_trials=8, num_measures_per_round=4, verbose=0)
    best = BestSoFar()
    history = run_trials(task, policy, measurer, opts, best)
    trials = [h["trials"] for h in history]
    assert trials[-1] == 8 and all(
        0 < b - a <= 4 for a, b in zip([0, *trials[:-1]], trials, strict=True)
    )
    assert measurer.count == 8 and len(set(measurer.fingerprints)) == 8
    assert best.state is not None and math.isfinite(best.cost)
    assert policy.best_state() is not None and policy.best_state()[0] == best.cost


# ---- task tuners ------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [sketch_search, trace_search], ids=["sketch", "trace"])
def test_a_task_tuner_measures_what_it_is_asked_and_reports_its_best(make):
    task, policy = make()
    made: list[SimulatedMeasurer] = []

    def make_measurer() -> SimulatedMeasurer:
        made.append(SimulatedMeasurer(task))
        return made[-1]

    tuner = PolicyTuner(task, policy, make_measurer)
    assert isinstance(tuner, TaskTuner)
    assert tuner.curve == [] and tuner.best() is None and not made  # no measurer until asked
    bests = []
    for _ in range(2):
        measured, best_cost = tuner.tune(4)
        assert measured == 4 and tuner.best() is not None and tuner.best()[0] == best_cost
        bests.append(best_cost)
    assert len(made) == 1 and made[0].count == 8 and bests[1] <= bests[0]
    tuner.close()


# ---- measurers --------------------------------------------------------------------------------


class FakeContext:
    """A measure context without a GPU: every artifact runs, at a cost from its source."""

    def __init__(self) -> None:
        self.closed = False

    def measure_batch(self, artifacts, references=None, cost_bound=None):
        assert references, "the measurer hands its task's reference over"
        return [
            MeasureResult((c, c), MeasureErrorKind.NO_ERROR, "", 0.0, 0.0, {})
            for c in (1e-6 * (1 + len(a.source) % 89) for a in artifacts)
        ]

    def gpu_count(self) -> int:
        return 1

    def close(self) -> None:
        self.closed = True


def gpu_measurer(task, callbacks):
    return ProgramMeasurer(task, callbacks=callbacks, context=FakeContext())


MEASURERS = {"program": gpu_measurer, "simulated": SimulatedMeasurer}


@pytest.mark.parametrize("make", MEASURERS.values(), ids=MEASURERS.keys())
def test_a_measurer_gives_one_result_per_state_in_order_and_tells_its_callbacks(make):
    task = autosched.SearchTask("matmul", (32, 32, 16))
    states = autosched.sample_initial_population(autosched.generate_sketches(task), 3, 0)
    seen: list = []
    measurer = make(task, [lambda inputs, results: seen.append((inputs, results))])
    assert isinstance(measurer, Measurer)
    results = measurer.measure(states)
    assert len(results) == len(states)
    assert all(isinstance(r, MeasureRecordResult) and r.ok for r in results)
    assert len(seen) == 1
    inputs, told = seen[0]
    assert [i.steps for i in inputs] == [s.key() for s in states] and list(told) == results
    assert {i.workload_key for i in inputs} == {task.workload_key}
    assert set(measurer.last_times) == {"build", "run"}
    assert all(v >= 0 for v in measurer.last_times.values())
    assert np.isfinite([r.mean_cost for r in results]).all()
    measurer.close()
