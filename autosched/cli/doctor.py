"""`autosched doctor`: one line per thing tuning needs (GPU and driver, CUDA toolkit, NVRTC,
pycuda, torch): present or missing, and for each missing one what to run. Exit status 0 when
this machine can tune, 1 when it cannot (what works without a GPU still works)."""

from __future__ import annotations

import argparse
import ctypes
import importlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from autosched.cli.arguments import Command

INSTALL_CUDA = "python -m autosched.install cuda"
INSTALL_TORCH = "python -m autosched.install torch (PyTorch's CPU build where no GPU is)"


@dataclass(frozen=True)
class Finding:
    """What one check found: present or not, what (or why not), and what to run when not."""

    present: bool
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Check:
    """One line of the report: its label, whether tuning needs it, and how it is checked."""

    label: str
    needed_to_tune: bool
    run: Callable[[], Finding]


def gpu_and_driver() -> Finding:
    """libcuda loads, initialises, and sees at least one device."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return Finding(False, "no NVIDIA driver (libcuda.so.1 does not load)", "a GPU machine")
    count, version = ctypes.c_int(0), ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or not count.value:
        return Finding(False, "the driver loads but sees no CUDA device", "nvidia-smi")
    lib.cuDriverGetVersion(ctypes.byref(version))
    name = ctypes.create_string_buffer(256)
    lib.cuDeviceGetName(name, 256, 0)
    major, minor = divmod(version.value // 10, 100)
    return Finding(
        True, f"{name.value.decode()} ({count.value} device(s)), driver CUDA {major}.{minor}"
    )


def toolkit() -> Finding:
    """A CUDA toolkit as pycuda's build and nvcc need it."""
    from autosched.install import InstallError, find_toolkit

    try:
        found = find_toolkit()
    except InstallError:
        return Finding(False, "no CUDA toolkit (bin/nvcc and include/cuda.h)", "set CUDA_HOME")
    return Finding(True, f"{found.root} ({_nvcc_version(found.nvcc)}, found by {found.found_by})")


def _nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "nvcc does not run"
    release = [line for line in out.stdout.splitlines() if "release" in line]
    return f"nvcc {release[-1].rsplit('release', 1)[1].strip(' ,')}" if release else "nvcc"


def nvrtc() -> Finding:
    """libnvrtc, which builds kernels several times faster than nvcc (optional)."""
    from measure.nvrtc import find_nvrtc

    path = find_nvrtc()
    if path is None:
        return Finding(False, "not found: builds use nvcc (slower)", "pip install -e '.[nvrtc]'")
    return Finding(True, path)


def pycuda() -> Finding:
    """pycuda imports and sees a device (the runner times kernels through it)."""
    from measure import gpu_available

    ok, why = gpu_available()
    if ok:
        return Finding(True, f"{_version('pycuda')}, {why}")
    if "not importable" in why:
        return Finding(False, "not installed", INSTALL_CUDA)
    return Finding(False, why, "a GPU machine")


def torch() -> Finding:
    """PyTorch, for whole models (`tasks`, `tune-model`, `autosched.torch`; optional)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return Finding(False, "not installed: no model front end", INSTALL_TORCH)
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    usable = ", sees the GPU" if torch.cuda.is_available() else ""
    return Finding(True, f"{torch.__version__} ({build}{usable})")


def _version(module: str) -> str:
    try:
        return str(importlib.import_module(module).VERSION_TEXT)
    except (ImportError, AttributeError):
        return module


# The report's lines, in order.
CHECKS: tuple[Check, ...] = (
    Check("GPU and driver", True, gpu_and_driver),
    Check("CUDA toolkit", True, toolkit),
    Check("NVRTC", False, nvrtc),
    Check("pycuda", True, pycuda),
    Check("torch", False, torch),
)


def report(checks: tuple[Check, ...] = CHECKS) -> tuple[list[str], bool]:
    """The report's lines and whether this machine can tune."""
    width = max(len(c.label) for c in checks)
    lines, missing = [], []
    for check in checks:
        try:
            found = check.run()
        except Exception as exc:  # noqa: BLE001 (a check that breaks is a finding too)
            found = Finding(False, f"the check failed: {type(exc).__name__}: {exc}")
        state = "ok" if found.present else ("MISSING" if check.needed_to_tune else "absent")
        line = f"{check.label:<{width}}  {state:<7}  {found.detail}"
        if not found.present and found.fix:
            line += f"  -> {found.fix}"
        lines.append(line)
        if check.needed_to_tune and not found.present:
            missing.append(check.label)
    if missing:
        lines.append(
            f"cannot tune here ({', '.join(missing)} missing); without a GPU: autosched dag, "
            "show, curve, tasks and the CPU interpreter work"
        )
    else:
        lines.append("ready to tune: autosched tune matmul --trials 64")
    return lines, not missing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(ns: argparse.Namespace) -> int:
    lines, ready = report()
    print("\n".join(lines))
    return 0 if ready else 1


COMMAND = Command(
    "doctor",
    "what this machine has for tuning (GPU, driver, toolkit, NVRTC, pycuda, torch)",
    add_arguments,
    run,
    description="One line per thing tuning needs, present or missing, and what to run for each\n"
    "missing one. Exit status 0 when this machine can tune, 1 when it cannot.",
)
