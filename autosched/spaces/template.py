"""Templates: user-written search spaces, AutoTVM style, scheduled with autosched's State steps.

    @template("example/matmul")
    def matmul(cfg, n, m, k):
        A, B = te.placeholder((n, k), name="A"), te.placeholder((k, m), name="B")
        C = topi.matmul(A, B)
        s = cfg.create_schedule([A, B, C])          # the DAG's initial State
        i, j = s["C"].iters[:2]
        cfg.define_split("tile_i", i, num_outputs=2)
        s, (io, ii) = cfg["tile_i"].apply(s, "C", i.name)
        ...
        return s

The template runs once on a ConfigSpace to collect the knobs (`TemplateTask.config_space`), and
once per config to give that config's State: a State like any other, so printing, lowering,
codegen, measurement and records are the sketch search's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from autosched.errors import AutoschedError
from autosched.spaces.config import ConfigEntity, ConfigSpace
from measure.hardware import HardwareParams

# template name -> function(cfg, *args) -> State
TEMPLATES: dict[str, Callable[..., Any]] = {}


def template(name: str):
    """Decorator: register `f(cfg, *args) -> State` as the template `name`."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        TEMPLATES[name] = f
        f.template_name = name  # type: ignore[attr-defined]
        return f

    return wrap


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, (list, tuple)) else value


def template_workload_key(name: str, args: Any) -> str:
    """The workload key of a template task: `["template:<name>", *args]`."""
    return json.dumps(["template:" + name, *_jsonable(list(args))])


class TemplateTask:
    """A template with its arguments: its ComputeDAG, config space, and a State per config.

    Has what a measurer needs of a task (`compute_dag`, `workload_key`, `hardware_params`).
    """

    def __init__(
        self,
        template_name: str | Callable,
        args: Any = (),
        target: str = "cuda",
        hardware_params: HardwareParams | None = None,
    ) -> None:
        name = getattr(template_name, "template_name", template_name)
        if name not in TEMPLATES:
            known = ", ".join(sorted(TEMPLATES)) or "none"
            raise AutoschedError(f"no template {name!r} is registered (known: {known})")
        if target != "cuda":
            raise AutoschedError(f"unsupported target {target!r}; autosched generates CUDA only")
        self.name, self.args, self.func = name, tuple(args), TEMPLATES[name]
        self.target = target
        self.hardware_params = hardware_params or HardwareParams()
        space = ConfigSpace()
        self._call(space)
        if space.dag is None:
            raise AutoschedError(f"template {name!r} never called cfg.create_schedule(tensors)")
        self.config_space = space
        self.compute_dag = space.dag
        self.workload_key = template_workload_key(name, self.args)
        self.compute_dag.workload_key = self.workload_key
        self.desc = self.workload_key

    def _call(self, cfg):
        state = self.func(cfg, *self.args)
        if not hasattr(state, "steps"):
            raise AutoschedError(
                f"template {self.name!r} returned {type(state).__name__}, not a State"
            )
        return state

    def config(self, which: int | dict | ConfigEntity) -> ConfigEntity:
        """A config of this task's space, by index, record dict, or as given."""
        if isinstance(which, ConfigEntity):
            return which
        if isinstance(which, dict):
            return self.config_space.from_dict(which)
        return self.config_space.get(int(which))

    def instantiate(self, which: int | dict | ConfigEntity):
        """The State of one config (raises a ScheduleError/AutoschedError where it is illegal)."""
        return self._call(self.config(which).bind(self.compute_dag))

    def __repr__(self) -> str:
        return f"TemplateTask({self.workload_key}, len={len(self.config_space)})"
