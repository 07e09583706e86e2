"""Sampling complete states from sketches, and the GPU-limit filter.

`SketchSampler` analyses its sketches once, then draws states: a sketch at random, the init
rules in order, then `check_program` on the lowered program (threads per block, vthread,
shared memory, registers, vector width). States that fail are dropped and their reasons
counted in a `collections.Counter` (`sampler.rejected`); nothing raises.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from autosched.errors import LoweringError, ScheduleError
from autosched.lower import ir
from autosched.lower.lowering import lower
from autosched.schedule.loop_state import State
from autosched.sketch.init_rules import (
    GPU_INIT_RULES,
    InitContext,
    InitRule,
    Limits,
    Rejected,
    make_plan,
)
from autosched.sketch.utils import SketchParams
from autosched.te.dtype import BYTES

log = logging.getLogger(__name__)


def as_random(rng: Any) -> random.Random:
    """A `random.Random` from a seed, a `random.Random` or a numpy Generator (which is advanced
    by one draw)."""
    if isinstance(rng, random.Random):
        return rng
    if isinstance(rng, np.random.Generator):
        return random.Random(int(rng.integers(2**63)))
    return random.Random(rng)


def check_state(state: State, limits: Limits) -> str | None:
    """Limits visible on the state itself (cheap): vthread extents."""
    for stage in state.stages:
        for it in stage.iters:
            if it.annotation == "vthread" and (it.extent or 0) > limits.max_vthread_extent:
                return "vthread"
    return None


def _vector_bytes(s: ir.Stmt) -> int:
    """The widest vectorised store of a statement tree, in bytes."""
    widest = 0
    for node in ir.iter_stmts(s):
        if isinstance(node, ir.For) and node.kind == "vectorize":
            for inner in ir.iter_stmts(node.body):
                if isinstance(inner, ir.Store):
                    widest = max(widest, node.extent * BYTES.get(inner.buffer.dtype, 4))
    return widest


def unrolled_statements(s: ir.Stmt) -> int:
    """How many statements the kernel body has once its unrolled loops are unrolled (the code
    nvcc has to compile and keep in registers)."""
    return ir.executed_statements(s, ("unroll",))


def check_program(program: ir.Program, limits: Limits, params: SketchParams) -> str | None:
    """The first GPU limit a lowered program breaks, or None."""
    for k in program.kernels:
        if k.threads_per_block > limits.max_threads_per_block:
            return "threads_per_block"
        if k.shared_bytes > limits.max_shared_memory_per_block:
            return "shared_memory"
        local = sum(b.size for b in k.allocs if b.scope == "local")
        if local > params.max_local_elems:
            return "local_memory"
        if _vector_bytes(k.body) > params.max_vector_bytes:
            return "vector_bytes"
        if unrolled_statements(k.body) > params.max_unrolled_statements:
            return "code_size"
    return None


class SketchSampler:
    """Draws complete, checked states from a list of sketches."""

    def __init__(
        self,
        sketches: Sequence[State],
        hardware: Any = None,
        params: SketchParams | None = None,
        verify: bool = True,
        rules: tuple[InitRule, ...] = GPU_INIT_RULES,
    ) -> None:
        if not sketches:
            raise ValueError("SketchSampler needs at least one sketch")
        if hardware is None:
            from measure.hardware import HardwareParams

            hardware = HardwareParams()
        self.params = params or SketchParams()
        self.ctx = InitContext(self.params, hardware)
        self.plans = [make_plan(s, self.params, self.ctx.limits) for s in sketches]
        self.verify = verify
        self.rules = rules
        self.rejected: collections.Counter = collections.Counter()
        # the lowered programs of the states the last `sample` call returned, by state key
        # (when verifying), so callers need not lower them again
        self.programs: dict[tuple, ir.Program] = {}

    def sample_one(self, rng: random.Random, sketch: int | None = None) -> State:
        """One complete state; raises Rejected with the reason when it breaks a limit."""
        state, _ = self._sample_one(rng, sketch)
        return state

    def _sample_one(
        self, rng: random.Random, sketch: int | None
    ) -> tuple[State, ir.Program | None]:
        plan = self.plans[rng.randrange(len(self.plans)) if sketch is None else sketch]
        state = plan.sketch
        try:
            for rule in self.rules:
                state = rule.apply(self.ctx, plan, state, rng)
        except ScheduleError as e:
            raise Rejected("schedule_error", str(e)) from e
        except Rejected:
            raise
        except Exception as e:  # a bug elsewhere must not end the search: count and log it
            log.warning(
                "init rules failed on a sketch of %r: %s: %s", plan.sketch.dag, type(e).__name__, e
            )
            raise Rejected(f"internal_error:{type(e).__name__}", str(e)) from e
        reason = check_state(state, self.ctx.limits)
        program = None
        if reason is None and self.verify:
            try:
                program = lower(state)
            except LoweringError as e:
                raise Rejected("lowering_error", str(e)) from e
            except ScheduleError as e:
                raise Rejected("schedule_error", str(e)) from e
            except Exception as e:  # a lowering bug: count it, log it, go on
                log.warning("lowering failed: %s: %s", type(e).__name__, e)
                raise Rejected(f"internal_error:{type(e).__name__}", str(e)) from e
            reason = check_program(program, self.ctx.limits, self.params)
        if reason is not None:
            raise Rejected(reason)
        return state, program

    def sample(self, n: int, rng: Any = None, max_tries: int | None = None) -> list[State]:
        """Up to n distinct valid states (fewer only when `max_tries` draws, default 50 n, do
        not find enough)."""
        rng = as_random(rng)
        out: list[State] = []
        seen: set = set()
        self.programs = {}
        tries = 0
        limit = max_tries if max_tries is not None else 50 * n
        while len(out) < n and tries < limit:
            tries += 1
            try:
                state, program = self._sample_one(rng, None)
            except Rejected as e:
                self.rejected[e.reason] += 1
                continue
            key = state.key()
            if key in seen:
                self.rejected["duplicate"] += 1
                continue
            seen.add(key)
            out.append(state)
            if program is not None:
                self.programs[key] = program
        if self.rejected:
            log.debug(
                "sampled %d states in %d draws; rejected: %s", len(out), tries, dict(self.rejected)
            )
        if len(out) < n:
            log.warning(
                "only %d of %d states found in %d draws; rejected: %s",
                len(out),
                n,
                tries,
                dict(self.rejected),
            )
        return out
