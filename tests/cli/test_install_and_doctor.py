"""`python -m autosched.install` finds the CUDA toolkit for pycuda's build (through links) or
fails in one line before pip starts; `autosched doctor` says in a few lines what is there."""

from __future__ import annotations

import os
import sys

import pytest

from autosched import install
from autosched.cli import doctor
from autosched.cli.app import main


def fake_toolkit(root, with_headers: bool = True):
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    (root / "include").mkdir()
    if with_headers:
        (root / "include" / "cuda.h").write_text("")
        (root / "include" / "curand.h").write_text("")
    (root / "lib64" / "stubs").mkdir(parents=True)
    (root / "lib64" / "stubs" / "libcuda.so").write_text("")
    return root


def test_the_toolkit_is_found_through_a_linked_nvcc(tmp_path):
    root = fake_toolkit(tmp_path / "opt" / "cuda-13.0")
    (tmp_path / "usr_bin").mkdir()
    os.symlink(root / "bin" / "nvcc", tmp_path / "usr_bin" / "nvcc")  # as /usr/bin/nvcc often is
    found = install.find_toolkit({"PATH": str(tmp_path / "usr_bin")})
    assert found.root == str(root) and found.found_by.startswith("nvcc on PATH")
    by_home = install.find_toolkit({"CUDA_HOME": str(root), "PATH": ""})
    assert by_home.root == str(root) and by_home.found_by == "$CUDA_HOME"


def test_a_folder_without_cuda_h_is_no_toolkit(tmp_path, monkeypatch):
    root = fake_toolkit(tmp_path / "cuda", with_headers=False)
    monkeypatch.setattr(install, "toolkit_candidates", lambda env: [(str(root), "$CUDA_HOME")])
    with pytest.raises(install.InstallError, match="no CUDA toolkit found") as err:
        install.find_toolkit({"CUDA_HOME": str(root)})
    assert "pip install -e ." in str(err.value) and "\n" not in str(err.value)


def test_the_plan_puts_the_toolkits_nvcc_first_for_pycudas_build(tmp_path):
    root = fake_toolkit(tmp_path / "cuda")
    env = {"CUDA_HOME": str(root), "PATH": os.environ["PATH"], "CXX": "g++"}
    plan = install.plan(["cuda"], env)
    assert plan.commands[-1][-2:] == ["-e", f"{install.ROOT}[cuda]"]
    assert plan.env["PATH"].split(os.pathsep)[0] == str(root / "bin")
    assert plan.env["CUDA_ROOT"] == str(root) and str(root) in plan.note
    assert install.plan([], {"PATH": ""}).commands == [  # no toolkit needed
        [sys.executable, "-m", "pip", "install", "-e", install.ROOT]
    ]


def test_torch_without_a_gpu_comes_from_pytorchs_cpu_index_first(monkeypatch):
    monkeypatch.setattr(install, "_has_nvidia_driver", lambda: False)
    monkeypatch.setattr(install, "_importable", lambda module: False)
    first, then = install.plan(["torch"], {"PATH": ""}).commands
    assert first[-4:] == ["install", "torch", "--index-url", install.TORCH_CPU_INDEX]
    assert then[-1] == f"{install.ROOT}[torch]"
    monkeypatch.setattr(install, "_has_nvidia_driver", lambda: True)
    assert len(install.plan(["torch"], {"PATH": ""}).commands) == 1


def test_a_toolkit_without_curand_is_named_unless_pycuda_is_told(tmp_path):
    root = fake_toolkit(tmp_path / "cuda")
    (root / "include" / "curand.h").unlink()
    home = tmp_path / "home"
    home.mkdir()
    env = {"CUDA_HOME": str(root), "HOME": str(home), "PATH": os.environ["PATH"], "CXX": "g++"}
    with pytest.raises(install.InstallError, match="has no include/curand.h") as err:
        install.plan(["cuda"], env)
    assert "CUDA_ENABLE_CURAND = False" in str(err.value)
    (home / ".aksetup-defaults.py").write_text("CUDA_ENABLE_CURAND = False\n")
    assert install.plan(["cuda"], env).env["CUDA_ROOT"] == str(root)


def test_a_toolkit_without_libcuda_to_link_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "SYSTEM_LIBRARY_DIRS", ())
    root = fake_toolkit(tmp_path / "cuda")
    (root / "lib64" / "stubs" / "libcuda.so").unlink()
    env = {"CUDA_HOME": str(root), "PATH": os.environ["PATH"], "CXX": "g++"}
    with pytest.raises(install.InstallError, match="there is none to link"):
        install.plan(["cuda"], env)
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "libcuda.so").write_text("")
    assert install.plan(["cuda"], {**env, "LIBRARY_PATH": str(tmp_path / "driver")}).commands


def test_an_unknown_extra_is_refused_before_pip():
    assert {"cuda", "torch", "test", "plot"} <= set(install.known_extras())
    with pytest.raises(install.InstallError, match="unknown extra 'cdua'; the extras are cuda"):
        install.plan(["cdua"], {"PATH": ""})


def test_without_a_toolkit_the_install_fails_in_one_line_before_pip(monkeypatch, capsys):
    monkeypatch.setattr(install, "toolkit_candidates", lambda env: [("/nowhere", "$CUDA_HOME")])
    monkeypatch.setattr(install.subprocess, "call", pytest.fail)  # pip must not start
    assert install.main(["cuda"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("autosched install: no CUDA toolkit found")


def test_a_failed_build_is_told_by_its_error_lines():
    log = "\n".join(
        ["building..."] * 5000
        + ["src/cpp/cuda.hpp:14:10: fatal error: cuda.h: No such file or directory"]
        + ["more output"] * 20
        + ["ERROR: Failed building wheel for pycuda"]
    )
    assert install.error_lines(log) == [
        "src/cpp/cuda.hpp:14:10: fatal error: cuda.h: No such file or directory",
        "ERROR: Failed building wheel for pycuda",
    ]


def test_doctor_reports_one_line_a_check_and_what_to_run(monkeypatch, capsys):
    checks = (
        doctor.Check("GPU and driver", True, lambda: doctor.Finding(True, "H100")),
        doctor.Check("pycuda", True, lambda: doctor.Finding(False, "missing", "run this")),
        doctor.Check("torch", False, lambda: doctor.Finding(False, "absent", "pip install")),
        doctor.Check("broken", False, lambda: 1 / 0),
    )
    monkeypatch.setattr(doctor, "CHECKS", checks)
    monkeypatch.setattr(doctor.report, "__defaults__", (checks,))
    assert main(["doctor"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5
    assert lines[1].split()[:2] == ["pycuda", "MISSING"] and lines[1].endswith("-> run this")
    assert lines[2].split()[:2] == ["torch", "absent"]
    assert "the check failed: ZeroDivisionError" in lines[3]
    assert lines[4].startswith("cannot tune here (pycuda missing)")


def test_doctor_runs_every_real_check_here(capsys):
    status = main(["doctor"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in lines[:-1]] == [c.label for c in doctor.CHECKS]
    assert status == (0 if lines[-1].startswith("ready to tune") else 1)
