"""Per-kernel resource usage as reported by `ptxas -v`, and nvcc's location and messages."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil

from measure.errors import MeasureErrorKind, NvccNotFoundError

# The file name both compilers give the source (their messages quote it).
SOURCE_NAME = "kernel.cu"
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_TOO_MUCH = re.compile(r"too much (shared|local) data|too many resources|exceeds .* limit", re.I)


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one entry function."""

    registers: int = 0
    shared_bytes: int = 0  # static shared memory
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0  # stack frame: local arrays that were not promoted to registers

    @property
    def spill_bytes(self) -> int:
        """Spill stores plus spill loads, in bytes."""
        return self.spill_store_bytes + self.spill_load_bytes

    def to_dict(self) -> dict:
        """Plain-dict form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> KernelResources:
        """Inverse of `to_dict`."""
        return cls(**data)


def parse_ptxas(text: str) -> dict[str, KernelResources]:
    """Parse `ptxas -v` output into resources per entry function (non-entry functions skipped)."""
    entries: list[str] = []
    fields: dict[str, dict[str, int]] = {}
    current_entry: str | None = None
    current_props: str | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current_entry = m.group(1)
            entries.append(current_entry)
            fields.setdefault(current_entry, {})
            continue
        if m := _PROPS.search(line):
            current_props = m.group(1)
            continue
        if (m := _FRAME.search(line)) and current_props is not None:
            stack, stores, loads = (int(g) for g in m.groups())
            fields.setdefault(current_props, {}).update(
                stack_bytes=stack, spill_store_bytes=stores, spill_load_bytes=loads
            )
            continue
        if (m := _USED.search(line)) and current_entry is not None:
            info = fields[current_entry]
            info["registers"] = int(m.group(1))
            smem = _SMEM.search(line)
            info["shared_bytes"] = int(smem.group(1)) if smem else 0
    return {name: KernelResources(**fields[name]) for name in entries}


def is_resource_message(text: str) -> bool:
    """True when a ptxas failure is a resource limit (e.g. "uses too much shared data")."""
    return bool(_TOO_MUCH.search(text))


def compile_failure(log: str, source_name: str, fallback: str) -> tuple[MeasureErrorKind, str]:
    """(error kind, message) of a failed compilation: a resource limit when ptxas says so, else a
    compile error; the message is the log's error lines, or `fallback` when it has none."""
    kind = (
        MeasureErrorKind.RESOURCE_LIMIT
        if is_resource_message(log)
        else MeasureErrorKind.COMPILE_ERROR
    )
    return kind, relevant_lines(log, source_name) or fallback


def relevant_lines(text: str, source_name: str = SOURCE_NAME, limit: int = 12) -> str:
    """The error lines of nvcc/ptxas output (plus the line after each), at most `limit` lines."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    keep: list[str] = []
    for i, line in enumerate(lines):
        if "error" in line.lower() or "fatal" in line.lower():
            keep.append(line)
            if i + 1 < len(lines) and "ptxas info" not in lines[i + 1]:
                keep.append(lines[i + 1])
    keep = list(dict.fromkeys(keep)) or [ln for ln in lines if "ptxas info" not in ln]
    out = "\n".join(keep[:limit])
    return re.sub(r"\S*/" + re.escape(source_name), source_name, out)[:2000]


def find_nvcc() -> str:
    """Path of nvcc: PATH, then $CUDA_HOME/bin, then /usr/local/cuda/bin; else NvccNotFoundError."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            candidate = os.path.join(root, "bin", "nvcc")
            if os.access(candidate, os.X_OK):
                return candidate
    raise NvccNotFoundError(
        "nvcc was not found on PATH (nor in $CUDA_HOME/bin or /usr/local/cuda/bin); install the "
        "CUDA toolkit (https://developer.nvidia.com/cuda-downloads) or put its bin/ on PATH"
    )
