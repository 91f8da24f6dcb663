"""Calls without ``autotune_pg`` on real gloo ranks: the default-group rule and its warning
(issue 18 item 2; the rule is in triton_dist/dist.py)."""

from __future__ import annotations

import pytest
import workers
from harness import run_ranks

pytestmark = pytest.mark.timeout(180)


def _per_rank_caches(tmp_path, world_size):
    # one cache per rank, as on separate nodes: a rank must not hit what another just wrote
    return {r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r}")} for r in range(world_size)}


def _ok(results):
    assert all("ok" in r for r in results), results
    return [r["ok"] for r in results]


def test_plain_init_process_group_tunes_alone_and_warns_once_per_function(tmp_path):
    results = _ok(run_ranks(workers.alone_without_a_group, 2, rank_env=_per_rank_caches(tmp_path, 2),
                            env={"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "20"}, tmp=tmp_path))
    # the risk the warning is about: alone, rank 0 picks config 0 and rank 1 config 2
    assert [r["values"] for r in results] == [[70, 80, 70, 70], [72, 82, 72, 72]]
    for r in results:
        # two functions, two keys of the first: one warning per function
        assert len(r["messages"]) == 2, r["messages"]
        first, second = r["messages"]
        assert "workers.host " in first and "workers.host_twin " in second
        for text in r["messages"]:
            assert "2 ranks" in text and "autotune_pg=" in text
            assert "triton_dist.dist.set_world_group(torch.distributed.group.WORLD)" in text
            assert "init_distributed()" in text


def test_a_registered_group_tunes_together_and_none_means_alone_on_purpose(tmp_path):
    results = _ok(run_ranks(workers.registered_then_alone_by_choice, 2, rank_env=_per_rank_caches(tmp_path, 2),
                            env={"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "20"}, tmp=tmp_path))
    # init_distributed() on an initialised process registers WORLD: MAX [6, 4, 7] picks config 1
    assert [r["grouped"] for r in results] == [[71], [71]]
    # set_world_group(None): alone (0 and 2), and no warning anywhere
    assert [r["alone"] for r in results] == [[70], [72]]
    assert [r["messages"] for r in results] == [[], []]


def test_a_single_rank_world_does_not_warn(tmp_path):
    (result,) = _ok(run_ranks(workers.alone_without_a_group, 1, rank_env=_per_rank_caches(tmp_path, 1), tmp=tmp_path))
    assert result["values"] == [70, 80, 70, 70]
    assert result["messages"] == []


def test_ranks_alone_in_an_ungrouped_job_take_the_groups_entry_of_the_jobs_size(tmp_path):
    """A 2-rank job that registered no tuning group found the group's (a campaign's) 2-rank entry
    for its key, called it a miss, and each rank tuned alone over it: different configs per rank
    and the seeded entry moved to history (found by a tester, session 28). They take it now, and
    are still told to register the group."""
    results = _ok(run_ranks(workers.group_entry_then_ungrouped, 2, tmp=tmp_path,
                            env={"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "20",
                                 "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache")}))
    # MAX [6, 4, 7] picks config 1 for the group; alone, rank 0 would pick 0 and rank 1 config 2
    assert [r["grouped"] for r in results] == [91, 91] and [r["alone"] for r in results] == [[91], [91]]
    assert [r["runs"] for r in results] == [{"0": 0, "1": 1, "2": 0}] * 2  # the call's own run: nothing tuned
    assert [(r["world"], r["history"]) for r in results] == [(2, [])] * 2
    assert all(len(r["messages"]) == 1 and "tunes in this process alone" in r["messages"][0] for r in results)
