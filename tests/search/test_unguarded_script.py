"""A search called at a script's top level, without the `if __name__ == "__main__":` guard,
runs in parallel: the spawned search workers do not execute the script again."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

SCRIPT = """
import autosched
from autosched import te, topi
from tests.sim_measurer import SimulatedMeasurer

print("script body ran", flush=True)


@autosched.register_workload
def small_matmul(n):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    return [a, b, topi.matmul(a, b)]


task = autosched.SearchTask(func=small_matmul, args=(16,))
params = autosched.SearchParams(n_jobs=2, population=64, generations=1, seed=0)
policy = autosched.SketchPolicy(task, params=params, verbose=0)
options = autosched.TuningOptions(
    num_measure_trials=8, num_measures_per_round=8, measurer=SimulatedMeasurer(task), verbose=0
)
result = autosched.auto_schedule(task, policy, options)
print("pool used:", policy.workers.use_pool, "best:", result.best_cost > 0, flush=True)
"""


def test_a_search_at_a_scripts_top_level_runs_in_parallel(tmp_path):
    script = tmp_path / "tune_me.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("script body ran") == 1, proc.stdout  # workers did not run it
    assert "pool used: True best: True" in proc.stdout
    assert "RuntimeError" not in proc.stderr and "in this process" not in proc.stderr, proc.stderr
