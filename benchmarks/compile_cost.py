"""What a search's candidate kernels cost to compile with NVRTC: CPU seconds per kernel, split by
phase, with and without the worker's speed options. Needs libnvrtc, no GPU.

    python -m benchmarks.compile_cost [WORKLOAD [ARGS...]] [--samples 40] [--seed 0]
        [--fresh] [--split-entries] [--arch sm_90] [--json FILE]

Samples the candidates a search's first round measures (`SketchPolicy.search_one_round`, with
`tune`'s defaults: the shipped cost model ranks them), or with `--fresh` random states of every
sketch (`SketchPolicy.sample_fresh`: faster, but no model's choice), and prints their CUDA as
the builder gets it. Each source is then compiled in this process, as the NVRTC worker compiles it
(`compile_options.NVRTC_OPTIONS`, the include path, a unique extra kernel), twice in turn: with
no speed option, and with the speed options this library accepts
(`compile_options.NVRTC_SPEED_OPTIONS`, precompiled headers in a folder of this run). Each
compilation's CPU seconds are this process's, and NVRTC's `--time` splits it into the front end
(headers and parsing), the NVVM optimiser and ptxas. Kernels that spill are counted apart: the
builder rejects them (`HardwareParams.max_local_memory_spill_bytes`, 0 by default) after paying
for their whole compilation.

`--split-entries` adds a third way, as `LocalBuilder(split_entries=True)` builds: each entry
function compiled apart (speed options on), and a part met before (in an earlier candidate)
taken from the cache, so it costs nothing.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from measure._nvrtc_worker import accepted_speed_options
from measure.compile_options import NVRTC_OPTIONS
from measure.kernel_split import split_entries
from measure.nvrtc import NONCE_PREFIX, NvrtcLibrary, find_cuda_include, find_nvrtc
from measure.ptxas import parse_ptxas

# NVRTC's --time phases -> our column names
PHASES = {"CUDA C++ Frontend": "front_end", "NVVM Optimizer": "nvvm", "PTX Translation": "ptxas"}
_UNIQUE = itertools.count()


@dataclass
class Compilation:
    """One source compiled once: CPU seconds, NVRTC's phase times (wall seconds), and whether
    ptxas spilled."""

    cpu: float
    front_end: float
    nvvm: float
    ptxas: float
    spills: bool


def sample_sources(
    workload: str, args: list[str], samples: int, seed: int, fresh: bool = False
) -> list[str]:
    """The CUDA sources of the `samples` candidates of `workload` (as `tune` names it) that a
    first search round measures, or of `samples` fresh random ones."""
    from autosched.cli.workload import resolve
    from autosched.codegen.build import build
    from autosched.search.params import SearchParams
    from autosched.search.policy import SketchPolicy

    task = resolve(workload, args).task()
    policy = SketchPolicy(task, params=SearchParams(seed=seed, n_jobs=1), verbose=0)
    if fresh:
        replay = policy.workers.context.replay
        states = [replay(r) for r in policy.sample_fresh(samples)[:samples]]
    else:
        states = policy.search_one_round(samples)
    return [build(task.compute_dag, state).source for state in states]


def compile_once(lib: NvrtcLibrary, source: str, options: list[str], timing: str) -> Compilation:
    """Compile `source` as the worker does; `timing` is the file NVRTC's --time writes."""
    unique = f"{NONCE_PREFIX}cost_{os.getpid()}_{next(_UNIQUE)}_{time.time_ns()}"
    program = f'{source}\nextern "C" __global__ void {unique}() {{}}\n'
    if os.path.exists(timing):
        os.remove(timing)
    start = time.process_time()
    result, log, _ = lib.compile(program, [*options, f"--time={timing}"])
    cpu = time.process_time() - start
    if result != 0:
        raise RuntimeError(f"a sampled kernel does not compile: {log[-500:]}")
    phases = dict.fromkeys(PHASES.values(), 0.0)
    with open(timing) as f:
        for row in itertools.islice(csv.reader(f), 1, None):
            name = PHASES.get(row[1].strip())
            if name is not None:
                phases[name] += float(row[2]) / 1000
    spills = any(
        r.spill_bytes > 0 for k, r in parse_ptxas(log).items() if not k.startswith(NONCE_PREFIX)
    )
    return Compilation(cpu, spills=spills, **phases)


def compile_parts(
    lib: NvrtcLibrary, source: str, options: list[str], timing: str, seen: set[str]
) -> Compilation:
    """The cost of `source` with its entry functions compiled apart: the sum over the parts not
    in `seen` (then added to it), as the builder's kernel cache would have them."""
    total = Compilation(0.0, 0.0, 0.0, 0.0, False)
    for part in split_entries(source) or [source]:
        if part in seen:
            continue
        seen.add(part)
        one = compile_once(lib, part, options, timing)
        total = Compilation(
            total.cpu + one.cpu,
            total.front_end + one.front_end,
            total.nvvm + one.nvvm,
            total.ptxas + one.ptxas,
            total.spills or one.spills,
        )
    return total


def summary(runs: list[Compilation]) -> dict[str, float]:
    """Median and total CPU seconds, the phases' totals, and what the spilling kernels cost."""
    cpu = [r.cpu for r in runs]
    out = {"median_cpu_s": statistics.median(cpu), "total_cpu_s": sum(cpu)}
    for phase in PHASES.values():
        out[f"total_{phase}_s"] = sum(getattr(r, phase) for r in runs)
    out["spilling_kernels"] = sum(r.spills for r in runs)
    out["spilling_cpu_s"] = sum(r.cpu for r in runs if r.spills)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", nargs="?", default="conv2d_bias_relu")
    ap.add_argument("args", nargs="*", help="the workload's arguments (as for `tune`)")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh", action="store_true", help="random states, not a search's picks")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--json", help="write the per-kernel results and the summaries here")
    ap.add_argument(
        "--split-entries", action="store_true", help="also compile each entry function apart"
    )
    ns = ap.parse_args(argv)
    path = find_nvrtc()
    if path is None:
        print("libnvrtc was not found (pip install nvidia-cuda-nvrtc)", file=sys.stderr)
        return 2
    sources = sample_sources(ns.workload, ns.args, ns.samples, ns.seed, ns.fresh)
    lib = NvrtcLibrary(path)
    include = find_cuda_include()
    plain = [f"--gpu-architecture={ns.arch}", *NVRTC_OPTIONS]
    plain += [f"--include-path={include}"] if include else []
    with tempfile.TemporaryDirectory(prefix="autosched_compile_cost_") as folder:
        pch_dir = os.path.join(folder, "pch")
        os.mkdir(pch_dir)
        speed = accepted_speed_options(lib, ns.arch, pch_dir)
        fast = plain + [option for group in speed.values() for option in group]
        timing = os.path.join(folder, "time.csv")
        runs: dict[str, list[Compilation]] = {"plain": [], "speed options": []}
        if ns.split_entries:
            runs["apart, cached"] = []
        seen: set[str] = set()
        for source in sources:  # in turn: a change of the machine's load hits all alike
            runs["plain"].append(compile_once(lib, source, plain, timing))
            runs["speed options"].append(compile_once(lib, source, fast, timing))
            if ns.split_entries:
                runs["apart, cached"].append(compile_parts(lib, source, fast, timing, seen))
    print(f"{ns.workload}: {len(sources)} candidates, NVRTC {lib.version()}, {ns.arch}")
    print(f"speed options accepted: {', '.join(speed) or 'none'}")
    for name, compiled in runs.items():
        s = summary(compiled)
        print(
            f"  {name:>13}: CPU s per kernel median {s['median_cpu_s']:.3f}, total "
            f"{s['total_cpu_s']:.1f} (front end {s['total_front_end_s']:.1f}, NVVM "
            f"{s['total_nvvm_s']:.1f}, ptxas {s['total_ptxas_s']:.1f}); "
            f"{s['spilling_kernels']} spill (rejected): {s['spilling_cpu_s']:.1f} CPU s"
        )
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(
                {
                    "workload": ns.workload,
                    "summary": {k: summary(v) for k, v in runs.items()},
                    "kernels": {k: [asdict(r) for r in v] for k, v in runs.items()},
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
