"""pipeline_core_split: the search's pool and the compilers share the cores without exceeding
them."""

import pytest

from autosched.search.core_split import pipeline_core_split


@pytest.mark.parametrize("cores", [4, 5, 8, 16, 17, 64, 128])
def test_split_uses_every_core_but_one_and_no_more(cores):
    split = pipeline_core_split(cores)
    assert split.search_jobs + split.build_jobs == cores - 1
    assert abs(split.search_jobs - split.build_jobs) <= 1
    assert split.build_jobs >= split.search_jobs


def test_h100_host_of_16_cores():
    assert pipeline_core_split(16) == (7, 8)


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_small_machines_keep_one_process_a_side(cores):
    split = pipeline_core_split(cores)
    assert split.search_jobs == 1
    assert split.build_jobs == max(1, cores - 2)


def test_no_cores_is_refused():
    with pytest.raises(ValueError, match="cores must be >= 1"):
        pipeline_core_split(0)


def test_tune_pipeline_sizes_the_search_pool_unless_n_jobs_is_given(monkeypatch):
    from autosched.cli import tune
    from autosched.search.params import SearchParams
    from measure import builder

    monkeypatch.setattr(builder, "available_cores", lambda: 16)
    params, built = tune.pipeline_shares(SearchParams(), None, local=False)
    assert (params.n_jobs, built) == (7, None)
    params, _ = tune.pipeline_shares(SearchParams(n_jobs=3), 3, local=False)
    assert params.n_jobs == 3
