"""contextual_autotune(is_dist=True) on 2 real ranks (gloo + interpreter on CPU; NCCL on 2 GPUs).

Both ranks run ``_dist_worker.py`` as separate processes; the scenarios are in that file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.launcher import agent_store

WORKER = Path(__file__).resolve().parent / "_dist_worker.py"
REPO = Path(__file__).resolve().parents[2]
WORLD = 2


def run_ranks(cwd: Path, env_extra: dict[str, str], timeout_s: float) -> list[dict[str, Any]]:
    store, launch = agent_store()
    port = int(launch["MASTER_PORT"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(**launch, WORLD_SIZE=str(WORLD),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
               TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="60", **env_extra)
    procs, outs = [], []
    for rank in range(WORLD):
        out = cwd / f"rank{rank}.json"
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(rank), str(WORLD), str(port), str(out)],
                                      cwd=cwd, env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout_s)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    reports = []
    for rank, out in enumerate(outs):
        assert out.exists(), f"rank {rank} wrote no report:\n{logs[rank] if rank < len(logs) else ''}"
        report = json.loads(out.read_text())
        assert "crash" not in report, report["crash"]
        reports.append(report)
    return reports


def max_line(text: str) -> tuple[list[float], list[float]]:
    """(reduced means, this rank's means) from the log's MAX line."""
    m = re.search(r"MAX over WORLD \(2 ranks\): \[([^\]]*)\] \(this rank: \[([^\]]*)\]\)", text)
    assert m, text
    return ([float(v) for v in m.group(1).split(", ")], [float(v) for v in m.group(2).split(", ")])


def check(reports: list[dict[str, Any]], cwd: Path) -> None:
    runs_per_tuning = 2 * (1 + 2)  # 2 candidates x (1 warm-up + 2 timed launches)
    maxed = reports[0]["max"], reports[1]["max"]
    for r in maxed:
        assert r == {**r, "correct": True, "best": [256], "runs": runs_per_tuning + 1, "in_step": True}
    # configs_timings as stock Triton's ([median, 20 %, 80 %] ms), each figure the MAX over ranks:
    # the same on both, at least each rank's injected delay (256: 40 ms on rank 0, 512: 80 ms on 1)
    assert maxed[0]["timings"] == maxed[1]["timings"]
    for block, delay in (("256", 40.0), ("512", 80.0)):
        median, p20, p80 = maxed[0]["timings"][block]
        assert delay <= p20 <= median <= p80
    failed = reports[0]["rank_failure"], reports[1]["rank_failure"]
    for r in failed:
        assert r == {**r, "correct": True, "best": [256], "runs": runs_per_tuning + 1, "in_step": True}
        # 512 failed on rank 1 only: stock's figures of a config that cannot run, on both ranks
        assert r["timings"]["512"] == [float("inf")] * 3 and min(r["timings"]["256"]) >= 40.0
    invalid = reports[0]["all_invalid"], reports[1]["all_invalid"]
    for r in invalid:
        assert r["error"] == "NoValidConfigError" and r["message"] == "cannot find valid config"
        assert r["runs"] == runs_per_tuning and r["in_step"]

    for r in (reports[0]["different_keys"], reports[1]["different_keys"]):
        assert r["error"] == "RankDisagreementError" and r["in_step"], r
        assert "keys or candidate lists" in r["message"] and "(1024," in r["message"] and "(1025," in r["message"]
    check_custom_bench(reports)
    logs = [(cwd / ".autotune_logs" / f"rank-{rank}.log").read_text() for rank in range(WORLD)]
    # scenario "max": rank 0 alone measured 512 as faster; after the MAX 256 wins everywhere
    reduced, local0 = max_line(logs[0])
    assert local0[1] < local0[0] and reduced[0] < reduced[1]
    assert all(f"[rank-{rank}]" in logs[rank] for rank in range(WORLD))
    assert "injected failure of BLOCK=512" in logs[1]
    assert "no candidate can run here" in logs[1] and "no valid config" in logs[0]


def check_custom_bench(reports: list[dict[str, Any]]) -> None:
    """The inner autotuner's custom do_bench under is_dist: its figures, each the MAX over the
    ranks, in the shape it returns them (commit 37f7107 had this combination untested)."""
    inf = float("inf")
    quantiles = [r["bench_quantiles"] for r in reports]
    for r in quantiles:  # rank 0 alone would have picked 512
        assert r == {**r, "correct": True, "best": [256], "benched": [256, 512], "in_step": True}, r
        assert r["timings"] == {"256": [6.0, 4.0, 7.0], "512": [9.0, 8.0, 10.0]}, r
    for r in (reports[0]["bench_number"], reports[1]["bench_number"]):
        assert r == {**r, "correct": True, "best": [256], "in_step": True}, r
        assert r["timings"] == {"256": 6.0, "512": 9.0}, r
    for r in (reports[0]["bench_rank_failure"], reports[1]["bench_rank_failure"]):
        assert r == {**r, "correct": True, "best": [256], "in_step": True}, r
        assert r["timings"] == {"256": [5.0, 4.0, 6.0], "512": [inf, inf, inf]}, r
    for r in (reports[0]["bench_all_invalid"], reports[1]["bench_all_invalid"]):
        assert r["error"] == "NoValidConfigError" and r["message"] == "cannot find valid config", r
        assert r["benched"] == [256, 512] and r["in_step"], r


@pytest.mark.timeout(240)
def test_is_dist_max_over_world_on_gloo_ranks(tmp_path: Path):
    reports = run_ranks(tmp_path, {"TRITON_INTERPRET": "1", "TRITON_DIST_DEVICE": "cpu"}, timeout_s=200)
    check(reports, tmp_path)


def _two_gpus() -> str | None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1: kernels run in the interpreter"
    from triton_dist._backends import get_backend

    backend = get_backend()
    if backend.kind == "cpu":
        return "no GPU/NPU backend in this process"
    import torch

    accelerator = getattr(torch, "accelerator", None)
    count = accelerator.device_count() if accelerator is not None else 0
    return None if count >= WORLD else f"needs {WORLD} devices, found {count}"


@pytest.mark.gpu
@pytest.mark.timeout(400)
def test_is_dist_max_over_world_on_two_gpus(tmp_path: Path):
    reason = _two_gpus()
    if reason is not None:
        pytest.skip(reason)
    reports = run_ranks(tmp_path, {}, timeout_s=360)
    check(reports, tmp_path)
