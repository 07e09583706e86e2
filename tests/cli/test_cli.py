"""The `autosched` command line, run as a separate Python process in a temporary directory.

Bad input must end in one line on stderr starting with `autosched: `, exit status 2, and no
traceback. Spawning Python costs about a second, so most tests hand a batch of command lines to
one process (`run_batch`), which calls `autosched.cli.main` on each with the current directory
taken off sys.path, as the installed `autosched` console script has it.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import subprocess
import sys

import pytest

import autosched
from autosched.records import MeasureInput, MeasureRecordResult, RecordToFile, load_records
from autosched.task.workloads import SUITE
from tests.workloads_for_tests import SEED_002_TILES, SEED_002_VECTORS, seed_conv_state

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Runs `main(argv)` for each argv of a JSON list; prints a JSON list of {rc, out, err}.
DRIVER = r"""
import contextlib, io, json, os, sys, traceback
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
from autosched.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except BaseException:
            traceback.print_exc()
            rc = "raised"
    results.append({"rc": rc, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""

WORKLOAD_MODULE = """
import autosched
from autosched import te, topi


@autosched.register_workload
def small_matmul(n, m, k):
    a = te.placeholder((n, k), name="A")
    b = te.placeholder((k, m), name="B")
    return [a, b, topi.matmul(a, b)]


@autosched.register_workload
def fails(n):
    raise ValueError("n is odd")


def unregistered(n):
    return []
"""


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def run_batch(cwd: pathlib.Path, *argvs: str | list[str]) -> list[dict]:
    """Run each command line (a string is split on spaces) in one process; their results."""
    lists = [a.split() if isinstance(a, str) else a for a in argvs]
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(lists)],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_refused(result: dict, *words: str) -> str:
    """Exit status 2, one stderr line `autosched: ...` holding `words`, no traceback."""
    err = result["err"]
    assert result["rc"] == 2, result
    assert "Traceback" not in err and "Traceback" not in result["out"], err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("autosched: "), err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def assert_ok(result: dict) -> str:
    assert result["rc"] == 0, result
    assert "Traceback" not in result["err"], result["err"]
    return result["out"]


@pytest.fixture(scope="module")
def seed_records():
    """Three records of the seeds' conv2d schedule: 200 us, 100 us, and a wrong answer."""
    task = autosched.SearchTask("conv2d_bias_relu", (1, 7, 7, 512, 512, 3, 3, 1, 1))
    state = seed_conv_state(task.compute_dag, SEED_002_TILES, SEED_002_VECTORS)
    inp = MeasureInput(task.workload_key, tuple(s.to_record() for s in state.steps))
    return [
        ([inp, inp], [MeasureRecordResult((2e-4,)), MeasureRecordResult((1e-4,))]),
        ([inp], [MeasureRecordResult((), 6, "wrong answer")]),
    ]


def write_log(path: pathlib.Path, seed_records) -> pathlib.Path:
    callback = RecordToFile(str(path))
    for inputs, results in seed_records:
        callback(inputs, results)
    return path


def test_module_function_workloads_are_resolved_or_refused(tmp_path):
    (tmp_path / "mywl.py").write_text(WORKLOAD_MODULE)
    ok, *bad = run_batch(
        tmp_path,
        "dag mywl:small_matmul 4 4 4",
        "dag nosuchmodule:f 1",
        "dag mywl:nosuchfunction 1",
        "dag :small_matmul 1",
        "dag mywl: 1",
        "dag mywl:small_matmul 4 4",
        "dag mywl:small_matmul 4 4 four",
        "dag mywl:fails 3",
        "dag mywl:unregistered 3",
        "tune nosuchmodule:f 1",
    )
    out = assert_ok(ok)  # found in the current directory, though it is not on sys.path
    assert 'workload key: ["mywl:small_matmul", 4, 4, 4]' in out and "--- sketch 0 ---" in out
    expected = [
        ("no module named 'nosuchmodule'",),
        ("has no function 'nosuchfunction'",),
        ("module:function",),
        ("module:function",),
        ("cannot take the 2 arguments",),
        ("'four' is not a JSON value",),
        ("raised ValueError: n is odd",),
        ("not a registered workload",),
        ("no module named 'nosuchmodule'",),
    ]
    for result, words in zip(bad, expected, strict=True):
        assert_refused(result, *words)


def test_suite_workloads_use_the_given_shape_or_refuse_it(tmp_path):
    given, default, *bad = run_batch(
        tmp_path,
        "dag matmul 64 48 32",
        "dag softmax",
        "dag matmul 512 512",
        "dag matmul 64 48 1.5",
        "tune matmul 1 2",
    )
    out = assert_ok(given)
    assert "workload matmul(N=64, M=48, K=32): the given shape" in out
    assert 'workload key: ["matmul", 64, 48, 32]' in out
    out = assert_ok(default)
    assert "softmax(N=1024, M=1024): the suite's size" in out
    assert_refused(bad[0], "matmul(N, M, K) cannot take the 2 arguments")
    assert_refused(bad[1], "K=1.5 is not a non-negative integer")
    assert_refused(bad[2], "cannot take the 2 arguments")


def test_trial_counts_are_checked_before_any_search(tmp_path):
    results = run_batch(
        tmp_path,
        "tune matmul --trials 0",
        "tune matmul --trials -5",
        "tune matmul --per-round 0",
        "resume log.json --trials 0",
        "resume log.json --per-round 0",
        "tune matmul --n-jobs 0",
        "tune matmul --seed -1",
        "tune matmul --trials many",
    )
    for result in results:
        assert_refused(result, "argument --", "--help")


def test_files_that_are_not_record_logs_are_named_and_explained(tmp_path, seed_records):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "random.bin").write_bytes(bytes(range(128, 256)) * 4)
    (tmp_path / "folder").mkdir()
    (tmp_path / "fake.json.gz").write_text("plain text\n")
    (tmp_path / "config.json").write_text('{"name": "not a record", "size": 3}\n')
    (tmp_path / "pretty.json").write_text('{\n  "a": 1\n}\n')
    log = write_log(tmp_path / "log.json", seed_records)
    log.write_text(log.read_text() + "not json\n[1, 2]\n" + '{"v": 1, "task"')
    cases = {
        "empty.json": "is empty",
        "random.bin": "binary data",
        "folder": "is a directory",
        "fake.json.gz": "not gzip",
        "config.json": "without a record's fields",
        "pretty.json": "none of its 3 lines is a record",
        "missing.json": "does not exist",
    }
    commands = [f"{command} {name}" for command in ("show", "curve", "resume") for name in cases]
    *refused, malformed = run_batch(tmp_path, *commands, "show log.json")
    for command, result in zip(commands, refused, strict=True):
        name = command.split()[1]
        assert_refused(result, name, cases[name])
    # Malformed lines in a good log: one warning line in the command line's own format.
    assert "3 records, 2 correct" in assert_ok(malformed)
    lines = malformed["err"].splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("autosched: warning: skipped 3 lines of log.json that are not valid")


def test_curve_output_paths(tmp_path, seed_records):
    pytest.importorskip("matplotlib")
    write_log(tmp_path / "log.json", seed_records)
    (tmp_path / "a_file").write_text("")
    results = run_batch(
        tmp_path,
        "curve log.json -o missing_dir/c.png",
        "curve log.json -o a_file/c.png",
        "curve log.json -o /proc/autosched_curve.png",
        "curve log.json -o curve.xyz",
        f"curve log.json -o {tmp_path}",
        "curve log.json -o plain",
        "curve log.json -o curve.svg",
        "curve log.json --x time -o time.svg",
    )
    assert_refused(results[0], "missing_dir", "does not exist")
    assert_refused(results[1], "is not a directory")
    assert_refused(results[2], "cannot write /proc/autosched_curve.png")
    assert_refused(results[3], "unknown image format '.xyz'", "png")
    assert_refused(results[4], "is a directory")
    assert assert_ok(results[5]).strip() == "wrote plain.png"
    assert (tmp_path / "plain.png").stat().st_size > 0
    assert assert_ok(results[6]).strip() == "wrote curve.svg"
    assert (tmp_path / "curve.svg").read_text().lstrip().startswith("<?xml")
    assert_refused(results[7], "carry no timestamps", "--x trials")  # records made by hand


def test_gzip_logs_are_written_as_gzip_and_read_back(tmp_path, seed_records):
    log = write_log(tmp_path / "log.json.gz", seed_records)  # two appends: two gzip members
    assert log.read_bytes()[:2] == b"\x1f\x8b"
    assert len(gzip.decompress(log.read_bytes()).decode().splitlines()) == 3
    recs = list(load_records(str(log)))
    assert [r.error_kind for _, r in recs] == [0, 0, 6]
    plain = write_log(tmp_path / "log.json", seed_records)
    assert [r for _, r in load_records(str(plain))] == [r for _, r in recs]


def test_output_into_a_closed_pipe_ends_quietly(tmp_path, seed_records):
    write_log(tmp_path / "log.json", seed_records)
    for args in (["show", "log.json"], ["dag", "matmul", "64", "48", "32"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "autosched", *args],
            cwd=tmp_path,
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        proc.stdout.close()  # as `| head` does once it has its lines
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) in (0, 141)
        assert err == "", err


def test_help_seed_and_show_launch_configuration(tmp_path, seed_records):
    write_log(tmp_path / "log.json.gz", seed_records)
    tune_help, dag_help, show, source = run_batch(
        tmp_path, "tune --help", "dag --help", "show log.json.gz", "show log.json.gz --source"
    )
    text = assert_ok(tune_help)
    assert "(default: 200)" in text and "(default: 64)" in text and "--seed" in text
    for name in SUITE:
        assert name in text and name in assert_ok(dag_help)
    out = assert_ok(show)
    assert "best 100.00 us" in out
    # 9.64 MB (the inputs once, the output once) in 100 us, against the H100's 3 TB/s copy
    assert "roofline (H100, " in out and "96 GB/s = 3% of 3000 GB/s" in out
    assert "kernel default_function_kernel: grid (28, 1, 1), block (64, 1, 1), " in out
    assert "bytes shared memory" in out and "__global__" not in out
    assert "__global__" in assert_ok(source)

    from autosched.cli.app import build_parser
    from autosched.cli.arguments import search_params

    ns = build_parser().parse_args(["tune", "matmul", "--seed", "7", "--n-jobs", "2"])
    assert search_params(ns).seed == 7 and search_params(ns).n_jobs == 2


def test_tune_runs_the_search_level_with_the_compilers_when_pipelined():
    """Pipelined, the next batch's search is what a round waits for: `autosched tune` runs its
    workers level with the compilers; `--no-pipeline` keeps the default step back."""
    from autosched.cli.app import build_parser
    from autosched.cli.tune import tune_search_params
    from autosched.search.process_pool import COMPILERS_FIRST

    parser = build_parser()
    assert tune_search_params(parser.parse_args(["tune", "matmul"])).worker_niceness == 0
    off = parser.parse_args(["tune", "matmul", "--no-pipeline", "--seed", "3"])
    assert tune_search_params(off).worker_niceness == COMPILERS_FIRST
    assert tune_search_params(off).seed == 3


def test_no_pretrained_gives_a_random_first_round():
    from autosched.cli.app import build_parser
    from autosched.cli.arguments import search_params

    parser = build_parser()
    assert search_params(parser.parse_args(["tune", "matmul"])).pretrained
    for command in (["tune", "matmul"], ["resume", "log.json"], ["tune-model", "mod:mlp"]):
        ns = parser.parse_args([*command, "--no-pretrained"])
        assert not search_params(ns).pretrained


def test_tune_takes_a_population_and_the_pipelined_loop():
    from autosched.cli.app import build_parser
    from autosched.cli.arguments import search_params
    from autosched.search.policy import SearchParams

    parser = build_parser()
    plain = parser.parse_args(["tune", "matmul"])
    assert plain.pipeline
    assert search_params(plain).population == SearchParams().population
    asked = parser.parse_args(["tune", "matmul", "--population", "256", "--no-pipeline"])
    assert not asked.pipeline
    assert search_params(asked).population == 256
