"""Run a queue of benchmark searches over every GPU of the machine, one at a time per card.

    python -m benchmarks.run_queue jobs.txt --out queue_out/ --deadline 540 -- --trials 256
    python -m benchmarks.run --merge queue_out/ --publish      # then: one table of all runs

jobs.txt holds one search per line, `NAME SEED WORKLOAD [run.py options]` (# starts a comment):
    floor64 0 conv2d_bias_relu --sketch min_threads_per_sm=64
    default 0 conv2d_bias_relu
Each line becomes `python -m benchmarks.run --workloads WORKLOAD --seeds SEED --n-jobs CORES --out
OUT/NAME/seedSEED/WORKLOAD` with the line's options and those after `--`. One worker per card
takes the next line whenever its card is free; a worker runs on its own share of the cores
(affinity, OMP_NUM_THREADS and --n-jobs), so that two searches never fight over the CPU (the cost
model's training threads slow down a hundredfold when they do) and each card's search sees what a
single-GPU machine of that share would. Interleave settings in the file so that a cut-off run
leaves both sides measured. With --deadline, no search starts that could not finish in time
(--expected seconds each) and a running one is stopped at the deadline; the lines never started
go to OUT/pending.txt, to run next time. OUT/queue.log says which card ran what, when, and how it
ended.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from benchmarks.report import REPO_ROOT  # where `python -m benchmarks.run` finds the package


@dataclasses.dataclass(frozen=True)
class Job:
    """One search: a setting's name, the seed, the suite workload and run.py options."""

    name: str
    seed: int
    workload: str
    options: tuple[str, ...] = ()

    def line(self) -> str:
        return shlex.join([self.name, str(self.seed), self.workload, *self.options])


def parse_jobs(text: str) -> list[Job]:
    """The jobs of a queue file; a bad line raises ValueError naming it."""
    jobs = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = shlex.split(raw, comments=True)
        if not words:
            continue
        if len(words) < 3 or not words[1].isdigit():
            raise ValueError(f"jobs line {number}: expected NAME SEED WORKLOAD [options]: {raw!r}")
        jobs.append(Job(words[0], int(words[1]), words[2], tuple(words[3:])))
    return jobs


def core_shares(cores: list[int], gpus: int) -> list[list[int]]:
    """The cores split into one contiguous, equal share per card (the remainder left idle)."""
    per = len(cores) // gpus if gpus > 0 else 0
    if per < 1:
        raise ValueError(f"{len(cores)} cores cannot give each of {gpus} GPUs one")
    ordered = sorted(cores)
    return [ordered[g * per : (g + 1) * per] for g in range(gpus)]


def count_gpus() -> int:
    """Cards visible to this process: CUDA_VISIBLE_DEVICES if set, else nvidia-smi's list."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listing.stdout.splitlines())


def command(job: Job, out: str, cores: list[int], common: list[str]) -> list[str]:
    """The `benchmarks.run` command line of one job on a share of `cores`."""
    return [
        sys.executable,
        "-m",
        "benchmarks.run",
        "--workloads",
        job.workload,
        "--seeds",
        str(job.seed),
        "--n-jobs",
        str(len(cores)),
        "--out",
        job_folder(out, job),
        *common,
        *job.options,
    ]


def job_folder(out: str, job: Job) -> str:
    return os.path.join(out, job.name, f"seed{job.seed}", job.workload)


# Pins itself to the cores given, then becomes the command: the affinity is set in the child
# without preexec_fn, which is unsafe when several threads start processes.
PINNED = "import os, sys; os.sched_setaffinity(0, {cores}); os.execvp(sys.argv[1], sys.argv[1:])"


def launch_on_card(
    card: str, cores: list[int], argv: list[str], log: str, timeout: float | None
) -> int:
    """Run one search on one card and its cores; its exit status (124 when stopped at the
    deadline), its output in `log`."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=card, OMP_NUM_THREADS=str(len(cores)))
    pinned = [sys.executable, "-c", PINNED.format(cores=sorted(cores)), *argv]
    with open(log, "w") as sink:
        try:
            return subprocess.run(
                pinned,
                env=env,
                cwd=REPO_ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            return 124


Launcher = Callable[[str, list[int], list[str], str, float | None], int]


def run_queue(
    jobs: list[Job],
    cards: list[str],
    shares: list[list[int]],
    out: str,
    common: list[str],
    deadline: float | None = None,
    expected: float = 90.0,
    launch: Launcher = launch_on_card,
    clock: Callable[[], float] = time.monotonic,
) -> list[Job]:
    """Run the jobs, one worker per card; returns the jobs never started (also written to
    OUT/pending.txt when there are any)."""
    os.makedirs(out, exist_ok=True)
    pending = collections.deque(jobs)
    lock = threading.Lock()
    start = clock()
    log_path = os.path.join(out, "queue.log")

    def note(text: str) -> None:
        with lock, open(log_path, "a") as log:
            log.write(f"{clock() - start:7.1f} s  {text}\n")

    def worker(card: str, cores: list[int]) -> None:
        while True:
            left = None if deadline is None else deadline - (clock() - start)
            if left is not None and left < expected:
                return
            with lock:
                if not pending:
                    return
                job = pending.popleft()
            folder = job_folder(out, job)
            os.makedirs(folder, exist_ok=True)
            note(f"gpu {card} start {job.line()}")
            rc = launch(
                card,
                cores,
                command(job, out, cores, common),
                os.path.join(folder, "run.log"),
                left,
            )
            note(f"gpu {card} end rc={rc} {job.line()}")

    threads = [
        threading.Thread(target=worker, args=(card, cores))
        for card, cores in zip(cards, shares, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left_over = list(pending)
    if left_over:
        with open(os.path.join(out, "pending.txt"), "w") as f:
            f.write("".join(job.line() + "\n" for job in left_over))
    return left_over


def main() -> int:
    argv = sys.argv[1:]
    common = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", help="queue file: NAME SEED WORKLOAD [run.py options] per line")
    ap.add_argument("--out", default="queue_out")
    ap.add_argument("--gpus", type=int, default=None, help="cards to use (default: every one)")
    ap.add_argument("--deadline", type=float, default=None, help="seconds from start")
    ap.add_argument(
        "--expected", type=float, default=90.0, help="seconds one search takes (with --deadline)"
    )
    ns = ap.parse_args(own)
    try:
        with open(ns.jobs) as f:
            jobs = parse_jobs(f.read())
        gpus = ns.gpus if ns.gpus is not None else count_gpus()
        if gpus < 1:
            raise ValueError("no GPU found (set --gpus or CUDA_VISIBLE_DEVICES)")
        shares = core_shares(list(os.sched_getaffinity(0)), gpus)
    except (OSError, ValueError) as err:
        print(f"run_queue: {err}", file=sys.stderr)
        return 2
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = visible.split(",") if visible else range(gpus)
    cards = [str(name).strip() for name in names][:gpus]
    left = run_queue(jobs, cards, shares, ns.out, common, ns.deadline, ns.expected)
    print(f"{len(jobs) - len(left)} of {len(jobs)} searches started; log: {ns.out}/queue.log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
