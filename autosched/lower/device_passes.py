"""The passes from the analysis program to the device program.

`lower(state)` returns the analysis program: its indices keep the per-axis form bound inference
gives them, which the feature extractor reads. The device program is what the CUDA printer
prints and what `BuiltKernel.run_cpu` runs on the interpreter; it comes from the analysis
program through DEVICE_PASSES, in order. Each pass maps one kernel to a new kernel and leaves
its input unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from autosched.lower import ir
from autosched.lower.arith import Bounds, fold_digits
from autosched.lower.verify import verify_program, verifying_every_lowering
from autosched.te.expr import Expr, Load
from autosched.te.visitor import rewrite


def kernel_bounds(kernel: ir.Kernel) -> Bounds:
    """The range of every loop variable and launch index of `kernel` (each starts at 0)."""
    bounds = {
        id(s.var): (0, s.extent - 1) for s in ir.iter_stmts(kernel.body) if isinstance(s, ir.For)
    }
    launch = zip(ir.LAUNCH_TAGS, (*kernel.grid, *kernel.block), strict=True)
    for tag, extent in launch:
        bounds[id(ir.THREAD_VARS[tag])] = (0, extent - 1)
    return bounds


def fold_index_digits(kernel: ir.Kernel) -> ir.Kernel:
    """`kernel` with the digits of every store and load index folded (`arith.fold_digits`,
    under the loops' and launch indices' ranges): the per-axis decomposition
    `(f // 72)*72 + ((f // 9) % 8)*9 + ... + f % 3` of a cooperative fetch becomes `f`, which
    saves the device the divisions and the registers that hold their results."""
    bounds = kernel_bounds(kernel)

    def fold_loads(e: Expr) -> Expr:
        return rewrite(
            e,
            lambda n: (
                Load(n.buffer, [fold_digits(i, bounds) for i in n.indices])
                if isinstance(n, Load)
                else None
            ),
        )

    body = ir.map_exprs(kernel.body, lambda e: fold_digits(fold_loads(e), bounds))
    return dataclasses.replace(kernel, allocs=list(kernel.allocs), body=body)


# The device passes, in the order they run.
DEVICE_PASSES: tuple[Callable[[ir.Kernel], ir.Kernel], ...] = (fold_index_digits,)


def device_program(program: ir.Program, verify: bool | None = None) -> ir.Program:
    """The program to print and run: every kernel of the analysis `program` through
    DEVICE_PASSES. Buffers are shared with `program`. `verify` runs the IR verifier (no launch
    limits) on the result; None verifies when `verify.verify_every_lowering` turned that on."""
    kernels = []
    for kernel in program.kernels:
        for device_pass in DEVICE_PASSES:
            kernel = device_pass(kernel)
        kernels.append(kernel)
    out = ir.Program(kernels, program.params, program.outputs, program.temps)
    if verifying_every_lowering() if verify is None else verify:
        verify_program(out, launch_limits=False)
    return out
