"""benchmarks/run_queue.py: queue files parse (or name their bad line), cores split evenly per
card, and the workers run every job once, one at a time per card, leaving what a deadline cut
off in pending.txt."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from benchmarks import run_queue
from benchmarks.run_queue import Job

QUEUE = """
# setting seed workload options
floor64 0 conv2d_bias_relu --sketch min_threads_per_sm=64
default 0 conv2d_bias_relu
floor64 1 depthwise --sketch min_threads_per_sm=64  # trailing comment
default 1 depthwise
"""


def test_parse_jobs_reads_lines_and_names_a_bad_one():
    jobs = run_queue.parse_jobs(QUEUE)
    assert [(j.name, j.seed, j.workload) for j in jobs] == [
        ("floor64", 0, "conv2d_bias_relu"),
        ("default", 0, "conv2d_bias_relu"),
        ("floor64", 1, "depthwise"),
        ("default", 1, "depthwise"),
    ]
    assert jobs[0].options == ("--sketch", "min_threads_per_sm=64") and jobs[1].options == ()
    assert run_queue.parse_jobs(jobs[0].line()) == [jobs[0]]
    with pytest.raises(ValueError, match="jobs line 2: expected NAME SEED WORKLOAD"):
        run_queue.parse_jobs("a 0 matmul\nb seven matmul\n")


def test_core_shares_split_evenly_and_refuse_too_few():
    assert run_queue.core_shares(list(range(31, -1, -1)), 2) == [
        list(range(16)),
        list(range(16, 32)),
    ]
    assert run_queue.core_shares([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="3 cores cannot give each of 4 GPUs one"):
        run_queue.core_shares([0, 1, 2], 4)


def test_command_places_each_search_in_its_own_folder(tmp_path):
    job = Job("floor64", 3, "matmul", ("--sketch", "min_threads_per_sm=64"))
    argv = run_queue.command(job, str(tmp_path), [4, 5, 6, 7], ["--trials", "256"])
    assert argv[1:3] == ["-m", "benchmarks.run"]
    assert argv[3:] == [
        "--workloads",
        "matmul",
        "--seeds",
        "3",
        "--n-jobs",
        "4",
        "--out",
        os.path.join(str(tmp_path), "floor64", "seed3", "matmul"),
        "--trials",
        "256",
        "--sketch",
        "min_threads_per_sm=64",
    ]


class FakeClock:
    """Time that advances only when a fake search runs."""

    def __init__(self):
        self.now, self.lock = 0.0, threading.Lock()

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def test_run_queue_runs_each_job_once_one_per_card_and_keeps_the_rest(tmp_path):
    jobs = run_queue.parse_jobs(QUEUE)
    clock, ran, busy, lock = FakeClock(), [], set(), threading.Lock()

    def launch(card, cores, argv, log, timeout):
        with lock:
            assert card not in busy, "two searches at once on one card"
            busy.add(card)
        ran.append((card, tuple(cores), argv[argv.index("--workloads") + 1], argv[-1]))
        clock.spend(60)
        with lock:
            busy.discard(card)
        return 0

    left = run_queue.run_queue(
        jobs, ["0", "1"], [[0, 1], [2, 3]], str(tmp_path), [], launch=launch, clock=clock
    )
    assert left == [] and len(ran) == 4
    assert {(card, cores) for card, cores, _, _ in ran} <= {("0", (0, 1)), ("1", (2, 3))}
    log = (tmp_path / "queue.log").read_text()
    assert log.count(" start ") == 4 and log.count(" end rc=0 ") == 4
    assert not (tmp_path / "pending.txt").exists()

    # A deadline that leaves room for one search: the rest are written back, in order.
    cut = tmp_path / "cut"
    clock2 = FakeClock()

    def slow(card, cores, argv, log, timeout):
        assert timeout is not None and timeout <= 100
        clock2.spend(80)
        return 0

    left = run_queue.run_queue(
        jobs, ["0"], [[0]], str(cut), [], deadline=100, expected=90, launch=slow, clock=clock2
    )
    assert left == jobs[1:]
    assert run_queue.parse_jobs((cut / "pending.txt").read_text()) == jobs[1:]


def test_launch_on_card_pins_the_search_to_its_card_and_cores(tmp_path):
    """The real launcher, on a stand-in search: the child sees only its card, only its cores
    and as many OpenMP threads; one that outlives its time is stopped with status 124."""
    cores = sorted(os.sched_getaffinity(0))[:1]
    log = tmp_path / "run.log"
    probe = (
        "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['OMP_NUM_THREADS'],"
        " sorted(os.sched_getaffinity(0)))"
    )
    rc = run_queue.launch_on_card("3", cores, [sys.executable, "-c", probe], str(log), 60)
    assert rc == 0
    assert log.read_text().split(None, 2) == ["3", "1", f"{cores}\n"]
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    assert run_queue.launch_on_card("0", cores, sleeper, str(log), 0.5) == 124


def test_main_names_bad_input_in_one_line(tmp_path, monkeypatch, capsys):
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("floor64 zero matmul\n")
    monkeypatch.setattr(sys, "argv", ["run_queue.py", str(jobs), "--gpus", "1"])
    assert run_queue.main() == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "run_queue: jobs line 1: expected NAME SEED WORKLOAD [options]: 'floor64 zero matmul'"
    ]
    jobs.write_text("floor64 0 matmul\n")
    monkeypatch.setattr(sys, "argv", ["run_queue.py", str(jobs), "--gpus", "0"])
    assert run_queue.main() == 2
    assert "no GPU found" in capsys.readouterr().err
