"""The scripts in examples/ run as the README tells users to run them (a fresh process, no GPU)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_cpu_tour_runs_sampled_schedules_against_numpy():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "cpu_tour.py"), "--states", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("data = PLACEHOLDER [1, 8, 7, 7]")
    assert out.count("matches numpy") == 3
    assert "s[conv2d_nchw].split(" in out  # the printed schedule


def test_the_readme_tour_runs_as_a_script(tmp_path):
    """The README's first Python block, saved as a script and run from another folder, prints
    the CUDA source and passes its own check against numpy."""
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "tour.py"
    script.write_text(tour)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "__global__" in done.stdout
