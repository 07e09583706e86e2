"""`python -m autosched.install [EXTRA ...]`: install this checkout (`pip install -e .[EXTRAS]`,
default extra `cuda`) so that pycuda's build finds the CUDA toolkit, or fail in one line saying
what is missing, before pip starts. With the `torch` extra on a machine without an NVIDIA
driver, PyTorch's CPU build is installed first (PyPI's is the multi-GB CUDA build).

pycuda has no Linux wheels: pip compiles it, and its build takes the toolkit from the first
`nvcc` on PATH, as `dirname(nvcc)/..`, without resolving links (its `CUDA_ROOT` setting is
read from a `siteconf.py` or `~/.aksetup-defaults.py`, not from the environment). An `nvcc`
on PATH that is a link (`/usr/bin/nvcc`) or a wrapper makes it look for `cuda.h` in the wrong
folder, and the error sits thousands of lines up pip's output. So the toolkit is found here
(`$CUDA_HOME`, `$CUDA_PATH`, `$CUDA_ROOT`, `nvcc`'s real location, `/usr/local/cuda`, the newest
`/usr/local/cuda-*`), its `bin/` is put first on PATH for pip, pip's output goes to a log file,
and a failure prints only the lines that say why.

Standard library only: it runs before autosched's dependencies are installed.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOG_NAME = "autosched-install.log"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
USAGE_ERROR = 2
# pip output lines that say why a build failed (compiler errors, pip's own summary)
_ERROR_LINE = re.compile(r"(fatal error|error:|No such file or directory|^ERROR:)", re.I)


class InstallError(Exception):
    """Something the install needs is missing; the message says what and how to get it."""


@dataclass(frozen=True)
class Toolkit:
    """A CUDA toolkit: its root (with `bin/nvcc` and `include/cuda.h`) and how it was found."""

    root: str
    found_by: str

    @property
    def nvcc(self) -> str:
        return os.path.join(self.root, "bin", "nvcc")


def toolkit_candidates(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(root, how it was found) of each place a CUDA toolkit may be, in the order tried."""
    places = [
        (environ.get(name, ""), f"${name}") for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
    ]
    nvcc = shutil.which("nvcc", path=environ.get("PATH", ""))
    if nvcc:
        real = os.path.realpath(nvcc)
        places.append((os.path.dirname(os.path.dirname(real)), f"nvcc on PATH ({real})"))
    places.append(("/usr/local/cuda", "/usr/local/cuda"))
    versioned = sorted(glob.glob("/usr/local/cuda-*"), key=_version_key, reverse=True)
    places += [(root, root) for root in versioned]
    return [(os.path.realpath(root), how) for root, how in places if root]


def find_toolkit(environ: Mapping[str, str] = os.environ) -> Toolkit:
    """The first toolkit with `bin/nvcc` and `include/cuda.h`; InstallError naming the places
    looked at otherwise."""
    looked = []
    for root, how in toolkit_candidates(environ):
        if _is_toolkit(root):
            return Toolkit(root, how)
        looked.append(f"{how}: {root}" if how != root else root)
    where = "; ".join(dict.fromkeys(looked)) or "nowhere to look"
    raise InstallError(
        "no CUDA toolkit found (a folder with bin/nvcc and include/cuda.h; looked at "
        f"$CUDA_HOME, $CUDA_PATH, $CUDA_ROOT, nvcc on PATH, /usr/local/cuda*: {where}): install "
        "it, or set CUDA_HOME to it; without a GPU install with no extra: pip install -e ."
    )


def _is_toolkit(root: str) -> bool:
    return os.access(os.path.join(root, "bin", "nvcc"), os.X_OK) and os.path.isfile(
        os.path.join(root, "include", "cuda.h")
    )


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", os.path.basename(path)))


def check_build_tools(environ: Mapping[str, str] = os.environ) -> None:
    """InstallError unless a C++ compiler and the Python headers are there (pycuda compiles)."""
    compiler = environ.get("CXX") or shutil.which("c++", path=environ.get("PATH", ""))
    if not compiler:
        raise InstallError(
            "pycuda is compiled from source and no C++ compiler was found (c++ on PATH, or "
            "$CXX): install one, e.g. apt-get install g++"
        )
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.isfile(headers):
        raise InstallError(
            f"pycuda is compiled from source and the Python headers are missing ({headers}): "
            f"install them, e.g. apt-get install python{sys.version_info[0]}-dev"
        )


# pycuda's build settings files (read by its aksetup helper, as is a siteconf.py)
AKSETUP_FILES = ("~/.aksetup-defaults.py", "/etc/aksetup-defaults.py")
_CURAND_OFF = re.compile(r"^\s*CUDA_ENABLE_CURAND\s*=\s*False\b", re.M)


def check_curand(toolkit: Toolkit, environ: Mapping[str, str] = os.environ) -> None:
    """InstallError when pycuda's build would include curand.h and the toolkit has none (a
    minimal toolkit install): autosched does not use cuRAND, and pycuda builds without it
    when its settings say so."""
    if os.path.isfile(os.path.join(toolkit.root, "include", "curand.h")):
        return
    for name in AKSETUP_FILES:
        path = name.replace("~", environ.get("HOME", "~"), 1)
        try:
            with open(path) as f:
                if _CURAND_OFF.search(f.read()):
                    return
        except OSError:
            continue
    raise InstallError(
        f"the CUDA toolkit {toolkit.root} has no include/curand.h, which pycuda's build "
        "includes: install the toolkit's cuRAND headers, or build pycuda without cuRAND "
        "(autosched does not use it): echo 'CUDA_ENABLE_CURAND = False' >> ~/.aksetup-defaults.py"
    )


# where the linker finds libcuda.so besides the toolkit (pycuda links -lcuda)
SYSTEM_LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
)


def check_libcuda(toolkit: Toolkit, environ: Mapping[str, str] = os.environ) -> None:
    """InstallError when pycuda's link step would find no libcuda.so: the toolkit's stub
    (lib64/stubs), the driver's development link, or one on $LIBRARY_PATH."""
    folders = [
        os.path.join(toolkit.root, sub) for sub in ("lib64/stubs", "lib/stubs", "lib64", "lib")
    ]
    folders += [p for p in environ.get("LIBRARY_PATH", "").split(os.pathsep) if p]
    folders += SYSTEM_LIBRARY_DIRS
    if any(os.path.exists(os.path.join(folder, "libcuda.so")) for folder in folders):
        return
    raise InstallError(
        f"pycuda links against libcuda.so and there is none to link (not in {toolkit.root}'s "
        "lib64/stubs, not beside the driver's libcuda.so.1, not on $LIBRARY_PATH): install the "
        "toolkit's driver stubs, or the NVIDIA driver's development files"
    )


@dataclass(frozen=True)
class Plan:
    """The pip commands to run in order, their environment, and what to tell the user first."""

    commands: list[list[str]]
    env: dict[str, str]
    note: str


def plan(extras: Sequence[str], environ: Mapping[str, str] = os.environ) -> Plan:
    """How to install this checkout with `extras`; InstallError when something is missing."""
    if not os.path.isfile(os.path.join(ROOT, "pyproject.toml")):
        raise InstallError(f"{ROOT} is not an autosched checkout (no pyproject.toml)")
    known = known_extras()
    unknown = [extra for extra in extras if extra not in known]
    if unknown:  # pip would only warn, and install without them
        raise InstallError(f"unknown extra {unknown[0]!r}; the extras are {', '.join(known)}")
    target = f"{ROOT}[{','.join(extras)}]" if extras else ROOT
    pip = [sys.executable, "-m", "pip", "install"]
    commands = [[*pip, "-e", target]]
    env = dict(environ)
    note = f"installing {target}"
    if "torch" in extras and not _has_nvidia_driver() and not _importable("torch"):
        # PyPI's torch for Linux is the CUDA build (gigabytes of CUDA libraries); without a GPU
        # the CPU build comes first from PyTorch's own index, and the extra finds it installed
        commands.insert(0, [*pip, "torch", "--index-url", TORCH_CPU_INDEX])
        note += " (no NVIDIA driver here: PyTorch's CPU build first)"
    if "cuda" in extras:
        toolkit = find_toolkit(environ)
        check_curand(toolkit, environ)
        check_libcuda(toolkit, environ)
        check_build_tools(environ)
        env["PATH"] = os.pathsep.join([os.path.join(toolkit.root, "bin"), env.get("PATH", "")])
        env["CUDA_HOME"] = env["CUDA_ROOT"] = toolkit.root
        note += (
            f" with the CUDA toolkit {toolkit.root} (found by {toolkit.found_by}); pycuda is "
            "compiled, which takes a few minutes"
        )
    return Plan(commands, env, note)


def known_extras() -> list[str]:
    """The optional-dependency groups pyproject.toml declares."""
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    section = text.split("[project.optional-dependencies]", 1)[-1].split("\n[", 1)[0]
    return re.findall(r"^([A-Za-z0-9_-]+)\s*=", section, re.M)


def _has_nvidia_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def error_lines(log_text: str, most: int = 6) -> list[str]:
    """The lines of pip's output that say why it failed (the first compiler errors, then
    pip's summary), at most `most` of them."""
    lines = [line.strip() for line in log_text.splitlines() if _ERROR_LINE.search(line)]
    unique = list(dict.fromkeys(lines))
    return unique[: most - 1] + unique[-1:] if len(unique) > most else unique


def main(argv: Sequence[str] | None = None) -> int:
    """Install; 0 on success, pip's status when pip failed, 2 when something is missing."""
    extras = list(sys.argv[1:] if argv is None else argv) or ["cuda"]
    if any(arg.startswith("-") for arg in extras):
        print(__doc__.split("\n\n")[0])
        return 0 if {"-h", "--help"} & set(extras) else USAGE_ERROR
    try:
        how = plan(extras)
    except InstallError as exc:
        print(f"autosched install: {exc}", file=sys.stderr)
        return USAGE_ERROR
    log = os.path.abspath(LOG_NAME)
    print(f"{how.note} (pip's output: {log})", flush=True)
    try:
        status = _run(how, log)
    except KeyboardInterrupt:
        print(f"autosched install: interrupted (pip's output so far: {log})", file=sys.stderr)
        return 128 + 2
    if status == 0:
        print("installed; `autosched doctor` says what this machine can do")
        return 0
    with open(log, errors="replace") as f:
        why = error_lines(f.read())
    print(f"autosched install: pip failed (status {status}); from {log}:", file=sys.stderr)
    for line in why:
        print(f"  {line}", file=sys.stderr)
    return status


def _run(how: Plan, log: str) -> int:
    """Run the plan's commands in order, their output to `log`; the first failing status."""
    with open(log, "w") as out:
        for command in how.commands:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            status = subprocess.call(command, env=how.env, stdout=out, stderr=subprocess.STDOUT)
            if status:
                return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
