"""Shared pytest configuration and fixtures.

- the `gpu` marker skips cleanly where no CUDA device is usable;
- `--update-golden` rewrites the golden files (tests/golden/) that the `golden` fixture compares
  against; without it a missing or different golden file fails the test;
- session fixtures share what several test files would otherwise compute again (the
  interpreter's check of sampled states). Plain helpers shared by several files live in
  workloads_for_tests.py (DAGs, schedules, the suite's reduced sizes) and interpreter_check.py
  (random inputs, running a program against numpy).
"""

from __future__ import annotations

import functools
import pathlib

import pytest

GOLDEN = pathlib.Path(__file__).parent / "golden"


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the golden files under tests/golden/ with what the tests produce now",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """`-m gpu` runs in one process: GPU tests time kernels, and two xdist workers sharing the
    GPU would time each other's work (the record-vs-benchmark agreement tests fail so)."""
    markexpr = config.option.markexpr or ""
    if "gpu" in markexpr and "not gpu" not in markexpr:
        if getattr(config.option, "numprocesses", None):
            config.option.numprocesses = 0
            config.option.dist = "no"


@functools.lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    """Return why GPU tests cannot run here, or None when pycuda sees a device."""
    try:
        import pycuda.driver as drv  # noqa: F401
    except Exception as exc:  # ImportError, or a driver library that fails to load
        return f"pycuda is not importable ({type(exc).__name__}: {exc})"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "pycuda found no CUDA device"
    except Exception as exc:
        return f"no usable CUDA device ({exc})"
    return None


def pytest_collection_modifyitems(config, items):
    """`gpu` tests skip where no device is usable; `slow` ones (full-size nvcc compiles that
    other tests cover in part) skip unless `-m slow` asks for them, keeping the default suite
    within CI's time."""
    reason = None
    slow_asked = "slow" in (config.option.markexpr or "")
    for item in items:
        if "slow" in item.keywords and not slow_asked:
            item.add_marker(pytest.mark.skip(reason="a longer CPU check: run with -m slow"))
        if "gpu" in item.keywords:
            if reason is None:
                reason = gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True, scope="session")
def _verify_every_lowering():
    """Every program `lower` or `device_program` returns in the tests goes through the IR
    verifier."""
    from autosched.lower.verify import verify_every_lowering

    previous = verify_every_lowering(True)
    yield
    verify_every_lowering(previous)


# ---- golden files ---------------------------------------------------------------------------


@pytest.fixture
def golden(request):
    """golden(name, text): assert that `text` equals tests/golden/<name>. A missing file fails;
    `pytest --update-golden` writes the file instead (then review the diff and commit it)."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if update:
            GOLDEN.mkdir(exist_ok=True)
            path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"golden file {path} is missing: run pytest --update-golden to write it")
        assert text == path.read_text(), f"{path} differs (pytest --update-golden rewrites it)"

    return check


# ---- shared work ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def interpreted_samples():
    """interpreted_samples.get(name, n, seed): the first `n` states sampled from suite workload
    `name` at its reduced size, each checked on the CPU interpreter; a sample checked once in
    the session is not interpreted again (interpreter_check.InterpretedSamples)."""
    from tests.interpreter_check import InterpretedSamples

    return InterpretedSamples()
