"""What the statement printers of one kernel share: `PrintContext`.

The CUDA printer (`cuda.KernelPrinter`) is a PrintContext with a statement table; the helper
printers (allreduce, async_copy, vectors, wmma) take the context, not the printer, so none of
them imports `cuda.py`.
"""

from __future__ import annotations

import itertools
import re

from autosched.codegen.expr_printer import ExprPrinter
from autosched.codegen.target import CUDATarget
from autosched.lower import ir
from autosched.lower.dispatch import TypeTable

# statement type -> printer(statement, depth)
StmtTable = TypeTable[ir.Stmt, [int], None]


class PrintContext:
    """The kernel being printed, its target, its expression printer, the lines printed so far
    and the C identifiers taken."""

    def __init__(self, kernel: ir.Kernel, params: list[ir.Buffer], target: CUDATarget, fast: bool):
        self.k, self.params, self.t = kernel, params, target
        self.lines: list[str] = []
        self.used: set[str] = set()
        buffer_names = {id(b): self.fresh(b.name) for b in [*params, *kernel.allocs]}
        self.ex = ExprPrinter(target, buffer_names, fast)
        wide = any(b.size >= 1 << 31 for b in [*params, *kernel.allocs])
        self.index_type = "long long" if wide else "int"
        for tag, var in ir.THREAD_VARS.items():
            text = target.thread_index[tag]
            self.ex.names[id(var)] = text.replace("(int)", "(long long)") if wide else text

    def fresh(self, name: str) -> str:
        """A C identifier from `name`, unique in this kernel (`i`, `i_1`, ...)."""
        base = name = re.sub(r"\W|^(?=\d)|^$", "_", name)
        for n in itertools.count(1):
            if name not in self.used:
                break
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def emit(self, depth: int, text: str) -> None:
        """Append one line of source at indentation `depth`."""
        self.lines.append("  " * depth + text)
