"""Would occupancy and wave features help the cost model pick across runs? (CPU, no GPU)

    python3 benchmarks/results/2026-11-26_caa07e1_local/occupancy_features.py WORKLOAD LOG...

`benchmarks/pick_quality.py`'s test (a model trained on run A's first N records picks 64 of run
B's correct states: how often the picks hold B's fastest 5%, against chance), with today's
features and with six columns appended to every statement's row, derived from the kernel's
launch as the row records it (blocks, threads a block, shared bytes a block, local bytes a
thread) for an H100 / H200 SM (2048 threads, 32 blocks, 228 KB shared, 64K registers, 132 SMs):
resident blocks per SM, occupancy, waves, the last wave's fill, blocks per SM, and a register
estimate's residency limit. The trees can split on each of the inputs but not on their ratios,
which is what decides how a launch fills the GPU.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

SMS, THREADS_PER_SM, BLOCKS_PER_SM = 132, 2048, 32
SHARED_PER_SM, SHARED_RESERVED, REGISTERS_PER_SM = 233472, 1024, 65536


def derived(row_raw: dict[str, float]) -> list[float]:
    """The six launch columns of one statement (raw, unscaled)."""
    blocks = max(
        1.0, row_raw["blockIdx_x_len"] * row_raw["blockIdx_y_len"] * row_raw["blockIdx_z_len"]
    )
    threads = max(
        1.0, row_raw["threadIdx_x_len"] * row_raw["threadIdx_y_len"] * row_raw["threadIdx_z_len"]
    )
    shared = row_raw["kernel_shared_bytes"]
    by_shared = SHARED_PER_SM // (shared + SHARED_RESERVED) if shared else BLOCKS_PER_SM
    registers = min(255.0, row_raw["kernel_local_bytes"] / 4 + 24)
    by_registers = REGISTERS_PER_SM // max(1.0, threads * registers)
    resident = max(1.0, min(BLOCKS_PER_SM, THREADS_PER_SM // threads, by_shared))
    waves = blocks / (SMS * resident)
    return [
        resident,
        resident * threads / THREADS_PER_SM,
        waves,
        waves / math.ceil(waves),
        blocks / SMS,
        max(1.0, by_registers),
    ]


def with_launch_columns(features: list[np.ndarray]) -> list[np.ndarray]:
    from autosched.features import FEATURE_NAMES

    index = {name: k for k, name in enumerate(FEATURE_NAMES)}
    out = []
    for f in features:
        raw = np.exp2(f.astype(np.float64)) - 1.0
        extra = [derived({name: r[k] for name, k in index.items() if name in NEEDED}) for r in raw]
        out.append(np.hstack([f, np.log2(np.array(extra) + 1.0).astype(np.float32)]))
    return out


NEEDED = {
    "blockIdx_x_len",
    "blockIdx_y_len",
    "blockIdx_z_len",
    "threadIdx_x_len",
    "threadIdx_y_len",
    "threadIdx_z_len",
    "kernel_shared_bytes",
    "kernel_local_bytes",
}


def main(workload: str, logs: list[str]) -> None:
    from pick_quality import pair_figures

    from autosched.search.cost_model import load_dataset
    from autosched.task.search_task import suite_task

    key = suite_task(workload).workload_key
    runs = []
    for path in logs:
        data = load_dataset(path, os.cpu_count() or 1)
        runs.append(data.subset([i for i, t in enumerate(data.task_ids) if t == key]))
    extended = []
    for run in runs:
        copy = run.subset(list(range(len(run.features))))
        copy.features = with_launch_columns(run.features)
        extended.append(copy)
    for name, sets in (("today's features", runs), ("+ launch columns", extended)):
        rng = np.random.default_rng(0)
        for n in (64, 128, 192):
            r = np.array(pair_figures(sets, n, 64, {}, rng))
            print(
                f"{workload} {name} after {n}: picked best / pool best {r[:, 0].mean():.3f},"
                f" random {r[:, 1].mean():.3f}; fastest 5% picked x{r[:, 2].mean():.2f} chance"
                f" ({len(r)} pairs)",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
