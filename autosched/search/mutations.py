"""The evolutionary search's mutations: small classes that register by name and rewrite decisions.

A candidate is its tuple of step records (`State.key()`): hashable, cheap to copy, compare and
pickle. A mutation rewrites *decision* records only (split lengths, auto-unroll pragmas; the
instruction family and pipeline depth records of Tensor Core stages, tensor_core_mutations.py),
never the structure the sketch fixed (nor the lengths a Tensor Core sketch fixed:
`fixed_levels`), and does not replay: whether the result is a valid state is the
evaluation's job (replay, lowering, GPU limits: workers.py with sketch/validity.py), which drops
the invalid.

    mutation = MUTATIONS["tile_size"]
    child = mutation.apply(ctx, [parent], rng)        # a new records tuple, or None

`Crossover` is the one two-parent rule: Ansor left crossover as a TODO; here it is uniform
crossover of the decisions of two parents from the same sketch.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from autosched.schedule.stage import TENSORIZE
from autosched.schedule.steps import (
    STEP_REGISTRY,
    AnnotationStep,
    PragmaStep,
    SplitStep,
    Step,
    replace,
)
from autosched.sketch.epilogue_vector import without_vector_epilogues
from autosched.sketch.params import SketchParams
from autosched.sketch.plan import SketchPlan
from autosched.sketch.tensor_core_plan import TensorCoreGroup
from autosched.sketch.utils import divisors, next_annotates
from measure.hardware import HardwareParams

Records = tuple  # a candidate: the tuple of its step records

AUTO_UNROLL = "auto_unroll_max_step"
LAUNCH_MIN_BLOCKS = "launch_min_blocks"
ONLINE_EXCHANGE = "online_exchange"
FAST_EXP = "fast_exp"
SINGLE_PASS = "single_pass"
# the pragmas an init rule draws on a sketch (either value: one sketch)
DRAWN_PRAGMAS = (LAUNCH_MIN_BLOCKS, ONLINE_EXCHANGE, FAST_EXP, SINGLE_PASS)


def as_step(record: tuple) -> Step:
    """The Step of a record the search made itself (already nested tuples, so no conversion;
    `Step.from_record` also validates and is ten times slower)."""
    return STEP_REGISTRY[record[0]](*record[1:])


def as_split(record: tuple) -> SplitStep:
    """`as_step` of a split's record ("SP"), typed as the SplitStep it is."""
    step = as_step(record)
    assert isinstance(step, SplitStep), f"not a split record: {record[0]}"
    return step


def as_pragma(record: tuple) -> PragmaStep:
    """`as_step` of a pragma's record ("PR"), typed as the PragmaStep it is."""
    step = as_step(record)
    assert isinstance(step, PragmaStep), f"not a pragma record: {record[0]}"
    return step


def with_record(records: Records, k: int, step: Step) -> Records:
    """`records` with record k replaced by `step`'s."""
    return records[:k] + (step.to_record(),) + records[k + 1 :]


def structure_key(records: Records) -> tuple:
    """The records with every decision blanked: equal for two candidates of the same sketch."""
    return tuple(_blank(r) for r in records)


def _blank(record: tuple) -> tuple:
    tag = record[0]
    if tag == SplitStep.TAG:
        return record[:4] + (None,) + record[5:]
    if tag != PragmaStep.TAG:  # no decision in any other record
        return record
    if record[3].startswith(AUTO_UNROLL):  # `is_unroll_pragma`
        return record[:3] + (AUTO_UNROLL,)
    for drawn in DRAWN_PRAGMAS:
        if record[3].startswith(drawn):
            return record[:3] + (drawn,)
    return record


def is_unroll_pragma(record: tuple) -> bool:
    """Whether a record is an auto_unroll_max_step pragma (the unroll-depth decision)."""
    return record[0] == PragmaStep.TAG and record[3].startswith(AUTO_UNROLL)


def tensorized_stages(records: Records) -> set[int]:
    """The stages (by the index their records carry) that a Tensor Core sketch tensorized;
    empty for a CUDA-core state."""
    return {r[1] for r in records if r[0] == AnnotationStep.TAG and r[3] == TENSORIZE}


def is_decision(record: tuple) -> bool:
    """Split lengths and auto-unroll pragmas are what sampling and mutation decide."""
    return record[0] == SplitStep.TAG or is_unroll_pragma(record)


@dataclass(frozen=True)
class TensorCoreChoices:
    """What the Tensor Core mutations (tensor_core_mutations.py) choose among, the init rules'
    menus, and where a candidate's Tensor Core stages are: the groups of the sketch it was drawn
    from, found by the sketch's records (a candidate's records start with its sketch's, the
    split lengths filled in)."""

    instructions: tuple[str, ...]  # SketchParams.tensor_core_instructions
    pipeline_stages: tuple[int, ...]  # SketchParams.pipeline_stages
    fragment_double_buffers: tuple[bool, ...]  # SketchParams.fragment_double_buffers
    operand_copies: tuple[str, ...]  # SketchParams.operand_copies
    hardware: HardwareParams  # its opt-in shared memory and registers bound the choices
    # (structure key of a sketch's records, its Tensor Core groups), for sketches that have any
    sketches: tuple[tuple[tuple, tuple[TensorCoreGroup, ...]], ...] = ()
    tma_im2col: bool = False  # SketchParams.tma_im2col
    warp_specializations: tuple[bool, ...] = (False,)  # SketchParams.warp_specializations

    @classmethod
    def of(
        cls, plans: Sequence[SketchPlan], params: SketchParams, hardware: HardwareParams
    ) -> TensorCoreChoices:
        """The choices of a task whose sketches have these plans."""
        sketches = tuple(
            (structure_key(p.sketch.key()), tuple(p.tensor_core)) for p in plans if p.tensor_core
        )
        return cls(
            params.tensor_core_instructions,
            params.pipeline_stages,
            params.fragment_double_buffers,
            params.operand_copies,
            hardware,
            sketches,
            params.tma_im2col,
            params.warp_specializations,
        )

    def groups(self, records: Records) -> tuple[TensorCoreGroup, ...]:
        """The Tensor Core groups of the sketch `records` were drawn from (empty if none); a
        vector epilogue's steps, inserted among the sketch's, are looked past."""
        for key, groups in self.sketches:
            n = len(key)
            if len(records) >= n and structure_key(records[:n]) == key:
                return groups
            plain = without_vector_epilogues(records, groups)
            if plain is not records and structure_key(plain[:n]) == key:
                return groups
        return ()


@dataclass
class MutationContext:
    """What mutations may consult besides their parents: the sketch parameters' limits and the
    unroll configs (one source of truth: the sampler's SketchParams)."""

    max_innermost_factor: int
    max_vector_length: int
    unroll_configs: tuple[int, ...]
    # the depths of tensorized (Tensor Core) stages (default: unroll_configs)
    tensor_core_unroll_configs: tuple[int, ...] = ()
    # the instruction families and pipeline depths of Tensor Core stages (None: not mutated)
    tensor_core: TensorCoreChoices | None = None
    # structure key -> positions of its decision records (filled on first use)
    decisions: dict = field(default_factory=dict)
    # structure key -> fixed_levels of its records (filled on first use)
    fixed: dict = field(default_factory=dict)
    # the last records asked about and their structure key (a mutation asks twice)
    last_key: list = field(default_factory=lambda: [None, None], compare=False, repr=False)

    def structure_key(self, records: Records) -> tuple:
        """`structure_key(records)`, made once for the records asked about last."""
        last = self.last_key
        if last[0] is not records:
            last[0], last[1] = records, structure_key(records)
        return last[1]

    def decision_ids(self, records: Records) -> tuple[int, ...]:
        key = self.structure_key(records)
        ids = self.decisions.get(key)
        if ids is None:
            ids = self.decisions[key] = tuple(k for k, r in enumerate(records) if is_decision(r))
        return ids

    def fixed_levels(self, records: Records) -> dict[int, int]:
        key = self.structure_key(records)
        got = self.fixed.get(key)
        if got is None:
            got = self.fixed[key] = fixed_levels(records)
        return got


MUTATIONS: dict[str, Mutation] = {}


class Mutation:
    """One mutation rule: `apply(ctx, parents, rng)` -> new records or None when it cannot
    change these parents. Subclasses set NAME (their key in MUTATIONS and in
    SearchParams.mutation_weights) and N_PARENTS."""

    NAME: ClassVar[str] = ""
    N_PARENTS: ClassVar[int] = 1
    # the rule changes only Tensor Core stages: the search draws it for their candidates only
    TENSOR_CORE_ONLY: ClassVar[bool] = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.NAME:
            MUTATIONS[cls.NAME] = cls()

    def apply(
        self, ctx: MutationContext, parents: Sequence[Records], rng: random.Random
    ) -> Records | None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__


def fixed_levels(records: Records) -> dict[int, int]:
    """Split record position -> how many of its innermost lengths the sketch fixed, in a
    candidate with Tensor Core stages: the 16 of every split of a tensorized stage (the wmma
    tile) and the whole of a split whose inner part the next step binds to threadIdx.x (the
    32 lanes: a kernel with warp statements has blockDim.x == 32). Stages are matched by the
    index their records carry (the Tensor Core sketch's caches precede its splits)."""
    tensorized = tensorized_stages(records)
    if not tensorized:
        return {}
    out = {}
    for k, r in enumerate(records):
        if r[0] != SplitStep.TAG:
            continue
        step = as_split(r)
        if step.stage_id in tensorized:
            out[k] = 1
        elif next_annotates(records, k, step, "threadIdx.x"):
            out[k] = len(step.lengths)
    return out


class TileSizeMutation(Mutation):
    """Move a factor from one level of a split to another (the levels' product stays the
    extent); the innermost level stays within max_innermost_factor, or within the widest vector
    for a vectorised split. Like Ansor's MutateTileSize: levels in random order, a factor of
    the first level above 1 moves to the next level in that order."""

    NAME = "tile_size"

    def apply(self, ctx, parents, rng):
        records = parents[0]
        splits = [k for k in ctx.decision_ids(records) if records[k][0] == SplitStep.TAG]
        fixed = ctx.fixed_levels(records)
        rng.shuffle(splits)
        for k in splits:
            step = as_split(records[k])
            levels = self.levels(step)
            n_fixed = fixed.get(k, 0)
            if levels is None or n_fixed >= len(step.lengths):
                continue
            vector = next_annotates(records, k, step, "vectorize")
            limit = ctx.max_vector_length if vector else ctx.max_innermost_factor
            if n_fixed:  # only the levels outside the fixed ones move; none is innermost
                head, tail = levels[:-n_fixed], levels[-n_fixed:]
                moved = self.move_factor(head, math.prod(levels), rng)
                moved = None if moved is None else moved + tail
            else:
                moved = self.move_factor(levels, limit, rng)
            if moved is not None:
                return with_record(records, k, replace(step, lengths=tuple(moved[1:])))
        return None

    @staticmethod
    def levels(step: SplitStep) -> list[int] | None:
        """[outer, *lengths] of an inner-to-outer split with known lengths, else None. A split
        that does not divide its extent (a padded tiling) counts its outer level rounded up: the
        levels' product is then the padded extent, which moving factors keeps."""
        if not step.inner_to_outer or step.extent is None or None in step.lengths:
            return None
        inner = math.prod(step.lengths)
        if step.extent <= 1 or (step.extent % inner and inner > step.extent):
            return None
        return [-(-step.extent // inner), *step.lengths]

    @staticmethod
    def move_factor(levels: list[int], limit: int, rng: random.Random) -> list[int] | None:
        order = list(range(len(levels)))
        rng.shuffle(order)
        last = len(levels) - 1
        for i, src in enumerate(order):
            dst = order[(i + 1) % len(order)]
            factors = divisors(levels[src])[1:]
            if dst == last:
                factors = tuple(f for f in factors if f * levels[dst] <= limit)
            if not factors:
                continue
            f = factors[int(rng.random() * len(factors))]
            out = list(levels)
            out[src] //= f
            out[dst] *= f
            return out
        return None


class AutoUnrollMutation(Mutation):
    """Another auto_unroll_max_step, from the sketch parameters' configs, for one pragma."""

    NAME = "auto_unroll"

    def apply(self, ctx, parents, rng):
        records = parents[0]
        pragmas = [k for k in ctx.decision_ids(records) if records[k][0] == PragmaStep.TAG]
        if not pragmas:
            return None
        k = pragmas[int(rng.random() * len(pragmas))]
        step = as_pragma(records[k])
        current = step.parsed()[1]
        configs = ctx.unroll_configs
        if ctx.tensor_core_unroll_configs and step.stage_id in tensorized_stages(records):
            configs = ctx.tensor_core_unroll_configs
        options = [c for c in configs if c != current]
        if not options:
            return None
        value = options[int(rng.random() * len(options))]
        return with_record(records, k, replace(step, pragma_type=f"{AUTO_UNROLL}${value}"))


class Crossover(Mutation):
    """Uniform crossover of two parents of the same sketch: every decision (the lengths of one
    split, so one axis of one stage's tiling, or one stage's unroll pragma) comes from either
    parent with even odds. Stage-level mixing (one stage's tiles from A, another's from B) is
    the special case of multi-stage DAGs. The child differs from both parents when they differ
    in two or more decisions, and is None otherwise (it could only copy a parent)."""

    NAME = "crossover"
    N_PARENTS = 2

    def apply(self, ctx, parents, rng):
        a, b = parents
        if len(a) != len(b) or structure_key(a) != structure_key(b):
            return None
        differ = [k for k in ctx.decision_ids(a) if a[k] != b[k]]
        if len(differ) < 2:
            return None
        from_b = {k for k in differ if rng.random() < 0.5}
        if not from_b:  # all from a: take one decision from b
            from_b = {differ[int(rng.random() * len(differ))]}
        elif len(from_b) == len(differ):  # all from b: keep one decision of a
            from_b.discard(differ[int(rng.random() * len(differ))])
        return tuple(b[k] if k in from_b else r for k, r in enumerate(a))


__all__ = [
    "MUTATIONS",
    "AutoUnrollMutation",
    "Crossover",
    "Mutation",
    "MutationContext",
    "Records",
    "TensorCoreChoices",
    "TileSizeMutation",
    "fixed_levels",
    "as_step",
    "is_decision",
    "structure_key",
    "tensorized_stages",
    "with_record",
]
