"""Multi-rank tuning on real gloo ranks: MAX semantics, subgroups, agreement that never hangs."""

from __future__ import annotations

import pytest
import workers
from harness import run_ranks

pytestmark = pytest.mark.timeout(180)


def _env(tmp_path, **extra):
    return {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"), "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "20", **extra}


def _ok(results):
    assert all("ok" in r for r in results), results
    return [r["ok"] for r in results]


@pytest.mark.parametrize("world_size", [2, 4])
def test_max_reduction_picks_what_only_max_picks(tmp_path, world_size):
    results = _ok(run_ranks(workers.max_semantics, world_size, env=_env(tmp_path), tmp=tmp_path))
    # 2 ranks: MAX = [6, 4, 7] -> config 1. 4 ranks: ranks 2, 3 cost 2 ms everywhere: still 1.
    assert [r["value"] for r in results] == [71] * world_size
    for r in results:
        # 1 warm-up + 4 timed per config, plus the final call with the best
        assert r["calls"] == {"0": 5, "1": 6, "2": 5}
    # one writer per node: one entry, one main log, per-rank logs for the others
    files = results[0]["files"]
    assert len([f for f in files if f.endswith(".json")]) == 1
    assert len([f for f in files if f.endswith(".log") and ".rank" not in f]) == 1
    assert sorted(f.split(".rank")[1] for f in files if ".rank" in f) == [f"{r}.log" for r in range(1, world_size)]


def test_max_reduction_with_the_real_timer(tmp_path):
    results = _ok(run_ranks(workers.max_semantics_real_timer, 2, env=_env(tmp_path), tmp=tmp_path))
    assert results == [71, 71]


def test_default_group_comes_from_project_helper(tmp_path):
    results = _ok(run_ranks(workers.max_semantics, 2, env=_env(tmp_path), args=(True,), tmp=tmp_path))
    assert [r["value"] for r in results] == [71, 71]


def test_disjoint_subgroups_tune_independently(tmp_path):
    # each group its own cache (two nodes): with a shared one the first group's entry is the
    # other's hit, which the next test covers
    rank_env = {r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r // 2}")} for r in range(4)}
    results = _ok(run_ranks(workers.subgroups, 4, env=_env(tmp_path), rank_env=rank_env, tmp=tmp_path))
    values = [r["value"] for r in results]
    # {0,1}: MAX [8, 5, 9] -> 1 ; {2,3}: [9, 5, 1] -> 2
    assert values == [31, 31, 32, 32]


def test_groups_sharing_a_cache_tune_one_key_at_once_without_an_error(tmp_path):
    """A node's groups tuning the same key at once, one cache: whichever group's entry lands
    between the other group's lookups is that group's hit after a second look, never a
    RankDisagreementError; each group's ranks run the same config."""
    for attempt in range(3):
        results = _ok(run_ranks(workers.subgroups, 4, env=_env(tmp_path / str(attempt)), tmp=tmp_path))
        values = [r["value"] for r in results]
        assert values[0] == values[1] and values[2] == values[3] and set(values) <= {31, 32}


def test_a_cache_decision_that_differed_for_a_moment_is_looked_up_again(tmp_path):
    """Rank 0's first lookup misses (the entry landed just after it), rank 1's hits: the ranks
    look once more and both hit; nothing is measured."""
    results = _ok(run_ranks(workers.late_entry, 2, env=_env(tmp_path), tmp=tmp_path))
    assert [r["lookups"] for r in results] == [2, 2], results  # each rank looked twice
    assert all(r["again"] == r["value"] and r["tuned_calls"] == 1 for r in results), results  # the call only


@pytest.mark.parametrize("worker,what", [(workers.disagree_key, "key"), (workers.disagree_prune, "configs")])
def test_disagreement_is_an_error_on_every_rank(tmp_path, worker, what):
    results = run_ranks(worker, 2, env=_env(tmp_path), tmp=tmp_path)
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    for r in results:
        assert f"{what}:" in r["message"] and "ranks [0]" in r["message"] and "ranks [1]" in r["message"]


def test_cache_state_disagreement_is_an_error_on_every_rank(tmp_path):
    seeded = tmp_path / "seeded"
    _ok(run_ranks(workers.tune_then_call, 2, env=_env(tmp_path, TRITON_DIST_AUTOTUNE_DIR=str(seeded)), tmp=tmp_path))
    # rank 0 reads the seeded cache, rank 1 an empty one (a node whose cache was deleted)
    rank_env = {0: {"TRITON_DIST_AUTOTUNE_DIR": str(seeded)},
                1: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "empty")}}
    results = run_ranks(workers.tune_then_call, 2, env=_env(tmp_path), rank_env=rank_env, tmp=tmp_path)
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    assert "cache:" in results[0]["message"] and "hit:" in results[0]["message"]
    # with the same seeded cache on both, both hit and agree
    results = _ok(run_ranks(workers.tune_then_call, 2,
                            env=_env(tmp_path, TRITON_DIST_AUTOTUNE_DIR=str(seeded)), tmp=tmp_path))
    assert results[0] == results[1]


def test_a_partly_seeded_group_in_cache_only_mode_falls_back_together(tmp_path):
    """docs/cache.md: in cache-only mode "either all ranks hit or all raise/fall back together";
    a node seeded and one not raised RankDisagreementError on both, advising ALWAYS_TUNE, which
    contradicts CACHE_ONLY (a tester, 2026-12-04)."""
    seeded = tmp_path / "seeded"
    _ok(run_ranks(workers.tune_then_call, 2, env=_env(tmp_path, TRITON_DIST_AUTOTUNE_DIR=str(seeded)), tmp=tmp_path))
    rank_env = {0: {"TRITON_DIST_AUTOTUNE_DIR": str(seeded)},
                1: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "empty")}}
    values = _ok(run_ranks(workers.tune_then_call, 2, env=_env(tmp_path, TRITON_DIST_AUTOTUNE_CACHE_ONLY="1"),
                           rank_env=rank_env, tmp=tmp_path))
    assert values == [50, 50]  # config_space[0] on both: n * 10 + cfg
    results = run_ranks(workers.tune_then_call, 2, env=_env(tmp_path, TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"),
                        rank_env=rank_env, tmp=tmp_path)
    assert [r.get("error") for r in results] == ["CacheMissError"] * 2, results
    assert "ranks [1]" in results[0]["message"] and "falls back together" in results[0]["message"]


def test_a_disagreement_names_the_function_of_every_rank(tmp_path):
    results = run_ranks(workers.different_functions, 2, env=_env(tmp_path), tmp=tmp_path)
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    for r in results:
        assert "function: ranks [0] saw " in r["message"] and "host_twin" in r["message"]
        assert "ALWAYS_TUNE" in r["message"]  # not a cache-only job: that advice stands


def test_absent_rank_is_a_bounded_error_not_a_hang(tmp_path):
    results = run_ranks(workers.one_rank_absent, 2, timeout_s=60,
                        env=_env(tmp_path, TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="3"), tmp=tmp_path)
    assert not any(r.get("hung") for r in results), results
    assert results[1] == {"ok": "skipped"}
    assert results[0]["error"] == "RankFailureError", results[0]
    message = results[0]["message"]
    assert "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S" in message
    # the function and key, this rank by its global rank, and that the group is out of step now
    # (its next collective aborted the process: a tester, 2026-12-04)
    assert "global rank 0 of the tuning group of 2 ranks [0, 1]" in message and "workers.host, key (" in message
    # and which rank did not arrive (before: "Another rank of the group", whichever it was)
    assert "Global rank 1 did not reach it (rank 1 never reached one of the tuner's collectives on this " \
           "group)" in message, message
    assert "do not use the group again" in message


def test_candidate_failing_on_one_rank_is_inf_for_all(tmp_path):
    results = _ok(run_ranks(workers.fails_on_one_rank, 2, env=_env(tmp_path), tmp=tmp_path))
    assert [r["value"] for r in results] == [3, 3]  # config 0 failed on rank 1 -> config 1
    (entry,) = results[0]["entries"]
    assert entry["best"]["index"] == 1
    failed = entry["candidates"][0]
    assert failed["time_ms"] is None and failed["error"]
    assert entry["world_size"] == 2


def test_the_entry_names_the_rank_a_config_failed_on_and_its_log(tmp_path):
    # it said "failed on another rank of the group": neither which rank nor where its reason is
    # (a tester, 2026-12-04); the MAX reduction now also carries the lowest and highest failing rank
    (result, *_) = _ok(run_ranks(workers.fails_on_some_ranks, 3, env=_env(tmp_path), tmp=tmp_path))
    entry, logs = result["entry"], result["logs"]
    eid = entry["id"]
    assert entry["best"]["index"] == 0
    errors = [c["error"] for c in entry["candidates"]]
    assert errors[0] is None
    assert errors[1] == (f"failed on ranks 1 and 2 of the group of 3 ranks [0, 1, 2] (see their logs "
                         f"{eid}.rank1.log and {eid}.rank2.log on their nodes)")
    assert errors[2] == f"failed on rank 2 of the group of 3 ranks [0, 1, 2] (see its log {eid}.rank2.log on its node)"
    assert "out of workspace on rank 2 for cfg=2" in logs[f"{eid}.rank2.log"]
    assert "out of workspace on rank 1 for cfg=1" in logs[f"{eid}.rank1.log"]
    assert f"config 2 {{'cfg': 2}}: {errors[2]}" in logs[f"{eid}.log"]  # the writer's log says so too


def test_bug_on_one_rank_raises_everywhere(tmp_path):
    results = run_ranks(workers.bug_on_one_rank, 2, env=_env(tmp_path), tmp=tmp_path)
    assert results[0]["error"] == "TypeError"
    assert results[1]["error"] == "RankFailureError" and "rank 0" in results[1]["message"]


def test_a_decision_made_alone_does_not_skip_the_groups_agreement(tmp_path):
    results = _ok(run_ranks(workers.alone_then_group, 2, timeout_s=90, env=_env(tmp_path), tmp=tmp_path))
    assert results[0]["value"] == results[1]["value"] == 41  # the group's MAX pick, on both
    assert results[0]["group_best"] == results[1]["group_best"] == {"cfg": 1}
    assert all(r["seconds"] < 15 for r in results), results  # nobody waited for the time-out
    results = _ok(run_ranks(workers.registered_after_alone, 2, timeout_s=90, env=_env(tmp_path / "2"), tmp=tmp_path))
    assert results == [41, 41]


def test_functions_that_differ_per_rank_are_a_disagreement_at_the_first_call(tmp_path):
    """A function closing over the rank names another entry on each rank: the group's entry,
    written under one rank's name, was a miss for the others in every later job."""
    results = run_ranks(workers.closure_over_rank, 2, env=_env(tmp_path), tmp=tmp_path)
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    assert all("source:" in r["message"] and "closing over the rank" in r["message"] for r in results)


def test_ranks_of_one_node_with_their_own_caches_each_get_the_entry(tmp_path):
    rank_env = {r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r}")} for r in range(2)}
    for _ in range(2):  # the second job hits on both ranks (before: rank 1 missed, a disagreement)
        assert _ok(run_ranks(workers.tune_then_call, 2, env=_env(tmp_path), rank_env=rank_env, tmp=tmp_path)) \
            == [50, 50]  # cost [1, 2, 3] on both: config 0
    for r in range(2):
        assert len(list((tmp_path / f"cache{r}" / "host").glob("*.json"))) == 1


@pytest.mark.parametrize("what", ["ranks", "flag"])
def test_a_bad_autotune_pg_is_a_clear_error(tmp_path, what):
    results = run_ranks(workers.bad_group, 2, env=_env(tmp_path), args=(what,), tmp=tmp_path)
    assert [r.get("error") for r in results] == ["RankFailureError"] * 2, results
    assert all("must be a torch.distributed process group" in r["message"] for r in results)


def test_spaces_that_differ_by_rank_at_one_length_are_a_disagreement(tmp_path):
    results = run_ranks(workers.disagree_space, 2, env=_env(tmp_path), tmp=tmp_path)
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    for r in results:
        assert "space: ranks [0] saw" in r["message"] and "The config spaces differ" in r["message"], r


def test_a_rank_left_out_of_a_subgroup_is_told_so(tmp_path):
    results = run_ranks(workers.outside_subgroup, 3, env=_env(tmp_path), tmp=tmp_path)
    assert "ok" in results[0] and "ok" in results[1], results
    assert results[2].get("error") == "RankFailureError", results
    assert "global rank 2) is not a member of the autotune_pg" in results[2]["message"], results[2]


def test_contextual_a_kernel_launched_on_one_rank_only_is_a_disagreement_at_once(tmp_path):
    import contextual_workers

    results = run_ranks(contextual_workers.extra_kernel_on_one_rank, 2, timeout_s=90,
                        env=_env(tmp_path, TRITON_INTERPRET="1", TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="60"),
                        tmp=tmp_path)
    # before: both ranks waited out the timeout in different phases (a registration against the
    # MAX reduction), each with a message saying a rank "did not call" the function
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    assert "the end of run 1" in results[0]["message"] and "the registration of _scale" in results[1]["message"]


def test_contextual_a_kernel_tuned_alone_before_is_tuned_again_with_the_group(tmp_path):
    import contextual_workers

    results = _ok(run_ranks(contextual_workers.tuned_alone_before_on_one_rank, 2, timeout_s=120,
                            env=_env(tmp_path, TRITON_INTERPRET="1", TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="30"),
                            tmp=tmp_path))
    # before: rank 0 took its own config without the group and returned; rank 1 timed out
    assert results[0]["y"] == results[1]["y"] == [2.0] * 128
    assert results[0]["config"] == results[1]["config"]  # one decision, the group's
    assert results[0]["runs"] == results[1]["runs"] > 1 and results[0]["then"] == results[1]["then"] == 1
