"""Two gloo ranks standing in for hccl with the NPU backend selected: agreement and MAX."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from . import dist_workers

HARNESS = Path(__file__).resolve().parents[1] / "distributed"
if str(HARNESS) not in sys.path:
    sys.path.insert(0, str(HARNESS))
from harness import run_ranks  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def _env(tmp_path: Path) -> dict[str, str]:
    return {"TRITON_DIST_DEVICE": "npu", "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"),
            "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "30"}


def test_max_over_two_npu_ranks_picks_what_only_max_picks(tmp_path):
    results = run_ranks(dist_workers.max_over_ranks, 2, env=_env(tmp_path), tmp=tmp_path, timeout_s=200)
    assert all("ok" in r for r in results), results
    r0, r1 = (r["ok"] for r in results)
    for r in (r0, r1):
        assert (r["kind"], r["hccl"], r["group"]) == ("npu", "hccl", "gloo")
        assert r["best"] == 1 and r["events"] > 0  # timed with NPU events
    # MAX-reduced: both ranks hold the same times, each the larger of the two ranks' own
    assert r0["times"] == r1["times"]
    assert r0["times"][1] < min(r0["times"][0], r0["times"][2])
    assert len(list((tmp_path / "cache").glob("*/*.json"))) == 1  # one writer


def test_ranks_that_disagree_on_the_key_fail_together(tmp_path):
    results = run_ranks(dist_workers.disagreeing_key, 2, env=_env(tmp_path), tmp=tmp_path, timeout_s=120)
    assert [r.get("error") for r in results] == ["RankDisagreementError"] * 2, results
    assert all("key:" in r["message"] for r in results)


def test_contextual_tuning_of_triton_ascend_kernels_over_two_npu_ranks(tmp_path):
    results = run_ranks(dist_workers.contextual_ascend_kernels, 2, env=_env(tmp_path), tmp=tmp_path,
                        timeout_s=200, args=(str(tmp_path / "profile"),))
    assert all("ok" in r for r in results), results
    for r in (r["ok"] for r in results):
        assert r["sum"] == 64  # the MAX over ranks of the inner do_bench's figures
        assert r["softmax"] is True and r["bump"] in (32, 64)
        assert r["counter"] == [1.0]  # restore_value: once, whatever was measured or profiled
        assert r["acc"] == 6.0  # reset_to_zero: one softmax's sum (6 rows of 1), not 5 + 6
        assert r["profiled"] == [str(tmp_path / "profile")]  # auto_profile_dir: once per tuned key
    assert results[0]["ok"]["bump"] == results[1]["ok"]["bump"]
