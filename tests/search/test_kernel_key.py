"""`candidates.kernel_key`: candidates share a key exactly when they print one CUDA source, over
sampled states of small suite tasks and the unroll limits a search mutates them to."""

from __future__ import annotations

import random

import pytest

from autosched.codegen.build import build
from autosched.lower.lowering import lower
from autosched.search.candidates import kernel_key
from autosched.search.mutations import MUTATIONS
from tests.search.test_search import make_policy, small_task


@pytest.mark.parametrize("name", ["matmul", "conv2d_bias_relu", "dense_bias"])
def test_candidates_share_a_kernel_key_exactly_when_they_share_a_source(name):
    policy = make_policy(small_task(name))
    context, rng = policy.workers.context, random.Random(3)
    candidates = set()
    for records in policy.sample_fresh(12):
        candidates.add(records)
        for _ in range(4):  # other unroll limits of it: some lower alike, some do not
            child = MUTATIONS["auto_unroll"].apply(policy.mutation_ctx, [records], rng)
            if child is not None:
                candidates.add(child)
    by_key: dict[bytes, set[str]] = {}
    by_source: dict[str, set[bytes]] = {}
    for records in candidates:
        state = context.replay(records)
        key, source = kernel_key(records, lower(state)), build(state.dag, state).source
        by_key.setdefault(key, set()).add(source)
        by_source.setdefault(source, set()).add(key)
    assert all(len(sources) == 1 for sources in by_key.values())
    assert all(len(keys) == 1 for keys in by_source.values())
    assert len(by_source) < len(candidates)  # some records are one kernel under two names
