"""Adaptive measurement on real gloo ranks: every drop decision is taken on MAX-reduced figures,
so all ranks screen, finish and drop the same configs (and none hangs when one has a bug)."""

from __future__ import annotations

import adaptive_workers
import pytest
from harness import run_ranks

pytestmark = pytest.mark.timeout(180)


def _env(tmp_path):
    return {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"), "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "20"}


def test_ranks_drop_the_same_configs(tmp_path):
    results = run_ranks(adaptive_workers.adaptive_group, 2, env=_env(tmp_path), tmp=tmp_path)
    assert all("ok" in r for r in results), results
    # MAX screened medians [3.0, 5.0, 1.01, 1.0]: reference 3 (1 + 3 screened, 1 + 7 more, + the
    # final call), 0, 1 and 2 dropped after screening -- on both ranks
    expected = {"0": 4, "1": 4, "2": 4, "3": 13}
    assert [r["ok"] for r in results] == [{"value": 73, "calls": expected}] * 2


def test_alone_rank_zero_would_have_kept_config_zero(tmp_path):
    (result,) = run_ranks(adaptive_workers.adaptive_group, 1, env=_env(tmp_path), tmp=tmp_path,
                          args=(True,))
    # alone: screened [1.0, 5.0, 1.01, 1.0]: reference 0 (the earlier of the tie), 3 finished (as
    # fast), 1 and 2 dropped; the tie goes to 0, which runs once more
    assert result["ok"]["value"] == 70
    assert result["ok"]["calls"] == {"0": 13, "1": 4, "2": 4, "3": 12}


def test_bug_on_one_rank_stops_every_rank(tmp_path):
    results = run_ranks(adaptive_workers.adaptive_bug, 2, env=_env(tmp_path), tmp=tmp_path)
    assert not any(r.get("hung") for r in results), results
    assert results[1]["error"] == "TypeError"
    assert results[0]["error"] == "RankFailureError" and "rank 1" in results[0]["message"]
