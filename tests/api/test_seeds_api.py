"""TVM auto_scheduler's conv2d tutorial, run as written with `import autosched as
auto_scheduler`: on the CPU up to the measurement (records written from a sampled state and a
made-up result), and the whole of it on the GPU (`gpu` marker)."""

from __future__ import annotations

import numpy as np
import pytest

import autosched as auto_scheduler
from autosched import te, topi
from autosched.compat import UnavailableRunner
from autosched.errors import AutoschedError
from autosched.records import MeasureInput, MeasureRecordResult
from autosched.topi.testing import conv2d_nchw_python
from measure import GPUUnavailableError, LocalRunner


@auto_scheduler.register_workload
def conv2d_layer(N, H, W, CO, CI, KH, KW, stride, padding):
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    bias = te.placeholder((1, CO, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    out = topi.nn.relu(conv + bias)
    return [data, kernel, bias, out]


# The tutorial's last ResNet-50 layer has 512 channels; the CPU interpreter runs a narrow one.
SMALL = (1, 7, 7, 16, 8, 3, 3, (1, 1), (1, 1))
SEED = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))


class TargetLike:
    """What `tvm.target.Target("cuda")` prints."""

    def __str__(self) -> str:
        return "cuda -keys=cuda,gpu -arch=sm_90 -max_num_threads=1024 -thread_warp_size=32"


def seed_arrays(shape):
    """The tutorial's inputs and numpy answer."""
    N, H, W, CO, CI, KH, KW, strides, padding = shape
    rng = np.random.default_rng(0)
    data_np = rng.uniform(size=(N, CI, H, W)).astype(np.float32)
    weight_np = rng.uniform(size=(CO, CI, KH, KW)).astype(np.float32)
    bias_np = rng.uniform(size=(1, CO, 1, 1)).astype(np.float32)
    conv_np = conv2d_nchw_python(data_np, weight_np, strides, padding)
    out_np = np.maximum(conv_np + bias_np, 0.0)
    return data_np, weight_np, bias_np, out_np


def write_log(task, path, n_states=3):
    """A record log as RecordToFile writes it during a search: sampled states, made-up costs."""
    sketches = auto_scheduler.generate_sketches(task)
    states = auto_scheduler.sample_initial_population(sketches, n_states, 0)
    inputs = [MeasureInput(task.workload_key, s.key()) for s in states]
    results = [MeasureRecordResult((1e-4 * (i + 2),)) for i in range(len(states))]
    results[-1] = MeasureRecordResult((5e-5,))  # the best: the last sampled state
    auto_scheduler.RecordToFile(str(path))(inputs, results)
    return states


@pytest.mark.parametrize("target", ["cuda", "cuda -arch=sm_90", TargetLike()])
def test_create_task_takes_the_target_as_tvm_spells_it(target):
    task = auto_scheduler.create_task(conv2d_layer, SEED, target)
    assert task.target == "cuda"
    assert task.workload_key == auto_scheduler.SearchTask(conv2d_layer, SEED).workload_key


def test_create_task_opts_into_tf32_only_when_asked():
    plain = auto_scheduler.create_task(conv2d_layer, SEED, "cuda")
    tf32 = auto_scheduler.create_task(conv2d_layer, SEED, "cuda", allow_tf32=True)
    assert not plain.allow_tf32 and tf32.allow_tf32
    assert (
        tf32.workload_key
        == auto_scheduler.SearchTask(conv2d_layer, SEED, allow_tf32=True).workload_key
    )
    assert tf32.workload_key != plain.workload_key


def test_create_task_refuses_another_target():
    with pytest.raises(AutoschedError, match="CUDA only"):
        auto_scheduler.create_task(conv2d_layer, SEED, "llvm")


def test_the_task_prints_the_tutorials_dag():
    task = auto_scheduler.create_task(conv2d_layer, SEED, TargetLike())
    lines = str(task.compute_dag).splitlines()
    assert lines[0] == "data = PLACEHOLDER [1, 512, 7, 7]"
    assert "conv2d_nchw(nn, ff, yy, xx) += " in lines[3]
    assert lines[-1] == "compute(i0, i1, i2, i3) = max(T_add[i0, i1, i2, i3], 0f)"


def test_measure_context_configures_the_runner(tmp_path):
    measure_ctx = auto_scheduler.LocalRPCMeasureContext(min_repeat_ms=300)
    runner = measure_ctx.runner
    assert isinstance(runner, LocalRunner | UnavailableRunner)
    assert runner.min_repeat_ms == 300 and runner.number == 3 and runner.timeout == 10.0
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=10,
        runner=measure_ctx.runner,
        measure_callbacks=[auto_scheduler.RecordToFile(str(tmp_path / "conv2d.json"))],
        verbose=2,
    )
    assert tune_option.runner is runner
    if isinstance(runner, UnavailableRunner):  # no pycuda: the error comes at measurement
        with pytest.raises(GPUUnavailableError):
            runner.run([], [])
    del measure_ctx


def test_tuning_options_take_tvms_local_and_refuse_other_names():
    options = auto_scheduler.TuningOptions(builder="local", runner="local")
    assert options.builder == options.runner == "local"
    with pytest.raises(ValueError, match="runner is an object or \"local\", not 'rpc'"):
        auto_scheduler.TuningOptions(runner="rpc")


def test_the_record_flow_replays_builds_and_runs_on_the_cpu(tmp_path):
    task = auto_scheduler.create_task(conv2d_layer, SMALL, "cuda")
    log_file = str(tmp_path / "conv2d.json")
    states = write_log(task, log_file)

    inp, res = auto_scheduler.load_best(log_file, task.workload_key)
    assert res.mean_cost == pytest.approx(5e-5)
    assert inp.state == states[-1]
    code = task.compute_dag.print_python_code_from_state(inp.state)
    assert code == task.compute_dag.print_python_schedule(inp.state)
    assert "s[conv2d_nchw].split(" in code

    sch, args = task.compute_dag.apply_steps_from_state(inp.state)
    assert sch.dag is task.compute_dag and sch == states[-1]
    assert [t.name for t in args] == ["data", "kernel", "bias", "compute"]
    func = auto_scheduler.build(sch, args)
    assert func.source == auto_scheduler.build(task.compute_dag, sch).source
    assert func.entry_name == func.launches[0].kernel_name

    data_np, weight_np, bias_np, out_np = seed_arrays(SMALL)
    (out,) = func.run_cpu(data_np, weight_np, bias_np)
    np.testing.assert_allclose(out_np, out, rtol=1e-3)
    out_given = np.zeros_like(out_np)
    func.run_cpu(data_np, weight_np, bias_np, out_given)  # outputs passed: written in place
    np.testing.assert_allclose(out_np, out_given, rtol=1e-3)
    inputs = {"data": data_np, "kernel": weight_np, "bias": bias_np}
    ref = auto_scheduler.evaluate(task.compute_dag, inputs)
    np.testing.assert_allclose(ref["compute"], out_np, rtol=1e-5)


def test_build_checks_the_tensor_list():
    task = auto_scheduler.create_task(conv2d_layer, SMALL, "cuda")
    sketches = auto_scheduler.generate_sketches(task)
    (state,) = auto_scheduler.sample_initial_population(sketches, 1, 1)
    _, args = task.compute_dag.apply_steps_from_state(state)
    with pytest.raises(AutoschedError, match="DAG tensors"):
        auto_scheduler.build(state, args[::-1])
    with pytest.raises(AutoschedError, match="CUDA only"):
        auto_scheduler.build(state, args, "llvm")


def test_resume_objects_load_the_log(tmp_path):
    task = auto_scheduler.create_task(conv2d_layer, SMALL, "cuda")
    log_file = str(tmp_path / "conv2d.json")
    states = write_log(task, log_file)
    cost_model = auto_scheduler.XGBModel()
    assert cost_model.update_from_file(log_file) == len(states)
    search_policy = auto_scheduler.SketchPolicy(
        task, cost_model, init_search_callbacks=[auto_scheduler.PreloadMeasuredStates(log_file)]
    )
    assert len(search_policy.measured) == len(states)
    cost, best = search_policy.best_state()
    assert cost == pytest.approx(5e-5) and best == states[-1]


@pytest.mark.gpu
def test_the_whole_tutorial_on_the_gpu(tmp_path, capsys):
    target = TargetLike()
    N, H, W, CO, CI, KH, KW, strides, padding = SEED
    task = auto_scheduler.create_task(conv2d_layer, SEED, target)
    print(task.compute_dag)

    log_file = str(tmp_path / "conv2d.json")
    measure_ctx = auto_scheduler.LocalRPCMeasureContext(min_repeat_ms=300)
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=10,
        runner=measure_ctx.runner,
        measure_callbacks=[auto_scheduler.RecordToFile(log_file)],
    )
    sch, args = auto_scheduler.auto_schedule(task, tuning_options=tune_option)
    del measure_ctx

    func = auto_scheduler.build(sch, args)
    data_np, weight_np, bias_np, out_np = seed_arrays(SEED)
    out_gpu = np.empty(out_np.shape, np.float32)
    func(data_np, weight_np, bias_np, out_gpu)
    np.testing.assert_allclose(out_np, out_gpu, rtol=1e-3)

    evaluator = func.time_evaluator(func.entry_name, None, min_repeat_ms=500)
    result = evaluator(data_np, weight_np, bias_np, out_gpu)
    print("Execution time of this operator: %.3f ms" % (np.median(result.results) * 1000))
    assert len(result.results) == 1 and 0 < result.mean < 0.1
    assert "Execution time of this operator: " in capsys.readouterr().out

    inp, res = auto_scheduler.load_best(log_file, task.workload_key)
    print(task.compute_dag.print_python_code_from_state(inp.state))
    sch, args = task.compute_dag.apply_steps_from_state(inp.state)
    func = auto_scheduler.build(sch, args)
    out_gpu[...] = 0
    func(data_np, weight_np, bias_np, out_gpu)
    np.testing.assert_allclose(out_np, out_gpu, rtol=1e-3)

    cost_model = auto_scheduler.XGBModel()
    cost_model.update_from_file(log_file)
    search_policy = auto_scheduler.SketchPolicy(
        task, cost_model, init_search_callbacks=[auto_scheduler.PreloadMeasuredStates(log_file)]
    )
    measure_ctx = auto_scheduler.LocalRPCMeasureContext(min_repeat_ms=300)
    tune_option = auto_scheduler.TuningOptions(
        num_measure_trials=5,
        runner=measure_ctx.runner,
        measure_callbacks=[auto_scheduler.RecordToFile(log_file)],
    )
    sch, args = auto_scheduler.auto_schedule(task, search_policy, tuning_options=tune_option)
    del measure_ctx
    assert len(list(auto_scheduler.load_records(log_file))) == 15
