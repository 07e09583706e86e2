"""The device passes (autosched/lower/passes.py): the device program folds index digits
the analysis program keeps, is what `build` prints and what `run_cpu` interprets, and still
computes the DAG."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.codegen.build import build
from autosched.codegen.cuda import codegen_program
from autosched.lower import ir
from autosched.lower.device_passes import DEVICE_PASSES, device_program, fold_index_digits
from autosched.lower.ir_text import program_text
from autosched.lower.lowering import lower
from autosched.lower.verify import verifying_every_lowering
from autosched.task.evaluate import evaluate
from autosched.te.expr import BinOp
from autosched.te.visitor import walk
from tests.interpreter_check import assert_matches_dag, random_inputs
from tests.workloads_for_tests import SEED_001_TILES, SEED_001_VECTORS, conv2d_bias_relu_dag
from tests.workloads_for_tests import seed_conv_state as make_seed_conv_state


@pytest.fixture(scope="module")
def dag():
    return conv2d_bias_relu_dag(co=32, ci=4)


@pytest.fixture(scope="module")
def seed_conv_state(dag):
    return make_seed_conv_state(dag, {**SEED_001_TILES, "ff": (1, 8, 1, 1)}, SEED_001_VECTORS)


def shared_stores(program: ir.Program) -> list[ir.Store]:
    """The stores into shared memory: the cooperative fetches."""
    return [
        s
        for k in program.kernels
        for s in ir.iter_stmts(k.body)
        if isinstance(s, ir.Store) and s.buffer.scope == "shared"
    ]


def divisions(e) -> int:
    return sum(isinstance(n, BinOp) and n.op in ("floordiv", "floormod") for n in walk(e))


def test_the_passes_are_one_named_sequence():
    assert [p.name for p in DEVICE_PASSES] == [
        "fold_index_digits",
        "hoist_row_scalars",
        "approximate_exp",
        "drop_idle_barrier",
        "mark_single_allreduces",
        "warp_specialize",
    ]
    assert DEVICE_PASSES[0].rewrite is fold_index_digits


def test_device_program_folds_fetch_indices_the_analysis_program_keeps(seed_conv_state):
    analysis = lower(seed_conv_state)
    before = program_text(analysis)
    device = device_program(analysis)
    assert program_text(analysis) == before  # the analysis program is left as it was
    fetches = list(zip(shared_stores(analysis), shared_stores(device), strict=True))
    assert len(fetches) == 2
    for kept, folded in fetches:
        assert kept.index._key != folded.index._key
        assert divisions(folded.index) < divisions(kept.index)
    assert device.params is analysis.params and device.outputs is analysis.outputs


def test_build_prints_and_interprets_the_device_program(dag, seed_conv_state):
    built = build(dag, seed_conv_state)
    device = device_program(lower(seed_conv_state))
    assert built.source == codegen_program(device)
    assert built.source != codegen_program(lower(seed_conv_state))  # the printer folds nothing
    assert program_text(built.program) == program_text(device)
    inputs = random_inputs(dag)
    expected = evaluate(dag, inputs)
    assert_matches_dag(dag, device, seed_conv_state, inputs, expected)
    arrays = [inputs.get(a.name, np.full(a.shape, np.nan, a.dtype)) for a in built.args]
    results = dict(zip((a.name for a in built.args), built.run_cpu(*arrays), strict=True))
    for op in dag.outputs:
        np.testing.assert_allclose(results[op.name], expected[op.name], rtol=1e-4, atol=1e-5)


def test_lowering_verifies_in_the_tests(seed_conv_state):
    assert verifying_every_lowering()
    lower(seed_conv_state, verify=True)
