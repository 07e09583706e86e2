"""Lowering: State -> loop-nest IR (ir.Program), as three steps.

  1. planning    the per-stage plan: bodies, attach tree, bounds, buffers, fragment tiling
                 (`planning.PLAN_STEPS`, filling a `plan.LoweringPlan`)
  2. emission    one kernel per root stage, its loop nests from the plan (`emission.py`)
  3. passes      register double buffering of mma fragments, simplification, virtual
                 threads, register-index unrolling
                 (`passes.LOWERING_PASSES`, each a program -> program function)

The result is the analysis program; `passes.device_program` turns it into the program printed
and run (`passes.DEVICE_PASSES`).
"""

from __future__ import annotations

from autosched.lower import ir
from autosched.lower.emission import emit_program
from autosched.lower.passes import LOWERING_PASSES, run_passes
from autosched.lower.plan import LoweringPlan
from autosched.lower.planning import make_plan
from autosched.lower.verify import verify_program, verifying_every_lowering
from autosched.schedule.loop_state import State


def lower(state: State, verify: bool | None = None) -> ir.Program:
    """Lower a complete State to a Program of CUDA-shaped kernels.

    This is the analysis program: indices keep the per-axis form bound inference gives them
    (the features read accesses per dimension from it). What is printed and run on a device
    comes from it through `passes.device_program`. `verify` runs the IR verifier (no launch
    limits) on the result; None verifies when `verify.verify_every_lowering` turned that on
    (tests do).
    """
    return lower_plan(make_plan(state), verify)


def lower_plan(plan: LoweringPlan, verify: bool | None = None) -> ir.Program:
    """`lower` from a State's plan (`planning.make_plan`) on: emission, then the passes. A
    caller that checks the plan before emitting it (the search's validity check) calls this."""
    program = run_passes(emit_program(plan), LOWERING_PASSES)
    if verifying_every_lowering() if verify is None else verify:
        verify_program(program, launch_limits=False)
    return program
