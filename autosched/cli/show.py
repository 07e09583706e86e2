"""`autosched show LOG`: per task of a log, its best record: cost, its roofline line (achieved
bandwidth and FLOP rate against the GPU's peaks, `autosched.roofline`), the template config or
the stochastic schedule's trace it came from (when the record carries one), launch configuration
of each kernel, the schedule as Python (and with --source the CUDA source)."""

from __future__ import annotations

import argparse

from autosched.cli.arguments import Command
from autosched.cli.record_log import Record, read_log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help="record log (plain or .gz)")
    parser.add_argument("--source", action="store_true", help="print the CUDA source too")
    parser.add_argument(
        "--gpu",
        default=None,
        help="the GPU the log was measured on, for the roofline's peaks (H100, H200; default H100)",
    )
    parser.add_argument(
        "--peak-bandwidth", type=float, default=None, help="peak bytes/s (default: the GPU's)"
    )
    parser.add_argument(
        "--peak-flops", type=float, default=None, help="peak fp32 FLOP/s (default: the GPU's)"
    )


def run(ns: argparse.Namespace) -> int:
    from autosched.codegen.build import build
    from autosched.roofline import Roofline, peak_for
    from autosched.task.search_task import SearchTask

    peak = peak_for(ns.gpu, bandwidth=ns.peak_bandwidth, fp32=ns.peak_flops)

    records: dict[str, list[Record]] = {}
    for inp, res in read_log(ns.log):
        records.setdefault(inp.workload_key, []).append((inp, res))
    for key, task_records in records.items():
        correct = [r for r in task_records if r[1].ok]
        print(f"task {key}: {len(task_records)} records, {len(correct)} correct")
        if not correct:
            print("  no correct measurement")
            continue
        inp, res = min(correct, key=lambda r: r[1].mean_cost)
        task = SearchTask(workload_key=key)
        state = task.compute_dag.replay_steps(inp.steps)
        flop = task.compute_dag.flop_count
        print(f"  best {res.mean_cost * 1e6:.2f} us ({flop / res.mean_cost / 1e9:.1f} GFLOP/s)")
        roofline = Roofline.of(task.compute_dag, res.mean_cost, peak, uses_tensor_cores(state))
        print("  " + roofline.line())
        for line in origin_lines(inp):
            print(line)
        kernel = build(task.compute_dag, state)
        registers = _registers(kernel.source)
        for k in kernel.program.kernels:
            print("  " + launch_line(k, registers.get(k.name)))
        print()
        print(task.compute_dag.print_python_schedule(state))
        if ns.source:
            print(kernel.source)
    return 0


def uses_tensor_cores(state) -> bool:
    """Does the state tensorize a stage (its FLOP rate is then against the Tensor Cores')?"""
    return any(it.annotation == "tensorize" for st in state.stages for it in st.iters)


def origin_lines(inp) -> list[str]:
    """What a record says its state came from: a template's config, as AutoTVM prints it
    (`[('tile_f', [-1, 2, 8, 2]), ...],None,INDEX`), or a stochastic schedule's trace, as the
    Python that replays it. None of these for a sketch-search record."""
    lines = []
    if inp.config is not None:
        knobs = list(inp.config.get("knobs", {}).items())
        lines.append(f"  config {knobs},None,{inp.config.get('index')}")
    if inp.trace is not None:
        from autosched.spaces.trace import Trace

        lines.append("  trace:")
        python = Trace.from_json(inp.trace).to_python()
        lines.extend("    " + line for line in python.splitlines())
    return lines


def launch_line(kernel, registers: int | None = None) -> str:
    """`kernel NAME: grid (x, y, z), block (x, y, z), N bytes shared memory[, R registers]`."""
    line = (
        f"kernel {kernel.name}: grid {tuple(kernel.grid)}, block {tuple(kernel.block)}, "
        f"{kernel.shared_bytes} bytes shared memory"
    )
    return line if registers is None else f"{line}, {registers} registers"


def _registers(source: str) -> dict[str, int]:
    """Registers per kernel from one compile (NVRTC or nvcc) for this machine's GPU; empty when
    the compiler or the GPU is missing (the launch lines then leave registers out)."""
    from measure import (
        CompileError,
        NvccNotFoundError,
        compile_resources,
        device_arch,
        find_compiler,
    )

    try:
        find_compiler()
    except NvccNotFoundError:
        return {}
    arch = device_arch()
    if arch is None:
        return {}
    try:
        return {name: r.registers for name, r in compile_resources(source, arch).items()}
    except (CompileError, OSError):
        return {}


COMMAND = Command(
    "show",
    "best record per task: launch configuration, schedule (and source)",
    add_arguments,
    run,
)
