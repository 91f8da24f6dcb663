"""Data-parallel jobs with variable-length batches on real gloo ranks (a tester, 2026-12-05):
ranks whose keys differ are told what to do about it; a prune_fn that differs within one key
is named, not the caches; a rank that restarts into a new group is never left waiting for a
rank that reused a decision of the old group."""

from __future__ import annotations

import dp_workers
import pytest
from harness import run_ranks

pytestmark = pytest.mark.timeout(240)


def _env(tmp_path, **extra):
    return {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"), "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "20", **extra}


def test_ranks_with_batches_of_their_own_length_are_told_to_tune_alone_or_pad(tmp_path):
    """Rank 0 sees 128 rows, rank 1 200: the error named "shapes" among what must be equal on
    every rank and told them to seed their caches or set ALWAYS_TUNE, none of which helps."""
    results = run_ranks(dp_workers.own_lengths, 2, env=_env(tmp_path), tmp=tmp_path)
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    for r in results:
        message = r["message"]
        assert "ranks [0] saw ((128, 8)" in message and "ranks [1] saw ((200, 8)" in message
        assert "set_world_group(None)" in message and "pad or bucket" in message
        assert "--seed nodes" not in message and "ALWAYS_TUNE" not in message


def test_the_named_fix_tunes_each_ranks_own_lengths(tmp_path):
    results = run_ranks(dp_workers.own_lengths_alone, 2, env=_env(tmp_path), tmp=tmp_path)
    assert [r.get("ok") for r in results] == [{"decided": [True] * 4}] * 2, results


def test_a_prune_fn_that_differs_within_one_bucket_is_named_not_the_caches(tmp_path):
    """The seed's prune_fn (BLOCK <= numel) under a key bucketed to powers of two: 40 and 64
    elements share a key, not a kept set. The error said "give every node the same cache"."""
    results = run_ranks(dp_workers.bucket_prunes_differently, 2, env=_env(tmp_path), tmp=tmp_path)
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    for r in results:
        message = r["message"]
        assert "configs: ranks [0] saw 0,1; ranks [1] saw 0,1,2" in message
        assert "prune_fn kept different configs" in message and "bucketed key" in message
        assert "--seed nodes" not in message and "ALWAYS_TUNE" not in message


@pytest.mark.parametrize("variant", ["world", "new_group", "contextual"])
def test_a_rank_that_restarts_into_a_new_group_is_not_left_waiting(tmp_path, variant):
    """Rank 1 restarts (a new process) and rank 0, alive, joins the new world with it. Rank 0
    kept the decision of 128 rows made with the old group's ranks and hit it in memory, while
    the new rank 1 waited for it in the agreement: a RankFailureError after the bound, and rank 0
    stuck in its next collective."""
    env = _env(tmp_path, TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="8")
    lives_on, first, second = dp_workers.restart_job(variant, env, tmp_path)
    assert "ok" in first, first
    assert "ok" in lives_on and "ok" in second, (lives_on, second)
    assert lives_on["ok"] == second["ok"]  # the same rows, the same results


def test_a_registered_group_of_an_earlier_init_is_said_as_such(tmp_path):
    """Rank 0 registered WORLD with init_distributed, then the world was destroyed and made again
    without registering it: its miss said "autotune_pg is not a group ...", which it never passed."""
    env = _env(tmp_path, TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="3")
    lives_on, first, _ = dp_workers.restart_job("registered", env, tmp_path)
    assert "ok" in first, first
    assert lives_on.get("error") == "RankFailureError", lives_on
    message = lives_on["message"]
    assert "autotune_pg" not in message, message
    assert "registered with triton_dist.dist" in message and "init_distributed() (or set_world_group" in message
