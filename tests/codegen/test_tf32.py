"""TF32 Tensor Cores for float32 matrix products (docs/TENSOR_CORES.md, "TF32"): the rounding
the interpreter emulates, the task option that lets the sketch rule match, sampled states that
lower to m16n16k8 warp statements, compute the TF32 product on the interpreter and compile,
and the option's way through task keys, records, references and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.compat import generate_sketches
from autosched.features.extract import extract_features
from autosched.lower import ir
from autosched.lower.interpreter import run_program
from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile, best_records
from autosched.sketch import SketchSampler
from autosched.sketch.utils import SketchParams
from autosched.task.search_task import SearchTask
from autosched.te.dtype import round_tf32
from measure.reference import compare_output, default_tolerance
from tests.compilers import needs_nvcc

SIZE = (64, 64, 64)  # N, M, K of the registered fp32 "matmul"


def tf32_task() -> SearchTask:
    return SearchTask("matmul", SIZE, allow_tf32=True)


def wmma_scopes(state) -> set[str]:
    return {s.scope for s in state.stages if s.scope.startswith("wmma")}


# ---- the rounding ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, bits",
    [
        (1.0, 0x3F800000),  # exact
        (1 + 2**-11, 0x3F802000),  # a tie: away from zero (nearest-even would give 1.0)
        (-(1 + 2**-11), 0xBF802000),  # a negative tie, away from zero too
        (1 + 2**-11 - 2**-23, 0x3F800000),  # just below the tie: down
        (1 + 3 * 2**-11, 0x3F804000),  # a tie between two mantissas
        (np.float32(3.4e38), 0x7F7FC000),  # large: 0x7F7FC99E rounds down
        (np.float32(3.4028235e38), 0x7F800000),  # float32's largest rounds past TF32's: inf
        (-np.inf, 0xFF800000),
    ],
)
def test_round_tf32_matches_cvt_rna(value, bits):
    got = round_tf32(np.array([value], np.float32)).view(np.uint32)[0]
    assert int(got) == bits, hex(int(got))


def test_round_tf32_keeps_nan_and_clears_13_bits():
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    assert not (round_tf32(x).view(np.uint32) & 0x1FFF).any()
    assert np.isnan(round_tf32(np.array([np.nan], np.float32))).all()


# ---- the option --------------------------------------------------------------------------------


def test_without_the_option_fp32_matmul_gets_no_tensor_core_sketch():
    plain = SearchTask("matmul", SIZE)
    assert not plain.allow_tf32
    assert not any(wmma_scopes(s) for s in generate_sketches(plain))
    (sketch,) = generate_sketches(tf32_task())
    assert wmma_scopes(sketch) == set(ir.FRAGMENT_SCOPES)


def test_sampled_tf32_states_are_m16n16k8_and_compute_the_tf32_product():
    sampler = SketchSampler(generate_sketches(tf32_task()), params=SketchParams(allow_tf32=True))
    states = sampler.sample(2, 0)
    assert len(states) == 2, sampler.rejected
    rng = np.random.default_rng(1)
    A, B = (rng.uniform(-1, 1, (64, 64)).astype(np.float32) for _ in range(2))
    tf32_ref = (round_tf32(A).astype(np.float64) @ round_tf32(B).astype(np.float64)).astype(
        np.float32
    )
    fp32_ref = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    rtol, atol = default_tolerance(["float32", "tf32"])
    for state in states:
        program = sampler.programs[state.key()]
        stmts = [s for k in program.kernels for s in ir.iter_stmts(k.body)]
        mmas = [s for s in stmts if isinstance(s, ir.FragmentMma)]
        assert mmas and all(s.macs() == 16 * 16 * 8 and ir.is_tf32(s.a) for s in mmas)
        assert ir.tile_shape(mmas[0].a) == (16, 8) and ir.tile_shape(mmas[0].b) == (8, 16)
        assert np.isfinite(extract_features(program)).all()
        code = state.dag.print_python_code_from_state(state)  # the fp16 path's steps
        for intrinsic in ("load_matrix_a", "load_matrix_b", "mma_sync", "store_matrix"):
            assert f'"wmma.{intrinsic}")' in code
        assert "split(T_matmul_wmma_accumulator_k, factor=8)" in code  # K in steps of 8
        out = {"A": A, "B": B, "T_matmul": np.zeros((64, 64), np.float32)}
        run_program(program, out)
        got = out["T_matmul"]
        # the same rounded inputs: only the float32 rounding of the per-mma sums differs
        np.testing.assert_allclose(got, tf32_ref, rtol=1e-5, atol=1e-5)
        assert np.abs(got - fp32_ref).max() > 1e-4  # the inputs were rounded
        assert compare_output("T_matmul", got, fp32_ref, rtol, atol) is None


@needs_nvcc
def test_a_tf32_state_compiles_for_sm90_without_spills():
    from autosched.codegen.cuda import codegen_program
    from autosched.lower.device_passes import device_program
    from measure.builder import compile_resources

    wmma = SketchParams(allow_tf32=True, tensor_core_instructions=("wmma",))  # mma: elsewhere
    sampler = SketchSampler(generate_sketches(tf32_task()), params=wmma)
    (state,) = sampler.sample(1, 3)
    source = codegen_program(device_program(sampler.programs[state.key()]))
    assert "precision::tf32" in source and "__float_to_tf32" in source
    assert "fragment<nvcuda::wmma::accumulator, 16, 16, 8, float>" in source
    resources = compile_resources(source, arch="sm_90")
    assert not [r for r in resources.values() if r.spill_bytes]


# ---- how the option travels ----------------------------------------------------------------------


def test_the_option_is_part_of_the_workload_key():
    plain, tf32 = SearchTask("matmul", SIZE), tf32_task()
    assert plain.workload_key != tf32.workload_key
    assert tf32.compute_dag.workload_key == tf32.workload_key
    rebuilt = SearchTask(workload_key=tf32.workload_key)  # as resume and the records do
    assert rebuilt.allow_tf32 and rebuilt.workload_key == tf32.workload_key
    assert rebuilt.compute_dag.canonical_text() == plain.compute_dag.canonical_text()


def test_records_of_the_two_tasks_do_not_mix(tmp_path):
    log = tmp_path / "log.json"
    record = RecordToFile(log)
    for task, cost in ((SearchTask("matmul", SIZE), 2.0), (tf32_task(), 1.0)):
        inp = MeasureInput(task.workload_key, (), dag=task.compute_dag.serialized())
        record([inp], [MeasureRecordResult((cost,))])
    best = best_records(log)
    assert {k: r[1].costs for k, r in best.items()} == {
        SearchTask("matmul", SIZE).workload_key: (2.0,),
        tf32_task().workload_key: (1.0,),
    }


def test_the_reference_of_a_tf32_task_has_the_tf32_tolerance():
    from autosched.search.program_measurer import task_reference
    from measure.artifact import ArgSpec

    args = [
        ArgSpec("A", (64, 64), "float32"),
        ArgSpec("B", (64, 64), "float32"),
        ArgSpec("T_matmul", (64, 64), "float32", is_output=True),
    ]
    plain = task_reference(SearchTask("matmul", SIZE), args)
    tf32 = task_reference(tf32_task(), args)
    assert (tf32.rtol, tf32.atol) == default_tolerance(["float32", "tf32"]) == (1e-2, 1e-2)
    assert (plain.rtol, plain.atol) == default_tolerance(["float32"])


def test_the_policy_hands_the_option_to_its_workers():
    from autosched.search.policy import SearchParams, SketchPolicy
    from autosched.search.workers import TaskContext

    policy = SketchPolicy(tf32_task(), params=SearchParams(n_jobs=1), verbose=0)
    spec = policy.workers.spec
    assert spec.sketch_params.allow_tf32 and spec.workload_key == tf32_task().workload_key
    assert wmma_scopes(policy.sketches[0]) == set(ir.FRAGMENT_SCOPES)
    rebuilt = TaskContext.from_spec(spec)  # what a worker process does
    assert wmma_scopes(rebuilt.sampler.plans[0].sketch) == set(ir.FRAGMENT_SCOPES)


def test_tune_takes_tf32():
    from autosched.cli.app import build_parser
    from autosched.cli.workload import resolve

    ns = build_parser().parse_args(["tune", "matmul", "64", "64", "64", "--tf32"])
    assert ns.tf32
    assert resolve(ns.workload, ns.args).task(allow_tf32=ns.tf32).allow_tf32
    assert not build_parser().parse_args(["tune", "matmul"]).tf32
