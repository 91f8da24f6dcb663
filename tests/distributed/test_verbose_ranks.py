"""What a multi-rank job prints: each line of ``autotune_verbose`` and the contextual tuner's
INFO record names the rank that said it (a tester, 2026-12-05: a rank tuning alone printed its
lines without a rank, an in-memory hit never named one and, on a rank that wrote no entry, said
``entry None``; the contextual choice was logged without a rank or the outer function)."""

from __future__ import annotations

import pytest
import verbose_workers
from harness import run_ranks

pytestmark = pytest.mark.timeout(180)


def _ok(results):
    assert all("ok" in r for r in results), results
    return [r["ok"] for r in results]


def _check_lines(lines_per_rank, world_size):
    for rank, lines in enumerate(lines_per_rank):
        assert any("tuning verbose_workers.said for key (7,)" in line for line in lines), lines
        hits = [line for line in lines if "in-memory hit" in line]
        assert len(hits) == 1, lines
        for line in lines:
            assert line.startswith(f"[triton_dist] [rank {rank}/{world_size}] "), line
            assert "None" not in line, line
    return [[line for line in lines if "in-memory hit" in line][0] for lines in lines_per_rank]


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "alone"])
def test_every_verbose_line_names_its_rank(tmp_path, grouped):
    results = _ok(run_ranks(verbose_workers.verbose_lines, 2, args=(grouped,), tmp=tmp_path,
                            rank_env={r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r}")}
                                      for r in range(2)},
                            env={"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "30"}))
    hits = _check_lines(results, 2)
    # each rank's cache is its own node's: both write, and the hit names the entry
    assert all("tuned in this process, entry " in hit and hit.endswith(".json)") for hit in hits), hits


def test_a_rank_that_wrote_no_entry_says_so(tmp_path):
    # one cache for both ranks (one host): the lowest rank writes, rank 1 does not
    results = _ok(run_ranks(verbose_workers.verbose_lines, 2, args=(True,), tmp=tmp_path,
                            env={"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"),
                                 "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "30"}))
    hits = _check_lines(results, 2)
    assert "tuned in this process, entry " in hits[0] and hits[0].endswith(".json)"), hits
    assert hits[1].endswith("tuned in this process; this rank wrote no entry)"), hits


def test_the_contextual_choice_is_logged_with_rank_and_function(tmp_path):
    results = _ok(run_ranks(verbose_workers.contextual_info, 2, args=(str(tmp_path),), tmp=tmp_path))
    for rank, said in enumerate(results):
        records = said["choice"]
        assert len(records) == 1, records
        assert records[0].startswith(f"INFO [rank {rank}/2] contextual tuning of "), records
        assert "contextual_info.<locals>.outer" in records[0] and "_scale key" in records[0], records


def test_where_the_contextual_log_goes_is_a_warning_of_rank_0_only(tmp_path):
    """Each rank warned where its log goes (visible without logging set-up: 64 lines for 64
    ranks); rank 0 says it for all, the others at INFO."""
    results = _ok(run_ranks(verbose_workers.contextual_info, 2, args=(str(tmp_path),), tmp=tmp_path))
    announced = [said["announced"] for said in results]
    path = tmp_path / ".autotune_logs"
    assert announced == [
        [f"WARNING [rank 0/2] contextual tuning of contextual_info.<locals>.outer logs to {path}/rank-0.log "
         "(each rank to ./.autotune_logs/rank-<rank>.log of its working directory)"],
        [f"INFO [rank 1/2] contextual tuning of contextual_info.<locals>.outer logs to {path}/rank-1.log "
         "(each rank to ./.autotune_logs/rank-<rank>.log of its working directory)"]], announced


def test_warnings_name_their_rank_once(tmp_path):
    results = _ok(run_ranks(verbose_workers.warnings_said, 2, tmp=tmp_path,
                            env={"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"),
                                 "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "1"}))
    for rank, said in enumerate(results):
        assert len(said["warnings"]) == 2, said
        ungrouped, cache_only = said["warnings"]
        assert "tunes in this process alone" in ungrouped and "TRITON_DIST_AUTOTUNE_CACHE_ONLY=1" in cache_only
        # the warning and its logged copy alike: the rank once, at the start
        for text in said["warnings"] + said["records"]:
            assert text.startswith(f"[rank {rank}/2] verbose_workers.said"), text
            assert text.count("[rank ") == 1, text
        assert said["records"] == said["warnings"], said
