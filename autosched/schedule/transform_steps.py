"""Transform steps: small frozen dataclasses that register themselves by record tag.

Each step holds, together: `apply` (state -> state), `to_record` / `from_record` (a JSON-able
list that starts with the tag), and `to_python` (its lines of the equivalent TVM-style Python
schedule). Stages and iterators are named by index, which makes steps replayable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, ClassVar

from autosched.errors import ScheduleError
from autosched.schedule.rfactor import rfactor_ops
from autosched.schedule.stage import (
    ANNOTATIONS,
    ATTACHED,
    INLINED,
    MIXED,
    ROOT,
    THREAD_ANNOTATIONS,
    FuseRel,
    Iterator,
    SplitRel,
    Stage,
    stage_from_op,
)
from autosched.te.expr import IterVar, Load, Reduce
from autosched.te.tensor import ComputeOp
from autosched.te.visitor import substitute

if TYPE_CHECKING:
    from autosched.schedule.loop_state import State

STEP_REGISTRY: dict[str, type[Step]] = {}
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # record field names per step class


def replace(obj, **changes):
    """`dataclasses.replace` for the frozen slots dataclasses of loop_state (Stage, Iterator):
    copies the slots directly instead of re-running `__init__`, several times faster; the search
    creates millions of stages."""
    cls = type(obj)
    new = object.__new__(cls)
    for name in cls.__slots__:
        object.__setattr__(new, name, changes.pop(name) if name in changes else getattr(obj, name))
    if changes:
        raise TypeError(f"{cls.__name__} has no fields {sorted(changes)}")
    return new


def check(cond: bool, msg: str | Callable[[], str]) -> None:
    """Raise ScheduleError(msg) unless `cond`: the one way steps reject invalid input. Hot paths
    pass `msg` as a lambda, so the message is only formatted when the step is rejected."""
    if not cond:
        raise ScheduleError(msg if isinstance(msg, str) else msg())


def pyname(stage: Stage | str) -> str:
    """The Python variable of a stage in the printed schedule (`kernel.shared` -> `kernel_shared`)."""
    name = stage if isinstance(stage, str) else stage.name
    return name.replace(".", "_")


def pyiter(stage: Stage, name: str) -> str:
    return f"{pyname(stage)}_{name}"


class Step:
    """Base class. Subclasses are frozen dataclasses with `TAG` set; fields are record fields."""

    TAG: ClassVar[str] = ""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.TAG:
            # dataclass(slots=True) re-creates the class: the last definition is the real one.
            STEP_REGISTRY[cls.TAG] = cls

    def apply(self, state: State) -> State:
        raise NotImplementedError

    def to_python(self, before: State, after: State) -> list[str]:
        raise NotImplementedError

    def to_record(self) -> tuple:
        """(TAG, *fields): nested tuples, which JSON writes as lists (from_record accepts both)."""
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in fields(self))
        return (self.TAG,) + tuple(getattr(self, n) for n in names)

    @classmethod
    def from_record(cls, record) -> Step:
        check(
            isinstance(record, (list, tuple)) and record and record[0] in STEP_REGISTRY,
            f"unknown step record {record!r}",
        )
        sub = STEP_REGISTRY[record[0]]
        names = [f.name for f in fields(sub)]
        check(
            len(record) - 1 == len(names),
            f"step record {record!r} needs {len(names)} fields {names}",
        )
        return sub(*(_tuplify(v) for v in record[1:]))


def _tuplify(v):
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


# ---- helpers shared by steps ---------------------------------------------------------------


def _retarget_attach(stages: list[Stage], target: int, rename: dict[str, str]) -> None:
    """Stages attached at a renamed iterator of stage `target` follow it to its new name."""
    for i, s in enumerate(stages):
        if s.attach is not None and s.attach[0] == target and s.attach[1] in rename:
            stages[i] = replace(s, attach=(target, rename[s.attach[1]]))


def _insert_stage(stages: list[Stage], pos: int, stage: Stage) -> None:
    for i, s in enumerate(stages):
        if s.attach is not None and s.attach[0] >= pos:
            stages[i] = replace(s, attach=(s.attach[0] + 1, s.attach[1]))
    stages.insert(pos, stage)


def _producer_map(state: State) -> dict[int, int]:
    """id(op) -> index of the stage whose result a load of op's tensor reads."""
    return {id(s.produces): i for i, s in enumerate(state.stages)}


def reads_of(state: State, index: int, producers: dict[int, int] | None = None) -> set[int]:
    """Stages whose results stage `index` reads (after its redirects). `producers`, from
    `_producer_map(state)`, saves the lookup when calling this for many stages."""
    stage = state.stages[index]
    if not isinstance(stage.op, ComputeOp):
        return set()
    if producers is None:
        producers = _producer_map(state)
    redirect = {id(a): b for a, b in stage.redirects} if stage.redirects else None
    out = set()
    for t in stage.op.input_tensors:
        op = t.op
        while redirect and id(op) in redirect:  # a cache of a cache: follow the chain
            op = redirect[id(op)]
        j = producers.get(id(op))
        if j is None:
            raise ScheduleError(f"no stage produces {op.name!r}")
        out.add(j)
    return out


def consumers_of(state: State, index: int) -> set[int]:
    producers = _producer_map(state)
    return {j for j in range(len(state.stages)) if index in reads_of(state, j, producers)}


def _transitive_consumers(state: State, index: int) -> set[int]:
    producers = _producer_map(state)
    consumers: dict[int, list[int]] = {}
    for j in range(len(state.stages)):
        for i in reads_of(state, j, producers):
            consumers.setdefault(i, []).append(j)
    out, todo = set(), [index]
    while todo:
        for c in consumers.get(todo.pop(), ()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _check_unannotated(stage: Stage, its: list[Iterator], what: str) -> None:
    for it in its:
        if it.annotation != "none":
            raise ScheduleError(
                f"cannot {what} iterator {it.name!r} of stage {stage.name!r}: it "
                f"is already annotated {it.annotation!r}"
            )


def _split_names(name: str, n: int, inner_to_outer: bool) -> list[str]:
    if inner_to_outer:
        return [name + "_o" * n] + [name + "_o" * (n - k) + "_i" for k in range(1, n + 1)]
    return [name + "_i" * k + "_o" for k in range(n)] + [name + "_i" * n]


def _apply_split(state: State, si: int, ii: int, lengths: tuple, inner_to_outer: bool) -> State:
    stage = state.stages[si]
    it = stage.iters[stage.iter_index(ii)]
    _check_unannotated(stage, [it], "split")
    # Messages are built only on failure: this is the search's hottest path.
    check(len(lengths) >= 1, lambda: f"split of {stage.name}.{it.name} needs at least one length")
    for l in lengths:
        check(
            l is None or (isinstance(l, int) and l > 0),
            lambda: (
                f"split of {stage.name}.{it.name}: lengths must be positive ints or None, "
                f"got {lengths}"
            ),
        )
    known = None not in lengths and it.extent is not None
    rest = -(-it.extent // math.prod(lengths)) if known else None
    extents = [rest, *lengths] if inner_to_outer else [*lengths, rest]
    names = _split_names(it.name, len(lengths), inner_to_outer)
    existing = {x.name for x in stage.iters}
    check(
        existing.isdisjoint(names),
        lambda: (
            f"split of {stage.name}.{it.name}: the name "
            f"{next(n for n in names if n in existing)!r} is taken"
        ),
    )
    children = tuple(Iterator(n, e, it.kind) for n, e in zip(names, extents))
    iters = stage.iters[:ii] + children + stage.iters[ii + 1 :]
    stages = list(state.stages)
    stages[si] = replace(
        stage,
        iters=iters,
        relations=stage.relations
        + (SplitRel(it.name, tuple(names), tuple(lengths), inner_to_outer),),
    )
    _retarget_attach(stages, si, {it.name: names[-1]})
    return state.with_stages(stages)


def _split_python(stage: Stage, name: str, lengths: tuple, inner_to_outer: bool) -> list[str]:
    """TVM's form: every line binds the split's final iterator names (`nn_o_i, nn_i = split(nn)`,
    then `nn_o_o_i, nn_o_i = split(nn_o_i)`), so the Python names end up as the state's."""
    lines, cur = [], name
    S = pyname(stage)
    outs = _split_names(name, len(lengths), inner_to_outer)
    if inner_to_outer:
        for i in range(len(lengths) - 1, -1, -1):
            lines.append(
                f"{S}_{outs[i]}, {S}_{outs[i + 1]} = s[{S}].split({S}_{cur}, factor={lengths[i]})"
            )
            cur = outs[i]
    else:
        for i in range(len(lengths)):
            lines.append(
                f"{S}_{outs[i]}, {S}_{outs[i + 1]} = s[{S}].split({S}_{cur}, nparts={lengths[i]})"
            )
            cur = outs[i + 1]
    return lines


# ---- the steps -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SplitStep(Step):
    """Split an iterator into len(lengths)+1 parts; `lengths` are the inner parts' extents
    (outer to inner) when inner_to_outer, else the outer parts' (like `nparts=`)."""

    TAG: ClassVar[str] = "SP"
    stage_id: int
    iter_id: int
    extent: int | None
    lengths: tuple
    inner_to_outer: bool = True

    def apply(self, state):
        return _apply_split(
            state,
            self.stage_id,
            state.stages[self.stage_id].iter_index(self.iter_id),
            tuple(self.lengths),
            self.inner_to_outer,
        )

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        return _split_python(
            stage, stage.iters[self.iter_id].name, self.lengths, self.inner_to_outer
        )


def _follow_lengths(state: State, src_step_id: int, n_split: int) -> tuple:
    check(0 <= src_step_id < len(state.steps), lambda: f"follow_split: no step {src_step_id}")
    src = state.steps[src_step_id]
    check(isinstance(src, SplitStep), lambda: f"follow_split: step {src_step_id} is not a split")
    check(
        1 <= n_split <= len(src.lengths) + 1, lambda: f"follow_split: n_split {n_split} too large"
    )
    lengths = list(src.lengths[: n_split - 1])
    tail = src.lengths[n_split - 1 :]
    lengths.append(None if None in tail else math.prod(tail))
    return tuple(lengths)


@dataclass(frozen=True, slots=True)
class FollowSplitStep(Step):
    """Split like an earlier SplitStep: its first n_split-1 lengths and the product of the rest."""

    TAG: ClassVar[str] = "FSP"
    stage_id: int
    iter_id: int
    src_step_id: int
    n_split: int

    def lengths(self, state: State) -> tuple:
        return _follow_lengths(state, self.src_step_id, self.n_split)

    def apply(self, state):
        return _apply_split(state, self.stage_id, self.iter_id, self.lengths(state), True)

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        return _split_python(stage, stage.iters[self.iter_id].name, self.lengths(before), True)


@dataclass(frozen=True, slots=True)
class FollowFusedSplitStep(Step):
    """Split by the product of the `level`-th lengths of several earlier SplitSteps."""

    TAG: ClassVar[str] = "FFSP"
    stage_id: int
    iter_id: int
    src_step_ids: tuple
    level: int
    factor_or_nparts: bool

    def length(self, state: State):
        total = 1
        for sid in self.src_step_ids:
            if not (0 <= sid < len(state.steps) and isinstance(state.steps[sid], SplitStep)):
                raise ScheduleError(f"follow_fused_split: step {sid} is not a split")
            lengths = state.steps[sid].lengths
            check(
                self.level < len(lengths),
                lambda: f"follow_fused_split: level {self.level} too deep",
            )
            if lengths[self.level] is None:
                return None
            total *= lengths[self.level]
        return total

    def apply(self, state):
        return _apply_split(
            state, self.stage_id, self.iter_id, (self.length(state),), self.factor_or_nparts
        )

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        return _split_python(
            stage, stage.iters[self.iter_id].name, (self.length(before),), self.factor_or_nparts
        )


@dataclass(frozen=True, slots=True)
class FuseStep(Step):
    """Fuse consecutive iterators into one."""

    TAG: ClassVar[str] = "FU"
    stage_id: int
    fused_ids: tuple

    def apply(self, state):
        stage = state.stages[self.stage_id]
        ids = list(self.fused_ids)
        check(len(ids) >= 1, lambda: f"fuse on stage {stage.name!r} needs at least one iterator")
        for i in ids:
            stage.iter_index(i)
        check(
            all(b == a + 1 for a, b in zip(ids, ids[1:])),
            lambda: (
                f"fuse on stage {stage.name!r}: iterators {[stage.iters[i].name for i in ids]} "
                "are not adjacent (outer to inner)"
            ),
        )
        its = [stage.iters[i] for i in ids]
        if len(its) == 1:
            return state
        _check_unannotated(stage, its, "fuse")
        name = its[0].name
        for it in its[1:]:
            name = f"{name}_{it.name}_fused"
        kinds = {it.kind for it in its}
        kind = kinds.pop() if len(kinds) == 1 else MIXED
        extent = (
            None if any(it.extent is None for it in its) else math.prod(it.extent for it in its)
        )
        fused = Iterator(name, extent, kind)
        iters = stage.iters[: ids[0]] + (fused,) + stage.iters[ids[-1] + 1 :]
        rel = FuseRel(tuple(it.name for it in its), name)
        stages = list(state.stages)
        stages[self.stage_id] = replace(stage, iters=iters, relations=stage.relations + (rel,))
        _retarget_attach(stages, self.stage_id, {it.name: name for it in its})
        return state.with_stages(stages)

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        its = [stage.iters[i].name for i in self.fused_ids]
        if len(its) == 1:
            return []
        fused = after.stages[self.stage_id].iters[self.fused_ids[0]].name
        S = pyname(stage)
        return [f"{S}_{fused} = s[{S}].fuse({', '.join(f'{S}_{n}' for n in its)})"]


@dataclass(frozen=True, slots=True)
class ReorderStep(Step):
    """Put the stage's iterators in the given order (a permutation of all of them)."""

    TAG: ClassVar[str] = "RE"
    stage_id: int
    after_ids: tuple

    def apply(self, state):
        stage = state.stages[self.stage_id]
        ids = list(self.after_ids)
        n = len(stage.iters)
        check(
            sorted(ids) == list(range(n)),
            lambda: (
                f"reorder on stage {stage.name!r} must list each of its {n} iterators once; got {ids} "
                f"(missing {[stage.iters[i].name for i in range(n) if i not in ids]}, repeated "
                f"{[stage.iters[i].name if 0 <= i < n else i for i in sorted(set(ids)) if ids.count(i) > 1]})"
            ),
        )
        return state.replace_stage(
            self.stage_id, replace(stage, iters=tuple(stage.iters[i] for i in ids))
        )

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        names = ", ".join(pyiter(stage, stage.iters[i].name) for i in self.after_ids)
        return [f"s[{pyname(stage)}].reorder({names})"]


@dataclass(frozen=True, slots=True)
class ComputeAtStep(Step):
    """Compute a stage inside a loop of one of its (transitive) consumers."""

    TAG: ClassVar[str] = "CA"
    stage_id: int
    target_stage_id: int
    target_iter_id: int

    def apply(self, state):
        stage = state.stages[self.stage_id]
        target = state.stages[self.target_stage_id]
        it = target.iters[target.iter_index(self.target_iter_id)]

        def where() -> str:
            return f"compute_at of {stage.name!r} at {target.name}.{it.name}"

        check(not stage.is_placeholder, lambda: f"{where()}: {stage.name!r} is a placeholder")
        check(
            self.stage_id != self.target_stage_id,
            lambda: f"{where()}: a stage cannot be computed inside itself (a cycle)",
        )
        # The cycle check comes first: its message says more than "not a consumer".
        cur, seen = target, set()
        while cur.attach is not None and cur.attach[0] not in seen:
            seen.add(cur.attach[0])
            check(
                cur.attach[0] != self.stage_id,
                lambda: (
                    f"{where()}: {target.name!r} is itself computed inside {stage.name!r}, "
                    "so this would create a cycle"
                ),
            )
            cur = state.stages[cur.attach[0]]
        check(
            self.target_stage_id in _transitive_consumers(state, self.stage_id),
            lambda: (
                f"{where()}: {target.name!r} does not consume {stage.name!r} (directly or "
                "through other stages), so attaching there would not be a consumer chain"
            ),
        )
        check(target.compute_at != INLINED, lambda: f"{where()}: the target is inlined")
        new = replace(stage, compute_at=ATTACHED, attach=(self.target_stage_id, it.name))
        return state.replace_stage(self.stage_id, new)

    def to_python(self, before, after):
        stage, target = before.stages[self.stage_id], before.stages[self.target_stage_id]
        it = target.iters[self.target_iter_id].name
        return [f"s[{pyname(stage)}].compute_at(s[{pyname(target)}], {pyiter(target, it)})"]


@dataclass(frozen=True, slots=True)
class ComputeRootStep(Step):
    TAG: ClassVar[str] = "CR"
    stage_id: int

    def apply(self, state):
        stage = state.stages[self.stage_id]
        check(not stage.is_placeholder, lambda: f"compute_root: {stage.name!r} is a placeholder")
        return state.replace_stage(self.stage_id, replace(stage, compute_at=ROOT, attach=None))

    def to_python(self, before, after):
        return [f"s[{pyname(before.stages[self.stage_id])}].compute_root()"]


@dataclass(frozen=True, slots=True)
class ComputeInlineStep(Step):
    """Substitute a stage's expression into its consumers."""

    TAG: ClassVar[str] = "CI"
    stage_id: int

    def apply(self, state):
        stage = state.stages[self.stage_id]
        info = state.dag.info.get(id(stage.produces))
        check(not stage.is_placeholder, lambda: f"compute_inline: {stage.name!r} is a placeholder")
        check(
            not isinstance(stage.op.body, Reduce),
            lambda: f"compute_inline: {stage.name!r} is a reduction and cannot be inlined",
        )
        check(
            info is None or not info.is_output,
            lambda: f"compute_inline: {stage.name!r} is an output of the DAG and cannot be inlined",
        )
        check(
            all(s.attach is None or s.attach[0] != self.stage_id for s in state.stages),
            lambda: f"compute_inline: other stages are computed at {stage.name!r}",
        )
        return state.replace_stage(self.stage_id, replace(stage, compute_at=INLINED, attach=None))

    def to_python(self, before, after):
        return [f"s[{pyname(before.stages[self.stage_id])}].compute_inline()"]


def _axes_line(stage: Stage, with_reduce: bool, via_schedule: bool = False) -> str:
    """`S_i, S_j, ... = tuple(S.op.axis) + ...`; `via_schedule` reads the op from `s[S]`, for a
    stage whose Python tensor still names the op it had before the step (rfactor's target)."""
    S = pyname(stage)
    names = ", ".join(f"{S}_{it.name}" for it in stage.root_iters)
    op = f"s[{S}].op" if via_schedule else f"{S}.op"
    tail = f" + tuple({op}.reduce_axis)" if with_reduce else ""
    return f"{names} = tuple({op}.axis){tail}"


@dataclass(frozen=True, slots=True)
class CacheReadStep(Step):
    """Add a stage that copies a tensor into `scope` for the given reader stages."""

    TAG: ClassVar[str] = "CHR"
    stage_id: int
    scope_name: str
    reader_stage_ids: tuple

    def apply(self, state):
        check(
            self.scope_name in ("shared", "local"),
            lambda: f"cache_read: scope must be shared or local, not {self.scope_name!r}",
        )
        src = state.stages[self.stage_id]
        check(src.compute_at != INLINED, lambda: f"cache_read: {src.name!r} is inlined")
        check(len(self.reader_stage_ids) > 0, "cache_read needs at least one reader stage")
        for r in self.reader_stage_ids:
            if self.stage_id not in reads_of(state, r):
                raise ScheduleError(
                    f"cache_read: stage {state.stages[r].name!r} does not read {src.name!r}"
                )
        tensor = src.produces.output(0)
        axes = tuple(IterVar(f"ax{i}", 0, d, IterVar.SPATIAL) for i, d in enumerate(tensor.shape))
        new_op = ComputeOp(f"{src.name}.{self.scope_name}", "", axes, Load(tensor, axes), {})
        stages = list(state.stages)
        for r in self.reader_stage_ids:
            reader = stages[r]
            stages[r] = replace(reader, redirects=reader.redirects + ((src.produces, new_op),))
        _insert_stage(
            stages,
            self.stage_id + 1,
            stage_from_op(new_op, scope=self.scope_name, origin="cache_read"),
        )
        return state.with_stages(stages)

    def to_python(self, before, after):
        src = before.stages[self.stage_id]
        new = after.stages[self.stage_id + 1]
        readers = ", ".join(pyname(before.stages[r]) for r in self.reader_stage_ids)
        return [
            f'{pyname(new)} = s.cache_read({pyname(src)}, "{self.scope_name}", [{readers}])',
            _axes_line(new, with_reduce=False),
        ]


@dataclass(frozen=True, slots=True)
class CacheWriteStep(Step):
    """Compute a stage into a `local` buffer first; the stage then copies it out."""

    TAG: ClassVar[str] = "CHW"
    stage_id: int
    scope_name: str

    def apply(self, state):
        stage = state.stages[self.stage_id]
        op = stage.op
        check(isinstance(op, ComputeOp), lambda: f"cache_write: {stage.name!r} is not a compute")
        check(stage.compute_at != INLINED, lambda: f"cache_write: {stage.name!r} is inlined")
        check(
            stage.iters == stage.root_iters,
            lambda: f"cache_write: {stage.name!r} was already transformed; cache_write it first",
        )
        check(
            all(s.attach is None or s.attach[0] != self.stage_id for s in state.stages),
            lambda: f"cache_write: other stages are computed at {stage.name!r}",
        )
        axis = tuple(IterVar(f"{a.name}_c", 0, a.extent, IterVar.SPATIAL) for a in op.axis)
        raxis = tuple(IterVar(a.name, a.lo, a.extent, IterVar.REDUCE) for a in op.reduce_axis)
        mapping = {**dict(zip(op.axis, axis)), **dict(zip(op.reduce_axis, raxis))}
        body = op.body
        if isinstance(body, Reduce):
            cond = substitute(body.condition, mapping) if body.condition is not None else None
            body = Reduce(body.reducer, substitute(body.source, mapping), raxis, cond)
        else:
            body = substitute(body, mapping)
        local_op = ComputeOp(f"{op.name}.{self.scope_name}", op.tag, axis, body, dict(op.attrs))
        out_axis = tuple(IterVar(a.name, 0, a.extent, IterVar.SPATIAL) for a in op.axis)
        copy_op = ComputeOp(
            op.name, op.tag, out_axis, Load(local_op.output(0), out_axis), dict(op.attrs)
        )
        stages = list(state.stages)
        stages[self.stage_id] = replace(
            stage_from_op(copy_op, produces=stage.produces),
            compute_at=stage.compute_at,
            attach=stage.attach,
        )
        local = stage_from_op(
            local_op, scope=self.scope_name, redirects=stage.redirects, origin="cache_write"
        )
        _insert_stage(stages, self.stage_id, local)
        return state.with_stages(stages)

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        local, new = after.stages[self.stage_id], after.stages[self.stage_id + 1]
        return [
            f'{pyname(local)}, = s.cache_write([{pyname(stage)}], "{self.scope_name}")',
            _axes_line(local, with_reduce=True),
            _axes_line(new, with_reduce=True),
        ]


@dataclass(frozen=True, slots=True)
class RfactorStep(Step):
    """Factor the reduce iterator `iter_id` out of a reduction: a new stage `<name>.rf`, inserted
    before it, computes partial reductions with that iterator as its spatial axis number
    `factor_iter_id`; the stage then reduces the rf tensor over it (TVM's `s.rfactor`). Both
    stages get fresh iterators from their ops, as in Ansor."""

    TAG: ClassVar[str] = "RF"
    stage_id: int
    iter_id: int
    factor_iter_id: int

    def apply(self, state):
        stage = state.stages[self.stage_id]
        check(not stage.is_placeholder, lambda: f"rfactor: {stage.name!r} is a placeholder")
        it = stage.iters[stage.iter_index(self.iter_id)]
        where = f"rfactor of {stage.name}.{it.name}"
        check(stage.compute_at != INLINED, lambda: f"{where}: stage {stage.name!r} is inlined")
        check(
            all(s.attach is None or s.attach[0] != self.stage_id for s in state.stages),
            lambda: (
                f"{where}: other stages are computed at {stage.name!r} "
                f"({[s.name for s in state.stages if s.attach and s.attach[0] == self.stage_id]}); "
                "rfactor it before compute_at"
            ),
        )
        annotated = [x.name for x in stage.iters if x.annotation != "none"]
        check(
            not annotated,
            lambda: (
                f"{where}: iterators {annotated} of {stage.name!r} are "
                "annotated; rfactor gives the stage fresh loops, so annotate after it"
            ),
        )
        ops = rfactor_ops(stage, stage.iter_index(self.iter_id), self.factor_iter_id)
        final = replace(
            stage_from_op(ops.final_op, produces=stage.produces),
            compute_at=stage.compute_at,
            attach=stage.attach,
            scope=stage.scope,
            origin=stage.origin,
        )
        rf = stage_from_op(ops.rf_op, redirects=stage.redirects, origin="rfactor")
        stages = list(state.stages)
        stages[self.stage_id] = final
        _insert_stage(stages, self.stage_id, rf)
        return state.with_stages(stages)

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        rf, final = after.stages[self.stage_id], after.stages[self.stage_id + 1]
        it = pyiter(stage, stage.iters[self.iter_id].name)
        return [
            f"{pyname(rf)} = s.rfactor({pyname(stage)}, {it}, factor_axis={self.factor_iter_id})",
            _axes_line(rf, with_reduce=True),
            _axes_line(final, with_reduce=True, via_schedule=True),
        ]


@dataclass(frozen=True, slots=True)
class AnnotationStep(Step):
    """Bind an iterator to a GPU thread axis, or mark it unroll / vectorize / parallel."""

    TAG: ClassVar[str] = "AN"
    stage_id: int
    iter_id: int
    annotation: str

    def apply(self, state):
        stage = state.stages[self.stage_id]
        ii = stage.iter_index(self.iter_id)
        it = stage.iters[ii]
        check(
            self.annotation in ANNOTATIONS,
            lambda: (
                f"unknown annotation {self.annotation!r} for "
                f"{stage.name}.{it.name}; known: {ANNOTATIONS}"
            ),
        )
        check(
            it.annotation in ("none", self.annotation),
            lambda: f"iterator {stage.name}.{it.name} is already annotated {it.annotation!r}",
        )
        if self.annotation in THREAD_ANNOTATIONS and self.annotation != "vthread":
            for other in stage.iters:
                if (
                    other is not it
                    and other.annotation == self.annotation
                    and other.extent != it.extent
                ):
                    raise ScheduleError(
                        f"stage {stage.name!r} binds {self.annotation} twice with different "
                        f"extents ({other.name}: {other.extent}, {it.name}: {it.extent})"
                    )
        new_it = Iterator(it.name, it.extent, it.kind, self.annotation)
        iters = stage.iters[:ii] + (new_it,) + stage.iters[ii + 1 :]
        return state.replace_stage(self.stage_id, replace(stage, iters=iters))

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        it = pyiter(stage, stage.iters[self.iter_id].name)
        S = pyname(stage)
        if self.annotation in THREAD_ANNOTATIONS:
            return [f's[{S}].bind({it}, te.thread_axis("{self.annotation}"))']
        if self.annotation == "none":
            return []
        return [f"s[{S}].{self.annotation}({it})"]


PRAGMAS = ("auto_unroll_max_step", "unroll_explicit")


@dataclass(frozen=True, slots=True)
class PragmaStep(Step):
    """`auto_unroll_max_step$N` (unroll inner loops up to N steps) or `unroll_explicit$0/1`."""

    TAG: ClassVar[str] = "PR"
    stage_id: int
    iter_id: int
    pragma_type: str

    def parsed(self) -> tuple[str, int]:
        name, _, value = self.pragma_type.partition("$")
        check(
            name in PRAGMAS and value.lstrip("-").isdigit(),
            lambda: f"unknown pragma {self.pragma_type!r}; use one of {PRAGMAS} as 'name$value'",
        )
        return name, int(value)

    def apply(self, state):
        stage = state.stages[self.stage_id]
        stage.iter_index(self.iter_id)
        name, value = self.parsed()
        if name == "auto_unroll_max_step":
            new = replace(stage, auto_unroll_max_step=value, unroll_explicit=True)
        else:
            new = replace(stage, unroll_explicit=bool(value))
        return state.replace_stage(self.stage_id, new)

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        it = pyiter(stage, stage.iters[self.iter_id].name)
        name, value = self.parsed()
        S = pyname(stage)
        if name == "auto_unroll_max_step":
            return [
                f's[{S}].pragma({it}, "auto_unroll_max_step", {value})',
                f's[{S}].pragma({it}, "unroll_explicit", True)',
            ]
        return [f's[{S}].pragma({it}, "unroll_explicit", {bool(value)})']


@dataclass(frozen=True, slots=True)
class StorageAlignStep(Step):
    """Pad the allocation of a cache stage so the dimension of `iter_id` has stride % factor == offset."""

    TAG: ClassVar[str] = "SA"
    stage_id: int
    iter_id: int
    factor: int
    offset: int

    def apply(self, state):
        stage = state.stages[self.stage_id]
        stage.iter_index(self.iter_id)
        check(
            self.factor > 0 and 0 <= self.offset < self.factor,
            lambda: f"storage_align on {stage.name!r}: need factor > 0 and 0 <= offset < factor",
        )
        return state.replace_stage(
            self.stage_id, replace(stage, storage_align=(self.iter_id, self.factor, self.offset))
        )

    def to_python(self, before, after):
        stage = before.stages[self.stage_id]
        it = pyiter(stage, stage.iters[self.iter_id].name)
        return [f"s[{pyname(stage)}].storage_align({it}, {self.factor}, {self.offset})"]


def replay(dag, steps) -> State:
    """Apply `steps` (Step objects or records) to the DAG's initial state."""
    state = dag.get_init_state()
    for step in steps:
        if not isinstance(step, Step):
            step = Step.from_record(step)
        try:
            state = state.apply(step)
        except IndexError as e:  # a record naming a stage this DAG's state does not have
            raise ScheduleError(
                f"step {step.to_record()} does not fit the state: its stages are "
                f"{[s.name for s in state.stages]} ({e})"
            ) from e
    return state


def print_python_schedule(state: State) -> str:
    """The equivalent TVM-style Python schedule of a state, one line per statement."""
    init = state.dag.get_init_state()
    lines = [_axes_line(s, with_reduce=True) for s in init.stages if not s.is_placeholder]
    cur = init
    for step in state.steps:
        nxt = cur.apply(step)
        lines.extend(step.to_python(cur, nxt))
        cur = nxt
    return "\n".join(lines) + "\n"
