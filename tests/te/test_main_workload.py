"""A workload defined in a script's `__main__` (the README's tour run as a script): the search's
worker processes rebuild it from its serialised DAG, in parallel, and the record log the script
writes carries the DAG, so `autosched show LOG` works in a fresh process without the script."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import random, sys, warnings

    import autosched
    from autosched import te, topi
    from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile
    from autosched.search.workers import TaskContext, TaskSpec, Workers


    @autosched.register_workload
    def conv2d_layer(N, H, W, CO, CI, KH, KW, stride, padding):
        data = te.placeholder((N, CI, H, W), name="data")
        kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
        bias = te.placeholder((1, CO, 1, 1), name="bias")
        conv = topi.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1)
        return [data, kernel, bias, topi.nn.relu(conv + bias)]


    if __name__ == "__main__":
        warnings.simplefilter("error")  # a fallback to one process would raise
        task = autosched.SearchTask(func=conv2d_layer, args=(1, 7, 7, 16, 8, 3, 3, 1, 1))
        dag, hw = task.compute_dag, task.hardware_params
        workers = Workers(TaskContext(dag, hw), TaskSpec.of(dag, hw), n_jobs=2)
        sampled = workers.sample(16, random.Random(0))
        assert workers.use_pool and len(sampled) == 16, (workers.use_pool, len(sampled))
        inputs = [MeasureInput(task.workload_key, r, dag=dag.serialized()) for r, _, _ in sampled]
        results = [MeasureRecordResult((1e-5 * (k + 1),)) for k in range(len(inputs))]
        RecordToFile(sys.argv[1])(inputs, results)
        print(task.workload_key)
    """
)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_main_workload_samples_in_parallel_and_its_log_shows_without_the_script(tmp_path):
    script = tmp_path / "tour.py"
    script.write_text(SCRIPT)
    log = tmp_path / "tour.json"
    run = subprocess.run(
        [sys.executable, str(script), str(log)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    key = run.stdout.strip().splitlines()[-1]
    assert json.loads(key)[0] == "__main__:conv2d_layer"
    lines = log.read_text().splitlines()
    assert len(lines) == 16
    assert "dag" in json.loads(lines[0])["task"]  # the first record of the task carries it
    assert all("dag" not in json.loads(line)["task"] for line in lines[1:])

    script.unlink()  # the fresh process has no way to import the workload's function
    show = subprocess.run(
        [sys.executable, "-m", "autosched", "show", str(log)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert show.returncode == 0, show.stderr
    assert "__main__:conv2d_layer" in show.stdout and "16 records" in show.stdout
    assert "10.00 us" in show.stdout  # the best record
    assert "s[" in show.stdout or ".split(" in show.stdout  # the python schedule
