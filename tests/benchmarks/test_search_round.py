"""benchmarks/search_round.py on a reduced workload: a round's account, and the same batch for
the same seed."""

from __future__ import annotations

from benchmarks.search_round import rounds

SMALL = {"population": 8, "generations": 1, "sample_init_min_population": 4, "pretrained": False}


def _first_round(seed: int) -> dict:
    return next(rounds("matmul", 1, per_round=2, shape=(32, 32, 16), seed=seed, **SMALL))


def test_a_round_reports_its_cpu_its_account_and_a_digest_of_its_batch():
    first = _first_round(0)
    assert first["round"] == 0 and first["cpu"] > 0 and len(first["batch"]) == 12
    assert first["evaluated"] >= first["invalid"] >= 0 and first["sampled"] >= 4
    assert _first_round(0)["batch"] == first["batch"]
    assert _first_round(1)["batch"] != first["batch"]
