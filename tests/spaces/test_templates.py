"""autosched.spaces templates (AutoTVM style): knobs and config spaces, the seed's conv2d template
(its space as the tutorial prints it, its States against the hand-written one and numpy), the
tuners with the simulated measurer, their records and apply_history_best."""

from __future__ import annotations

import random

import pytest

import autosched.spaces.conv2d_template  # noqa: F401 (registers the tutorial's template)
from autosched import te, topi
from autosched.errors import AutoschedError
from autosched.records import RecordToFile, load_records
from autosched.spaces.config import ConfigSpace
from autosched.spaces.history import apply_history_best
from autosched.spaces.knobs import AnnotateSpace, ReorderSpace, SplitSpace
from autosched.spaces.model_tuner import XGBTuner
from autosched.spaces.template import TemplateTask, template
from autosched.spaces.tuners import GATuner, GridSearchTuner, RandomTuner
from tests.interpreter_check import lower_and_compare
from tests.sim_measurer import SimulatedMeasurer
from tests.workloads_for_tests import AUTOTVM_CONV_CFG, autotvm_conv_state, conv2d_dag

SEED_ARGS = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
SMALL_ARGS = (1, 7, 7, 16, 8, 3, 3, (1, 1), (1, 1))

SEED_SPACE = """\
ConfigSpace (len=10454400, space_map=
   0 tile_f: Split(policy=factors, product=512, num_outputs=4) len=220
   1 tile_y: Split(policy=factors, product=7, num_outputs=4) len=4
   2 tile_x: Split(policy=factors, product=7, num_outputs=4) len=4
   3 tile_rc: Split(policy=factors, product=512, num_outputs=3) len=55
   4 tile_ry: Split(policy=factors, product=3, num_outputs=3) len=3
   5 tile_rx: Split(policy=factors, product=3, num_outputs=3) len=3
   6 auto_unroll_max_step: OtherOption([0, 512, 1500]) len=3
   7 unroll_explicit: OtherOption([0, 1]) len=2
)"""


@template("test/matmul")
def matmul_template(cfg, n, m, k):
    """A small matmul template with every kind of knob, to tune on the interpreter."""
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    C = topi.matmul(A, B)
    s = cfg.create_schedule([A, B, C])
    out = C.op.name
    i, j, _ = s[out].iters
    cfg.define_split("tile_i", i, num_outputs=3)
    cfg.define_split("tile_j", j, num_outputs=2, policy="power2")
    cfg.define_knob("inner_unroll", [0, 1])
    s, (bi, ti, ii) = cfg["tile_i"].apply(s, out, i.name)
    s, (jo, ji) = cfg["tile_j"].apply(s, out, j.name)
    cfg.define_reorder("inner", [ii, ji], policy="all")
    s, _ = cfg["inner"].apply(s, out, [ii, ji])
    cfg.define_annotate("ann", [ji], policy="try_unroll")
    if cfg["inner_unroll"].val:
        s = cfg["ann"].apply(s, out, [ji])
    s = s.bind(out, bi, "blockIdx.x").bind(out, ti, "threadIdx.x")
    return s


# ---- knobs and spaces -------------------------------------------------------------------------


def test_split_policies_count_as_autotvm():
    assert len(SplitSpace(512, 4)) == 220 and len(SplitSpace(7, 4)) == 4
    assert [e.value for e in SplitSpace(4, 2)] == [[-1, 1], [-1, 2], [-1, 4]]
    power2 = SplitSpace(12, 2, policy="power2")  # inner parts 1, 2, 4, 8 (a tail allowed)
    assert [e.size[1] for e in power2] == [1, 2, 4, 8]
    cand = SplitSpace(16, 3, policy="candidate", candidate=[[-1, 2, 4], [-1, 4, 2]])
    assert len(cand) == 2 and cand.index_of([-1, 4, 2]) == 1
    assert len(SplitSpace(64, 2, max_factor=8)) == 4
    with pytest.raises(AutoschedError):
        SplitSpace(8, 2, policy="nope")


def test_reorder_and_annotate_spaces():
    assert len(ReorderSpace(3)) == 6 and repr(ReorderSpace(3)) == "Reorder(policy=all)"
    assert len(ReorderSpace(3, "candidate", [[2, 1, 0]])) == 1
    assert len(AnnotateSpace(2, "try_unroll")) == 4 and len(AnnotateSpace(2, "try_unroll_vec")) == 9
    with pytest.raises(AutoschedError):
        AnnotateSpace(1, "candidate", [["spin"]])


def test_config_index_round_trip():
    space = ConfigSpace()
    space.define_split("a", 8, num_outputs=2)
    space.define_knob("b", [1, 2, 3])
    assert len(space) == 4 * 3
    for index in range(len(space)):
        config = space.get(index)
        assert space.index_of(space.knob_indices(index)) == index
        assert space.from_dict(config.to_dict()).index == index
    assert space.get(5).to_dict() == {"index": 5, "knobs": {"a": [-1, 2], "b": 2}}
    with pytest.raises(AutoschedError):
        space.get(len(space))


# ---- the seed's conv2d template ---------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_task():
    return TemplateTask("tutorial/conv2d_no_batching", SEED_ARGS)


def test_seed_space_prints_as_the_tutorial(seed_task):
    assert len(seed_task.config_space) == 10454400
    assert repr(seed_task.config_space) == SEED_SPACE


def test_seed_config_gives_the_hand_written_state(seed_task):
    knobs = {k: list(v) if isinstance(v, tuple) else v for k, v in AUTOTVM_CONV_CFG.items()}
    config = seed_task.config({"knobs": knobs})
    state = seed_task.instantiate(config)
    assert state.key() == autotvm_conv_state(conv2d_dag()).key()
    assert state.dag is seed_task.compute_dag
    assert str(config).startswith("[('tile_f', [-1, 2, 8, 2]), ('tile_y', [-1, 1, 1, 1])")


def test_reduced_shape_random_configs_match_numpy():
    """Random configs of the reduced conv that lower (within GPU limits) compute the conv."""
    task = TemplateTask("tutorial/conv2d_no_batching", SMALL_ARGS)
    rng, checked = random.Random(0), 0
    for _ in range(40):
        state = task.instantiate(rng.randrange(len(task.config_space)))
        try:
            lower_and_compare(task.compute_dag, state)
        except AutoschedError:
            continue  # over a GPU limit, as AutoTVM's invalid configs
        checked += 1
        if checked == 3:
            break
    assert checked == 3


def test_unknown_template_is_named():
    with pytest.raises(AutoschedError, match="no template 'nope'"):
        TemplateTask("nope", ())


# ---- tuners, records, apply_history_best ------------------------------------------------------


@pytest.fixture(scope="module")
def mm_task():
    return TemplateTask("test/matmul", (8, 8, 4))


@pytest.mark.parametrize(
    "make",
    [
        RandomTuner,
        GridSearchTuner,
        lambda t: GATuner(t, pop_size=4, elite_num=2),
        lambda t: XGBTuner(t, pool_size=12),
    ],
    ids=["random", "grid", "ga", "xgb"],
)
def test_tuner_logs_records_and_history_best(mm_task, make, tmp_path):
    log = str(tmp_path / "mm.json")
    tuner = make(mm_task)
    best = tuner.tune(8, SimulatedMeasurer(mm_task), [RecordToFile(log)], batch_size=4)
    records = list(load_records(log))
    assert len(records) == 8 and tuner.trials == 8
    assert len({inp.config["index"] for inp, _ in records}) == 8  # no config twice
    assert best is not None and best.mean_cost == min(r.mean_cost for _, r in records)
    history = apply_history_best(log, mm_task)
    assert history.config.index == tuner.best_index == tuner.best_config.index
    assert history.cost == best.mean_cost
    assert history.state.key() == history.input.steps
    with apply_history_best(log) as any_best:  # without the task: from the record alone
        assert any_best.state.key() == history.state.key()


def test_early_stopping(mm_task):
    tuner = GridSearchTuner(mm_task)
    tuner.tune(len(mm_task.config_space), SimulatedMeasurer(mm_task), early_stopping=4,
               batch_size=2)  # fmt: skip
    assert tuner.trials < len(mm_task.config_space)


# ---- resuming and showing a template log -----------------------------------------------------


@pytest.mark.parametrize(
    "make", [GridSearchTuner, lambda t: XGBTuner(t, pool_size=12)], ids=["grid", "xgb"]
)
def test_tuner_resumes_from_its_log_without_measuring_a_config_twice(mm_task, make, tmp_path):
    log = str(tmp_path / "mm.json")
    first = make(mm_task)
    first.tune(4, SimulatedMeasurer(mm_task), [RecordToFile(log)], batch_size=4)
    second = make(mm_task)
    assert second.load_history(log) == 4
    assert second.best_index == first.best_index and second.best_cost == first.best_cost
    best = second.tune(4, SimulatedMeasurer(mm_task), [RecordToFile(log)], batch_size=4)
    indices = [inp.config["index"] for inp, _ in load_records(log)]
    assert len(indices) == 8 and len(set(indices)) == 8
    assert best.mean_cost == min(r.mean_cost for _, r in load_records(log))


def test_show_prints_the_best_config_as_autotvm_does(mm_task, tmp_path, capsys):
    from autosched.cli import main

    log = str(tmp_path / "mm.json")
    tuner = RandomTuner(mm_task)
    tuner.tune(3, SimulatedMeasurer(mm_task), [RecordToFile(log)], batch_size=3)
    assert main(["show", log]) == 0
    out = capsys.readouterr().out
    assert f"  config {repr(tuner.best_config)}\n" in out
    assert "  config [('tile_i', [" in out and "kernel " in out and "s[" in out
