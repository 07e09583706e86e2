"""Which tasks of a model are alike: same operator structure, FLOPs of the same order.

The task scheduler guesses how fast a task could get from the best throughput reached by tasks
like it (Ansor's N(i)): two conv2d layers of a network that differ in shape only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def structure_tag(dag) -> tuple:
    """The DAG's operators without their shapes: per compute op its tag (or 'op'), whether it
    reduces, needs multi-level tiling, and its numbers of spatial and reduce axes."""
    tag = []
    for op in dag.ops:
        info = dag.op_info(op)
        if info.is_placeholder:
            continue
        tag.append(
            (
                op.tag or "op",
                info.has_reduction,
                info.needs_multi_level_tiling,
                len(op.axis),
                len(op.reduce_axis),
            )
        )
    return tuple(tag)


def similarity_key(task) -> tuple:
    """(structure tag, order of magnitude of the FLOPs): tasks with equal keys are similar."""
    dag = task.compute_dag
    return structure_tag(dag), int(math.log(dag.flop_count + 1))


def similarity_groups(tasks: Sequence) -> list[list[int]]:
    """Per task, the indices of the tasks similar to it (itself included)."""
    keys = [similarity_key(t) for t in tasks]
    return [[j for j, k in enumerate(keys) if k == key] for key in keys]
