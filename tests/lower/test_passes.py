"""Lowering's steps in a row: the plan of two small workloads (tests/golden/plan_<name>.txt,
what planning.PLAN_STEPS derive), and each program pass (autosched/lower/passes.py) with its
program before and after it, on a workload where it changes something
(tests/golden/pass_<name>.txt).

After a change to planning, emission or a pass: `pytest --update-golden tests/lower/test_passes.py`,
then review the diff of tests/golden/.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autosched.lower import ir, stmt_walk
from autosched.lower.emission import emit_program
from autosched.lower.ir_text import program_text
from autosched.lower.lowering import lower
from autosched.lower.passes import DEVICE_PASSES, LOWERING_PASSES, KernelPass, ProgramPass
from autosched.lower.plan import plan_text
from autosched.lower.planning import PLAN_STEPS, make_plan
from autosched.schedule.compute_dag import ComputeDAG
from autosched.schedule.loop_state import State
from autosched.te.expr import Expr
from autosched.te.visitor import free_vars
from benchmarks.memory_bound import rms_norm
from tests.lower.test_single_pass import norm_state
from tests.lower.test_warpgroup_mma import wgmma_matmul_state
from tests.workloads_for_tests import (
    conv2d_bias_relu_dag,
    matmul_dag,
    matmul_shared_state,
    seed_conv_state,
    softmax_dag,
)

ALL_PASSES: tuple[KernelPass | ProgramPass, ...] = LOWERING_PASSES + DEVICE_PASSES


def matmul_vthread_state() -> State:
    """An 8x8x4 matmul with two virtual threads, a local accumulator and shared fetches."""
    dag = matmul_dag(8, 8, 4)
    tiles = {"i": (2, 2, 1, 1), "j": (1, 2, 1, 2), "k": (2, 1)}
    return matmul_shared_state(dag, tiles, (2, 1), unroll=0)


def conv_fetch_state() -> State:
    """A 3x3 conv2d whose cooperative fetches index their shared tiles per axis."""
    dag = conv2d_bias_relu_dag(n=1, h=3, w=3, co=4, ci=2, kh=3, kw=3)
    tiles = {
        "nn": (1, 1, 1, 1),
        "ff": (1, 2, 1, 1),
        "yy": (1, 1, 1, 1),
        "xx": (1, 1, 3, 1),
        "rc": (1, 2),
        "ry": (1, 3),
        "rx": (1, 3),
    }
    return seed_conv_state(dag, tiles, {"kernel.shared": 1, "pad_temp.shared": 1}, unroll=0)


def warp_specialized_tma_state() -> State:
    """A TMA-fed wgmma pipeline of 3 slots over 4 K steps, warp-specialised."""
    from tests.lower.test_tma_fetch import matmul_dag, recipe_state

    state = recipe_state(matmul_dag(64, 64, 256), 3)
    return state.warp_specialize("T_matmul.wmma.accumulator")


def mma_double_buffered_state() -> State:
    """A 64^3 fp16 Tensor Core matmul on mma fragments, double-buffered in registers over its
    two k-steps per shared tile."""
    from tests.lower.test_tensorize import matmul_state

    _, state = matmul_state()
    acc = "T_matmul.wmma.accumulator"
    return state.tensor_core_instruction(acc, "mma").fragment_double_buffer(acc)


def epilogue_double_buffered_state() -> State:
    """A 64^3 fp16 Tensor Core matmul whose cast epilogue reads its output tile from shared
    memory, its operand caches double-buffered (a barrier then follows the main loop)."""
    from tests.lower.test_tensorize import matmul_state

    _, state = matmul_state(epilogue=True)
    return state.double_buffer("A.shared").double_buffer("B.shared")


def narrow_tile_state() -> State:
    """A 64^3 fp16 Tensor Core matmul on mma fragments whose cast epilogue reads its output
    tile from shared memory, that tile marked to be kept in fp16."""
    from tests.lower.test_tensorize import matmul_state

    _, state = matmul_state(epilogue=True)
    state = state.tensor_core_instruction("T_matmul.wmma.accumulator", "mma")
    return state.narrow_tile("T_matmul")


# pass name -> the workload its golden test lowers
WORKLOAD_OF: dict[str, Callable[[], State]] = {
    "finish_in_last_block": lambda: norm_state(),
    "double_buffer_fragments": mma_double_buffered_state,
    "simplify": matmul_vthread_state,
    "inject_virtual_threads": matmul_vthread_state,
    "fold_virtual_thread_copies": matmul_vthread_state,
    "unroll_register_indices": matmul_vthread_state,
    "warpgroup_mma": wgmma_matmul_state,
    "narrow_tiles": narrow_tile_state,
    "alias_epilogue_tile": epilogue_double_buffered_state,
    "fold_index_digits": conv_fetch_state,
    "hoist_row_scalars": lambda: row_softmax_state(),
    "approximate_exp": lambda: row_softmax_state().pragma("T_softmax_norm", 0, "fast_exp", 1),
    "drop_idle_barrier": lambda: rms_rows_in_registers_state(),
    "mark_single_allreduces": lambda: rms_rows_in_registers_state(),
    "warp_specialize": lambda: warp_specialized_tma_state(),
}


def programs_around(state: State, name: str) -> tuple[ir.Program, ir.Program]:
    """The program the pass `name` gets when `state` is lowered, and the one it returns."""
    program = emit_program(make_plan(state))
    for program_pass in ALL_PASSES:
        if program_pass.name == name:
            return program, program_pass(program)
        program = program_pass(program)
    raise AssertionError(f"no pass is named {name!r}")


def row_softmax_state() -> State:
    """A softmax of rows of 64 on blocks of 32 threads, its max and sum reduced across the
    threads into shared memory, which the output reads for each of a thread's 2 elements."""
    from tests.lower.test_cross_thread import softmax_state

    return softmax_state(softmax_dag(2, 64), 32)


def rms_rows_in_registers_state() -> State:
    """RMSNorm of rows of 64 on blocks of 32 threads, each thread keeping its 2 elements of
    the row in a thread-private cache filled first, the mean square reduced across the threads
    into shared memory after it."""
    dag = ComputeDAG(rms_norm(2, 64))
    state = dag.get_init_state().cache_read("x", "local", ["ms", "rms"])
    state = state.split("rms", "j", [32]).bind("rms", "j_i", "threadIdx.x")
    state = state.follow_split("ms", "k", 1, 1).bind("ms", "k_i", "threadIdx.x")
    state = state.compute_at("ms", "rms", "i").bind("rms", "i", "blockIdx.x")
    state = state.compute_at("x.local", "rms", "i")
    state = state.follow_split("x.local", "ax1", 1, 1)
    return state.bind("x.local", "ax1_i", "threadIdx.x")


def row_in_registers_state() -> State:
    """Rows of 200 on blocks of 64 threads, each thread keeping its 4 elements of the row in
    a thread-private cache (lower/thread_private.py): its buffer is 4 slots, its region the
    row."""
    from tests.lower.test_thread_private import doubled_rows, row_cached

    return row_cached(doubled_rows(2, 200), 64, "i")


PLAN_WORKLOADS: dict[str, Callable[[], State]] = {
    "matmul_vthread": matmul_vthread_state,
    "conv_fetch": conv_fetch_state,
    "row_in_registers": row_in_registers_state,
}


def test_the_planning_steps_run_in_this_order():
    assert [step.__name__ for step in PLAN_STEPS] == [
        "resolve_bodies",
        "build_attach_tree",
        "order_attached",
        "infer_bounds",
        "plan_thread_private",
        "check_online_exchanges",
        "make_buffers",
        "plan_fragments",
    ]


@pytest.mark.parametrize("name", list(PLAN_WORKLOADS))
def test_plan_golden(name, golden):
    """Every computed stage's scope, attach point, region, extents and buffer."""
    golden(f"plan_{name}.txt", plan_text(make_plan(PLAN_WORKLOADS[name]())) + "\n")


def test_the_passes_run_in_this_order():
    assert [p.name for p in LOWERING_PASSES] == [
        "finish_in_last_block",
        "double_buffer_fragments",
        "simplify",
        "inject_virtual_threads",
        "fold_virtual_thread_copies",
        "unroll_register_indices",
        "warpgroup_mma",
        "narrow_tiles",
        "alias_epilogue_tile",
    ]
    assert [p.name for p in DEVICE_PASSES] == [
        "fold_index_digits",
        "hoist_row_scalars",
        "approximate_exp",
        "drop_idle_barrier",
        "mark_single_allreduces",
        "warp_specialize",
    ]


def test_every_pass_has_a_golden_workload():
    assert list(WORKLOAD_OF) == [p.name for p in ALL_PASSES]


@pytest.mark.parametrize("name", list(WORKLOAD_OF))
def test_pass_golden(name, golden):
    """The program before and after the pass; the pass changes it and leaves its input as it
    was."""
    before, after = programs_around(WORKLOAD_OF[name](), name)
    text_before = program_text(before)
    text_after = program_text(after)
    assert text_after != text_before, f"{name} changes nothing on its golden workload"
    assert program_text(before) == text_before
    golden(f"pass_{name}.txt", f"# before {name}\n{text_before}\n# after {name}\n{text_after}\n")


def test_lower_is_emission_then_the_lowering_passes():
    state = matmul_vthread_state()
    _, analysis = programs_around(state, LOWERING_PASSES[-1].name)
    assert program_text(lower(state)) == program_text(analysis)


def free_var_ids(program: ir.Program) -> set[int]:
    """The ids of the variables the program's expressions use."""
    found: set[int] = set()

    def collect(e: Expr) -> Expr:
        found.update(id(v) for v in free_vars(e))
        return e

    for kernel in program.kernels:
        stmt_walk.map_exprs(kernel.body, collect)
    return found


def test_simplify_folds_the_unit_variables_away():
    """Emission lists the variables of the loops it did not emit; simplification folds them to
    0 and the kernel it returns lists none."""
    before, after = programs_around(matmul_vthread_state(), "simplify")
    unit = {id(v) for k in before.kernels for v in k.unit_vars}
    assert unit & free_var_ids(before)
    assert not unit & free_var_ids(after)
    assert all(not k.unit_vars for k in after.kernels)
