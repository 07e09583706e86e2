"""One (max, sum) exchange for a softmax over a thread-block cluster (lower/online_exchange.py,
the init rule sketch/online_exchange.py): with `online_exchange` on the sum of exponentials the
kernel takes one cluster barrier for both statistics instead of two, and computes the same
softmax on the interpreter (whose cluster checks make a missing barrier an error); the search
draws both forms; a stage that cannot exchange online is refused."""

from __future__ import annotations

import pytest

from autosched.errors import LoweringError
from autosched.lower import cluster_ir as ci
from autosched.lower import ir
from autosched.lower.lowering import lower
from autosched.schedule.steps import print_python_schedule, replay
from autosched.search.mutations import structure_key
from autosched.sketch import SketchSampler, generate_sketches
from autosched.sketch.params import SketchParams
from autosched.te.expr import Reduce
from tests.interpreter_check import interpret_and_compare
from tests.sketch.test_row_cluster import DAGS, clustered

CLUSTERS = SketchParams(row_cluster_sizes=(2, 4))


def sampled(name: str, n: int):
    dag = DAGS[name]()
    sketches = clustered(generate_sketches(dag, params=CLUSTERS))
    # (without the register states' streaming twins, which exchange as their plain forms do)
    sketches = [s for s in sketches if not any(st.stream_reads for st in s.stages)]
    sampler = SketchSampler(sketches, params=CLUSTERS)
    return dag, sampler.sample(n, 0)


def with_online(state, on: int):
    i = next(k for k, s in enumerate(state.stages) if s.name == "T_softmax_expsum")
    return state.pragma(i, 0, "online_exchange", on)


def barriers(program: ir.Program) -> int:
    (k,) = program.kernels
    return sum(isinstance(s, ci.ClusterBarrier) for s in ir.iter_stmts(k.body))


def test_one_exchange_computes_the_softmax():
    dag, states = sampled("softmax", 4)
    drawn = set()
    for state in states:
        drawn.add(state["T_softmax_expsum"].online_exchange)
        for on, exchanges in ((0, 2), (1, 1)):
            chosen = with_online(state, on)
            program = lower(chosen, verify=True)
            assert barriers(program) == exchanges + 1  # and the last, before blocks exit
            interpret_and_compare(dag, program, rtol=1e-4)
        assert replay(dag, chosen.steps) == chosen
        assert '"online_exchange", 1)' in print_python_schedule(chosen)
        # the two forms are decisions of one sketch to the search's crossover
        keys = {structure_key(with_online(state, on).key()) for on in (0, 1)}
        assert len(keys) == 1
    assert drawn == {False, True}  # the init rule draws both forms


def test_one_exchange_computes_the_centred_layer_norm():
    """Its (mean, variance) pairs merged once (Chan): one cluster barrier, the same layer norm;
    the init rule draws both forms, one sketch to the search."""
    dag, states = sampled("layer_norm", 4)
    drawn = set()
    for state in states:
        i = next(k for k, s in enumerate(state.stages) if s.name == "T_layer_norm_var")
        drawn.add(state.stages[i].online_exchange)
        for on, exchanges in ((0, 2), (1, 1)):
            chosen = state.pragma(i, 0, "online_exchange", on)
            program = lower(chosen, verify=True)
            assert barriers(program) == exchanges + 1
            interpret_and_compare(dag, program, rtol=1e-5)
        keys = {structure_key(state.pragma(i, 0, "online_exchange", on).key()) for on in (0, 1)}
        assert len(keys) == 1
    assert drawn == {False, True}


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_a_sum_of_no_exponentials_cannot_exchange_online(name):
    _, (state,) = sampled(name, 1)
    i = next(
        k
        for k, s in enumerate(state.stages)
        if isinstance(getattr(s.op, "body", None), Reduce) and s.op.body.reducer.name == "sum"
    )
    with pytest.raises(LoweringError, match="cannot exchange online with its max"):
        lower(state.pragma(i, 0, "online_exchange", 1))


def test_a_sum_asking_for_it_outside_a_cluster_is_refused():
    dag = DAGS["softmax"]()
    whole_rows = SketchParams(row_cluster_sizes=())
    (state,) = SketchSampler(generate_sketches(dag, params=whole_rows), params=whole_rows).sample(
        1, 0
    )
    with pytest.raises(LoweringError, match="cannot exchange online with its max"):
        lower(with_online(state, 1))


@pytest.mark.parametrize("name", ["layer_norm_moments", "rms_norm"])
def test_one_reduction_normalisations_exchange_once(name):
    """Layer norm's moments form (the mean of x and of x^2, one reduction of two outputs a
    row) and RMSNorm exchange their statistics in one round already."""
    dag, states = sampled(name, 2)
    for state in states:
        assert barriers(lower(state)) == 2  # one exchange, and the last
