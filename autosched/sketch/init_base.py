"""The interface of the init rules (random annotation): `InitRule` and the `InitContext` it
reads. A module of its own so that init_rules.py, tensor_core_init.py and shared_padding.py
(which init_rules.py imports) all subclass it."""

from __future__ import annotations

import random
from dataclasses import dataclass

from autosched.schedule.loop_state import State
from autosched.sketch.params import SketchParams
from autosched.sketch.plan import SketchPlan
from measure.hardware import HardwareParams


@dataclass
class InitContext:
    """What init rules may look at besides the plan and the state: the sketch parameters and
    the GPU's limits (threads, vthreads, shared memory, `registers_per_thread_limit`)."""

    params: SketchParams
    hardware: HardwareParams


class InitRule:
    """One random-annotation rule: state in, state out (or `Rejected`)."""

    def apply(self, ctx: InitContext, plan: SketchPlan, state: State, rng: random.Random) -> State:
        """The state with this rule's random decisions made; raises `Rejected` (validity.py)
        when the rule cannot make a valid one."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__


__all__ = ["InitContext", "InitRule"]
