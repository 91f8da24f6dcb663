"""Run the benchmarks and collect their results: ``python benchmarks/run_all.py [--out DIR]``.

Each benchmark runs in its own process (a crash or a time-out loses that one only) with
``--out DIR``; then ``DIR/results.json`` gathers every ``<name>.json`` and the plots are drawn:
``strategies.png`` (P3 regret and device time per strategy), ``adaptive.png`` (P6),
``tuning_wall.png`` (P2) and ``hot_path.png`` (P1). ``--only p1 p3`` picks benchmarks (results
of earlier runs into the same folder are kept), ``--collect`` only collects and plots; arguments
after ``--`` go to each benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCHMARKS = {
    "p1": "p1_hot_path",
    "p2": "p2_tuning_efficiency",
    "p3": "p3_selection_quality",
    "p4": "p4_campaign_efficiency",
    "p5": "p5_first_call",
    "p6": "p6_adaptive",
    "p7": "p7_tutorials",
}


def run(names: list[str], out: Path, extra: list[str], timeout_s: float) -> dict[str, Any]:
    status = {}
    for name in names:
        script = BENCHMARKS[name]
        print(f"=== {script}", flush=True)
        start = time.perf_counter()
        with open(out / f"{script}.log", "w", encoding="utf-8") as log:
            try:
                proc = subprocess.run([sys.executable, str(HERE / f"{script}.py"), "--out", str(out), *extra],
                                      stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
                code: int | str = proc.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        status[script] = {"exit": code, "seconds": round(time.perf_counter() - start, 1)}
        print(f"    exit {code} after {status[script]['seconds']} s; log {out / f'{script}.log'}", flush=True)
    return status


def collect(out: Path, status: dict[str, Any]) -> dict[str, Any]:
    """Gather every ``<name>.json`` in ``out`` into ``results.json`` (exit statuses of earlier
    invocations on the same folder are kept)."""
    previous = out / "results.json"
    merged = json.loads(previous.read_text()).get("status", {}) if previous.exists() else {}
    merged.update(status)
    results: dict[str, Any] = {"status": merged}
    for script in BENCHMARKS.values():
        path = out / f"{script}.json"
        if path.exists():
            data = json.loads(path.read_text())
            results[script] = {"environment": data["environment"], "summary": data["summary"],
                               "quick": data.get("quick")}
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results


def _load(out: Path, script: str) -> dict[str, Any] | None:
    path = out / f"{script}.json"
    return json.loads(path.read_text()) if path.exists() else None


def plot(out: Path) -> list[Path]:
    """Draw what the results allow; returns the files written."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no display
    except ImportError:
        print("matplotlib is not installed: no plots")
        return []
    written = []
    p3, p6 = _load(out, "p3_selection_quality"), _load(out, "p6_adaptive")
    if p3:
        summary = p3["summary"]
        order = ["seed", "default", "adaptive", "flush_l2", "triton_do_bench"]
        names = sorted(summary, key=lambda n: order.index(n) if n in order else len(order))
        device = p3["environment"].get("device", "?")
        fig = Figure(figsize=(9, 3.6))
        ax1, ax2 = fig.subplots(1, 2)
        p50 = [100 * summary[n]["regret_p50"] for n in names]
        p95 = [100 * summary[n]["regret_p95"] for n in names]
        x = range(len(names))
        ax1.bar([i - 0.2 for i in x], p50, width=0.4, label="p50")
        ax1.bar([i + 0.2 for i in x], p95, width=0.4, label="p95")
        ax1.axhline(3.0, color="grey", linestyle="--", linewidth=0.8, label="target p95 3%")
        ax1.set_xticks(list(x), names, rotation=20)
        ax1.set_ylabel("regret vs oracle (%)")
        ax1.set_title("selection quality (P3)")
        ax1.legend(fontsize=8)
        dev = [summary[n]["device_vs_default"] for n in names]
        ax2.bar(list(x), dev, color="tab:green")
        ax2.axhline(0.5, color="grey", linestyle="--", linewidth=0.8, label="adaptive target 0.5")
        ax2.set_xticks(list(x), names, rotation=20)
        ax2.set_ylabel("device time / default schedule")
        ax2.set_title("device time per strategy")
        ax2.legend(fontsize=8)
        fig.suptitle(f"strategies on {device} ({p3['environment'].get('date_utc', '')[:10]})", fontsize=10)
        fig.tight_layout()
        path = out / "strategies.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    if p6:
        a = p6["summary"]["adaptive"]
        fig = Figure(figsize=(5, 3.4))
        ax = fig.subplots()
        labels = ["replayed", "independent", "full vs full"]
        same = [a["replay_same_winner"], a["independent_same_winner"], a["full_vs_full_same_winner"] or 0]
        devs = [a["replay_device_fraction"], a["independent_device_fraction"], 1.0]
        x = range(len(labels))
        ax.bar([i - 0.2 for i in x], same, width=0.4, label="same winner as full")
        ax.bar([i + 0.2 for i in x], devs, width=0.4, label="device time / full")
        ax.axhline(0.95, color="tab:blue", linestyle=":", linewidth=0.8)
        ax.axhline(0.5, color="tab:orange", linestyle=":", linewidth=0.8)
        ax.set_xticks(list(x), labels)
        ax.set_ylim(0, 1.1)
        ax.set_title(f"adaptive measurement (P6, {p6['environment'].get('device', '?')})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / "adaptive.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    p2 = _load(out, "p2_tuning_efficiency")
    if p2 and p2["results"]:
        fig = Figure(figsize=(5, 3.4))
        ax = fig.subplots()
        for workload in sorted({r["workload"] for r in p2["results"]}):
            rows = [r for r in p2["results"] if r["workload"] == workload]
            ax.plot([r["kernel_ms_median"] * 1e3 for r in rows], [r["ratio"] for r in rows], "o-", label=workload)
            ax.plot([r["kernel_ms_median"] * 1e3 for r in rows], [r["miss_ratio"] for r in rows], "x:",
                    label=f"{workload} + cache write")
        ax.axhline(1.05, color="grey", linestyle="--", linewidth=0.8, label="target 1.05")
        ax.axvline(30, color="grey", linestyle=":", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("kernel time (us, median over configs)")
        ax.set_ylabel("tuning wall / ideal")
        ax.set_title(f"tuning efficiency (P2, {p2['environment'].get('device', '?')})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / "tuning_wall.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    p1 = _load(out, "p1_hot_path")
    if p1:
        ns = p1["results"]["ns_per_call"]
        fig = Figure(figsize=(5, 3.4))
        ax = fig.subplots()
        names = list(ns)
        ax.barh(names, [ns[n] / 1e3 for n in names])
        ax.set_xlabel("us per call (min over rounds)")
        ax.set_title(f"cached call (P1, {p1['environment'].get('device', '?')})")
        fig.tight_layout()
        path = out / "hot_path.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS), default=None)
    p.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per benchmark")
    p.add_argument("--collect", action="store_true", help="run nothing: collect the results and plot")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    names = [] if args.collect else args.only or list(BENCHMARKS)
    status = run(names, args.out, extra + (["--quick"] if args.quick else []), args.timeout)
    results = collect(args.out, status)
    for path in plot(args.out):
        print(f"plot: {path}")
    failed = [s for s, v in results["status"].items() if v["exit"] != 0]
    for script, data in results.items():
        if script != "status":
            summary_json = json.dumps(
                data["summary"], default=lambda v: None if isinstance(v, float) and not math.isfinite(v) else str(v))
            print(f"{script}: {summary_json[:600]}")
    if failed:
        print(f"failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
