"""Sampling complete states from sketches.

`SketchSampler` analyses its sketches once, then draws states: a sketch at random, the init
rules in order, then the validity check of `validity.py` (with `verify`: lowering and the
lowered program's GPU limits; without: only the limits visible on the state). States that fail
are dropped and their reasons counted in a `collections.Counter` (`sampler.rejected`); nothing
raises.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from autosched.lower import ir
from autosched.schedule.loop_state import State
from autosched.sketch.init_rules import GPU_INIT_RULES, InitContext, InitRule
from autosched.sketch.params import SketchParams
from autosched.sketch.plan import make_plan
from autosched.sketch.validity import (
    Reason,
    Rejected,
    check_candidate,
    check_state,
    reason_for,
)
from measure.hardware import HardwareParams

log = logging.getLogger(__name__)


def as_random(rng: Any) -> random.Random:
    """A `random.Random` from a seed, a `random.Random` or a numpy Generator (which is advanced
    by one draw)."""
    if isinstance(rng, random.Random):
        return rng
    if isinstance(rng, np.random.Generator):
        return random.Random(int(rng.integers(2**63)))
    return random.Random(rng)


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
        self.hardware = hardware or HardwareParams()
        self.params = params or SketchParams()
        self.ctx = InitContext(self.params, self.hardware)
        self.plans = [make_plan(s, self.params, self.hardware) for s in sketches]
        self.verify = verify
        self.rules = rules
        self.rejected: collections.Counter = collections.Counter()
        # the lowered programs of the states the last `sample` call returned, by state key
        # (when verifying), so callers need not lower them again
        self.programs: dict[tuple, ir.Program] = {}
        # the index of the sketch each of those states was drawn from, by state key
        self.sketch_of: dict[tuple, int] = {}

    def _sample_one(self, plan, rng: random.Random) -> tuple[State, ir.Program | None]:
        """One complete state of a plan's sketch and, when verifying, its lowered program;
        raises Rejected."""
        state = plan.sketch
        try:
            for rule in self.rules:
                state = rule.apply(self.ctx, plan, state, rng)
        except Rejected:
            raise
        except Exception as e:  # ScheduleError, or a bug elsewhere (logged, counted)
            raise Rejected(reason_for(e, f"init rules on a sketch of {plan.sketch.dag!r}")) from e
        if self.verify:
            program, reason = check_candidate(state, self.hardware, self.params)
        else:
            program, reason = None, check_state(state, self.hardware)
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
        self.sketch_of = {}
        tries = 0
        limit = max_tries if max_tries is not None else 50 * n
        while len(out) < n and tries < limit:
            tries += 1
            index = rng.randrange(len(self.plans))
            try:
                state, program = self._sample_one(self.plans[index], rng)
            except Rejected as e:
                self.rejected[e.reason] += 1
                continue
            key = state.key()
            if key in seen:
                self.rejected[Reason.DUPLICATE.value] += 1
                continue
            seen.add(key)
            out.append(state)
            self.sketch_of[key] = index
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
