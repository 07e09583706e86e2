"""The program passes of lowering, in order, in one place.

`lower(state)` plans the State (`planning.py`), emits its kernels (`emission.py`), then runs
LOWERING_PASSES: the result is the analysis program, whose indices keep the per-axis form bound
inference gives them (the feature extractor reads them). DEVICE_PASSES then make the device
program, which the CUDA printer prints and `BuiltKernel.run_cpu` runs on the interpreter.

Every pass maps a program to a new program, kernel by kernel (`KernelPass`) or as a whole
(`ProgramPass`: kernels merged), and leaves its input unchanged;
`ir_text.program_text` prints the program between any two of them (the golden tests do).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from autosched.lower import ir
from autosched.lower.arith import MemoBounds
from autosched.lower.fast_exp import approximate_exp
from autosched.lower.fragment_double_buffer import double_buffer_fragments
from autosched.lower.idle_barriers import drop_idle_barrier, mark_single_allreduces
from autosched.lower.index_folding import fold_index_digits
from autosched.lower.kernel_ranges import kernel_bounds
from autosched.lower.narrow_tile import narrow_tiles
from autosched.lower.row_scalars import hoist_row_scalars
from autosched.lower.shared_alias import alias_epilogue_tile
from autosched.lower.single_pass import finish_in_last_block
from autosched.lower.stmt_simplify import simplify_stmt
from autosched.lower.unrolling import unroll_register_indices
from autosched.lower.verify import verify_program, verifying_every_lowering
from autosched.lower.vthread import inject_virtual_threads
from autosched.lower.warp_specialize import warp_specialize
from autosched.lower.warpgroup_mma import warpgroup_mma


@dataclass(frozen=True)
class KernelPass:
    """A named program pass that rewrites each kernel on its own."""

    name: str
    rewrite: Callable[[ir.Kernel], ir.Kernel]

    def __call__(self, program: ir.Program) -> ir.Program:
        return dataclasses.replace(program, kernels=[self.rewrite(k) for k in program.kernels])


@dataclass(frozen=True)
class ProgramPass:
    """A named program pass that rewrites the program as a whole (kernels merged)."""

    name: str
    rewrite: Callable[[ir.Program], ir.Program]

    def __call__(self, program: ir.Program) -> ir.Program:
        return self.rewrite(program)


def simplify_kernel(kernel: ir.Kernel) -> ir.Kernel:
    """Every expression simplified under the kernel's variable ranges, settled guards and empty
    statements dropped (`stmt_simplify`). The unit variables fold to 0, so the result has
    none."""
    body = simplify_stmt(kernel.body, MemoBounds(kernel_bounds(kernel)))
    if body is None:  # nothing left to run
        body = ir.Seq([])
    return dataclasses.replace(kernel, allocs=list(kernel.allocs), body=body, unit_vars=())


def fold_virtual_thread_copies(kernel: ir.Kernel) -> ir.Kernel:
    """A kernel that virtual-thread injection copied statements of, simplified again (the
    copies' constants folded); any other kernel as it is."""
    return simplify_kernel(kernel) if kernel.vthread > 1 else kernel


def unroll_register_index_loops(kernel: ir.Kernel) -> ir.Kernel:
    """Every loop whose variable indexes a local array unrolled (`unrolling`)."""
    body = unroll_register_indices(kernel.body)
    return dataclasses.replace(kernel, allocs=list(kernel.allocs), body=body)


# From the emitted program to the analysis program, in the order they run.
LOWERING_PASSES: tuple[KernelPass | ProgramPass, ...] = (
    ProgramPass("finish_in_last_block", finish_in_last_block),
    KernelPass("double_buffer_fragments", double_buffer_fragments),
    KernelPass("simplify", simplify_kernel),
    KernelPass("inject_virtual_threads", inject_virtual_threads),
    KernelPass("fold_virtual_thread_copies", fold_virtual_thread_copies),
    KernelPass("unroll_register_indices", unroll_register_index_loops),
    KernelPass("warpgroup_mma", warpgroup_mma),
    KernelPass("narrow_tiles", narrow_tiles),
    KernelPass("alias_epilogue_tile", alias_epilogue_tile),
)

# From the analysis program to the device program, in the order they run.
DEVICE_PASSES: tuple[KernelPass, ...] = (
    KernelPass("fold_index_digits", fold_index_digits),
    KernelPass("hoist_row_scalars", hoist_row_scalars),
    KernelPass("approximate_exp", approximate_exp),
    KernelPass("drop_idle_barrier", drop_idle_barrier),
    KernelPass("mark_single_allreduces", mark_single_allreduces),
    KernelPass("warp_specialize", warp_specialize),
)


def run_passes(program: ir.Program, passes: tuple[KernelPass | ProgramPass, ...]) -> ir.Program:
    """`program` through `passes`, in order."""
    for program_pass in passes:
        program = program_pass(program)
    return program


def device_program(program: ir.Program, verify: bool | None = None) -> ir.Program:
    """The program to print and run: the analysis `program` through DEVICE_PASSES. Buffers
    are shared with `program`. `verify` runs the IR verifier (no launch limits) on the result;
    None verifies when `verify.verify_every_lowering` turned that on."""
    out = run_passes(program, DEVICE_PASSES)
    if verifying_every_lowering() if verify is None else verify:
        verify_program(out, launch_limits=False)
    return out
