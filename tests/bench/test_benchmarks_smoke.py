"""Every benchmark script runs in its --quick mode and writes well-formed results.

No figure is checked against a target (these machines are shared and noisy; performance figures
live in docs/performance.md): only that each script runs end to end on this machine, prints its
summary, and writes ``<name>.json`` with the documented layout, and that run_all collects the
results and draws the plots.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
SCRIPTS = ["p1_hot_path", "p1_contextual_hot_path", "p2_tuning_efficiency", "p3_selection_quality", "p5_first_call",
           "p6_adaptive", "p7_tutorials"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_DIST_AUTOTUNE_DIR"] = str(tmp_path / "cache")
    env.pop("RAY_ADDRESS", None)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.setdefault("RAY_AUTH_MODE", "disabled")
    return env


def _run(script: str, out: Path, tmp_path: Path, timeout: float) -> dict:
    proc = subprocess.run([sys.executable, str(BENCH / f"{script}.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=timeout, env=_env(tmp_path), cwd=str(REPO))
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "summary: " in proc.stdout
    data = json.loads((out / f"{script}.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert data["name"] == script and data["quick"] is True
    assert {"date_utc", "python", "torch", "device", "hardware"} <= set(data["environment"])
    assert data["summary"], "empty summary"
    printed = json.loads(proc.stdout.split("summary: ", 1)[1].splitlines()[0])
    assert printed == data["summary"]
    return data


@pytest.mark.timeout(240)
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_quick_and_writes_results(script: str, tmp_path: Path) -> None:
    data = _run(script, tmp_path / "out", tmp_path, timeout=220)
    summary = data["summary"]
    if script == "p1_hot_path":
        ns = data["results"]["ns_per_call"]
        assert {"host", "key_fn+host", "wrapper", "autotuner"} <= set(ns)
        assert all(v > 0 for v in ns.values())
        assert summary["ratio_vs_wrapper"] == pytest.approx(ns["autotuner"] / ns["wrapper"])
        # the headline: the tuner over the host among the four statements, round by round
        four = data["results"]["ns_per_round_typical_call_among_four"]
        assert set(four) == {"host", "autotuner", "key_fn+host", "lookup_caller"}
        diffs = [a - h for a, h in zip(four["autotuner"], four["host"], strict=True)]
        assert summary["overhead_over_host_median_ns"] == pytest.approx(statistics.median(diffs))
        assert summary["overhead_over_host_min_round_ns"] == pytest.approx(min(diffs))
        assert set(summary["order_check_ns"]) == {"four statements", "every statement", "after other code"}
        assert all(set(c) == {"forward", "reverse"} for c in summary["order_check_ns"].values())
    elif script == "p7_tutorials":
        rows = data["results"]["trials"]
        assert {r["kernel"] for r in rows} == {"matmul", "softmax", "layer_norm", "attention"}
        assert all(r["regret_warm"] >= 0 and r["wall_s"] > 0 for r in rows)
        assert {"default", "contextual"} <= set(summary)
    elif script == "p3_selection_quality":
        assert {"seed", "default", "adaptive"} <= set(summary)
        rows = data["results"]["trials"]
        assert rows and all(r["regret"] >= 0 for r in rows)
        assert summary["default"]["device_vs_default"] == pytest.approx(1.0)
    elif script == "p6_adaptive":
        a = summary["adaptive"]
        assert 0 <= a["replay_same_winner"] <= 1 and 0 < a["replay_device_fraction"] <= 1
        # the full schedule runs every kept config 5 + 10 times; adaptive never runs more
        for row in data["results"]["trials"]:
            assert row["replay"]["device_ms"] <= row["full"]["device_ms"] + 1e-9
    elif script == "p2_tuning_efficiency":
        assert all(r["runs_per_config"] == 15 and r["ratio"] > 0 for r in data["results"])
    elif script == "p5_first_call":
        assert summary["first_call_warm_ms"] > 0 and summary["first_call_cold_ms"] > 0


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_campaign_benchmark_runs_quick(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    data = _run("p4_campaign_efficiency", tmp_path / "out", tmp_path, timeout=280)
    summary = data["summary"]
    assert summary["cases_tuned"] == summary["cases_total"] == 4
    assert 0 < summary["efficiency"] <= 1


@pytest.mark.timeout(120)
def test_run_all_collects_results_and_draws_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--out", str(out), "--quick",
                           "--only", "p1", "p3"], capture_output=True, text=True, timeout=110,
                          env=_env(tmp_path), cwd=str(REPO))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["status"]["p1_hot_path"]["exit"] == 0
    assert set(results) >= {"status", "p1_hot_path", "p3_selection_quality"}
    for png in ("hot_path.png", "strategies.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
