"""P7 campaigns at fleet scale (issue 21): driver memory, reporting, scheduling overhead, resume,
and seeding / pre-flight against the node count.

1. For each case count N (``--cases``): a campaign of N cases of a zero-cost target
   (``campaign_target:sleepy`` with ``scale: 0``: four configs that sleep 0 s) through
   ``python -m ray_runner run`` on a Ray cluster of ``--actors`` CPUs started here. Figures: the
   driver's peak RSS (its own ``ru_maxrss``, logged at exit), the time to write the report, the
   scheduling overhead per case ``(wall - Σ case seconds / devices) / N`` and cases per second.
2. Resume (``--resume-cases``): the campaign's driver is killed (SIGKILL) once half of its cases
   are in its results stream, then run again: no case may be tuned twice, none may be missing,
   and the time the second run takes to decide what is done is read from its log.
3. Nodes (``--nodes``): a ``ray.cluster_utils.Cluster`` of K raylets on this machine, each with
   its own cache root (``TRITON_DIST_AUTOTUNE_DIR`` of its raylet, as separate pods have), K in
   1, 2, 4, 8; the entries of part 1's largest campaign are seeded (``seed_nodes``: first
   seeding writes, a second finds them identical) and pre-flight checks every case on every
   node. Wall times against K (each after one warm-up call, so that worker start-up, which is
   paid in parallel on real nodes, is not counted), next to each node's own CPU time (its task's
   process time), the seeding's flush of the disk, the pre-flight reference's time (the node
   that ran the hit rule in full) and the load average: on one machine every raylet's work
   shares its cores and its disk, which separate nodes do not.

Targets (issue 21): RSS <= 300 MB at 10,000 cases and <= ~10 KB/case more; report <= 5 s;
overhead <= 5 ms/case; resume decides in <= 5 s; seeding and pre-flight grow <= 0.2 s per node.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGET = {"function": "campaign_target:sleepy", "args": "campaign_target:make_args", "world_size": 1}


def campaign_file(work: Path, name: str, cases: int) -> Path:
    # one target per 5,000 values of n: a grid list holds at most ray_runner._values.MAX_VALUE_NODES
    targets = [{**TARGET, "grid": {"n": list(range(lo, min(lo + 5000, cases))), "scale": [0.0]}}
               for lo in range(0, cases, 5000)]
    data = {"name": name, "device": "cpu", "retries": 0, "case_timeout_s": 300, "placement_timeout_s": 300,
            "report_dir": str(work / "reports"), "targets": targets}
    path = work / f"{name}.json"  # YAML is a superset of JSON
    path.write_text(json.dumps(data))
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE), env.get("PYTHONPATH", "")])
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


def _cli(path: Path, address: str, cache: Path) -> list[str]:
    return [sys.executable, "-m", "ray_runner", "run", str(path), "--address", address, "--cache-dir", str(cache),
            "--no-progress"]


def _figure(pattern: str, text: str) -> float | None:
    found = re.findall(pattern, text)
    return float(found[-1]) if found else None


def run_campaign(work: Path, address: str, cases: int) -> dict[str, Any]:
    """Part 1: one campaign of ``cases`` zero-cost cases through the CLI."""
    cache = work / f"cache{cases}"
    path = campaign_file(work, f"p7_{cases}", cases)
    start = time.perf_counter()
    proc = subprocess.run(_cli(path, address, cache), capture_output=True, text=True, env=_env(), cwd=HERE,
                          timeout=3600)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"campaign of {cases} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads((work / "reports" / f"p7_{cases}.json").read_text())
    devices, wall = report["devices"], report["wall_s"]
    gap = (wall - report["sum_case_s"] / devices) / cases
    # stricter: the time the ranks themselves report (dispatch and transfers count as overhead)
    ranks_s = sum(c["seconds"] - (c.get("overhead_s") or 0.0) for c in report["cases"]
                  if c["status"] == "tuned" and c.get("seconds") is not None)
    return {"cases": cases, "devices": devices, "wall_s": wall, "process_s": round(elapsed, 2),
            "sum_case_s": report["sum_case_s"], "counts": report["counts"],
            "peak_rss_mb": _figure(r"driver peak RSS (\d+) MB", proc.stderr),
            "report_s": _figure(r"report of \d+ cases written in ([\d.]+)s", proc.stderr),
            "overhead_ms_per_case": round(1e3 * gap, 3),
            "overhead_ranks_ms_per_case": round(1e3 * (wall - ranks_s / devices) / cases, 3),
            "case_overhead_ms_median": 1e3 * (report["overhead_s_median"] or 0.0),
            "cases_per_s": round(cases / wall, 1), "cache": str(cache), "campaign": str(path)}


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "case_id" in record:
            out.append(record)
    return out


def run_resume(work: Path, address: str, cases: int) -> dict[str, Any]:
    """Part 2: kill the driver at ~50 %, run again, check nothing is redone or lost."""
    cache = work / "cache-resume"
    path = campaign_file(work, "p7_resume", cases)
    stream = work / "reports" / "p7_resume.results.jsonl"
    proc = subprocess.Popen(_cli(path, address, cache), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=_env(), cwd=HERE)
    while proc.poll() is None and len(_rows(stream)) < cases // 2:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(_rows(stream))
    time.sleep(2.0)  # Ray notices the dead driver and ends its actors
    again = subprocess.run(_cli(path, address, cache), capture_output=True, text=True, env=_env(), cwd=HERE,
                           timeout=3600)
    rows = _rows(stream)
    tuned: dict[str, int] = {}
    final: dict[str, str] = {}
    for row in rows:
        final[row["case_id"]] = row["status"]
        if row["status"] == "tuned":
            tuned[row["case_id"]] = tuned.get(row["case_id"], 0) + 1
    return {"cases": cases, "killed_after_rows": killed_at, "rerun_exit": again.returncode,
            "decide_s": _figure(r"decided in ([\d.]+)s", again.stderr),
            "tuned_twice": sum(1 for n in tuned.values() if n > 1),
            "missing": cases - sum(1 for s in final.values() if s in ("tuned", "cached")),
            "second_run_counts": {s: sum(1 for r in rows if r.get("run") == 2 and r["status"] == s)
                                  for s in ("tuned", "cached", "failed")}}


def run_nodes(work: Path, counts: list[int], campaign_path: Path, cache: Path) -> list[dict[str, Any]]:
    """Part 3: seeding and pre-flight on clusters of 1..8 raylets, each with its own cache root."""
    import ray
    from ray.cluster_utils import Cluster

    from ray_runner.preflight import preflight, summarize
    from ray_runner.seed import seed_nodes
    from ray_runner.spec import load_campaign

    campaign = load_campaign(campaign_path)
    paths = sorted(str(p) for p in cache.glob("*/*.json"))
    out = []
    for k in counts:
        roots = [work / f"nodes{k}" / f"node{i}" for i in range(k)]
        saved = os.environ.get("TRITON_DIST_AUTOTUNE_DIR")
        cluster = Cluster()
        try:
            for i, root in enumerate(roots):
                os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(root)
                cluster.add_node(num_cpus=1, **({"include_dashboard": False} if i == 0 else {}))
            os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(cache)
            ray.init(address=cluster.address, log_to_driver=False)
            cluster.wait_for_nodes()
            seed_nodes(paths[:1], cache, None, timeout_s=600)  # warm-up: a worker on every node
            start = time.perf_counter()
            first = seed_nodes(paths, cache, None, timeout_s=600)
            seed_s = time.perf_counter() - start
            start = time.perf_counter()
            again = seed_nodes(paths, cache, None, timeout_s=600)
            reseed_s = time.perf_counter() - start
            preflight(campaign, timeout_s=1800)  # warm-up (imports on every node)
            start = time.perf_counter()
            checked = preflight(campaign, timeout_s=1800)
            pre_s = time.perf_counter() - start
            ok, lines = summarize(checked)
            out.append({"nodes": k, "entries": len(paths), "seed_s": round(seed_s, 2),
                        "reseed_s": round(reseed_s, 2), "preflight_s": round(pre_s, 2), "preflight_ok": ok,
                        # each node's own time (its task): the wall minus it is what the driver and
                        # the transport add, which is what must not grow with the node count
                        "seed_node_s_max": max(s["seconds"] for s in first),
                        # each node's own CPU (its task's process time) and the seeding's flush
                        "seed_node_cpu_s": _spread(first, "cpu_s"), "reseed_node_cpu_s": _spread(again, "cpu_s"),
                        "seed_flush_s": _spread(first, "flush_s"),
                        # pre-flight: the reference ran the hit rule; the others, against it
                        "preflight_reference_s": max(n.get("seconds", 0.0) for n in checked if not n.get("reference")),
                        "preflight_node_cpu_s": _spread([n for n in checked if n.get("reference")] or checked, "cpu_s"),
                        "preflight_full_rule": [n.get("full_rule") for n in checked],
                        "load": [round(x, 2) for x in os.getloadavg()],
                        "reseed_node_s_max": max(s["seconds"] for s in again),
                        "preflight_node_s_max": max(n.get("seconds", 0.0) for n in checked),
                        "seed_errors": sum(len(s["errors"]) for s in first + again),
                        "written": sum(s["written"] for s in first), "unchanged": sum(s["unchanged"] for s in again)})
            print(f"  nodes={k}: seed {seed_s:.2f}s (again {reseed_s:.2f}s), preflight {pre_s:.2f}s ok={ok}",
                  flush=True)
            if not ok:
                print("\n".join(lines[:10]))
        finally:
            ray.shutdown()
            cluster.shutdown()
            if saved is None:
                os.environ.pop("TRITON_DIST_AUTOTUNE_DIR", None)
            else:
                os.environ["TRITON_DIST_AUTOTUNE_DIR"] = saved
    return out


def _spread(answers: list[dict[str, Any]], field: str) -> dict[str, float]:
    """Mean and max of a field of the nodes' answers."""
    values = [a.get(field) or 0.0 for a in answers]
    return {"mean": round(sum(values) / len(values), 3), "max": round(max(values), 3)}


def growth(rows: list[dict[str, Any]], x: str, y: str) -> float | None:
    """Least-squares slope of ``y`` against ``x``."""
    if len(rows) < 2:
        return None
    xs, ys = [r[x] for r in rows], [r[y] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((a - mx) ** 2 for a in xs)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / den if den else None


def plot(campaigns: list[dict[str, Any]], nodes: list[dict[str, Any]], path: Path) -> bool:
    """Driver memory and overhead against the case count; seeding and pre-flight against nodes."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return False
    fig = Figure(figsize=(12, 3.6))
    mem, over, wall = fig.subplots(1, 3)
    xs = [c["cases"] for c in campaigns]
    mem.plot(xs, [c["peak_rss_mb"] for c in campaigns], "o-", label="driver peak RSS")
    mem.axhline(300, color="grey", linestyle="--", linewidth=0.8, label="target at 10,000")
    mem.set_xlabel("cases")
    mem.set_ylabel("MB")
    mem.legend(fontsize=8)
    over.plot(xs, [c["overhead_ms_per_case"] for c in campaigns], "o-", label="(wall - Σ case / devices) / cases")
    over.plot(xs, [c["report_s"] for c in campaigns], "s-", label="report (s)")
    over.axhline(5, color="grey", linestyle="--", linewidth=0.8, label="targets (5 ms, 5 s)")
    over.set_xlabel("cases")
    over.set_ylabel("ms per case / s")
    over.legend(fontsize=8)
    if nodes:
        ks = [n["nodes"] for n in nodes]
        for field, label in (("seed_s", "--seed nodes (writes)"), ("reseed_s", "--seed nodes (identical)"),
                             ("preflight_s", "preflight")):
            wall.plot(ks, [n[field] for n in nodes], "o-", label=label)
        wall.set_xlabel(f"raylets on this machine ({nodes[0]['entries']} entries)")
        wall.set_ylabel("wall s")
        wall.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, nargs="+", default=[1000, 2000, 5000, 10000])
    p.add_argument("--actors", type=int, default=2, help="CPUs of the local Ray cluster (gangs of one)")
    p.add_argument("--resume-cases", type=int, default=10000, help="0: skip part 2")
    p.add_argument("--nodes", type=int, nargs="*", default=[1, 2, 4, 8], help="empty: skip part 3")
    p.add_argument("--nodes-from", type=Path, metavar="DIR",
                   help="part 3 only, on the entries and campaign of the largest campaign of an earlier run's "
                        "work directory (p7-*)")
    args = p.parse_args()
    if args.quick:
        args.cases, args.resume_cases, args.nodes = [50, 100], 60, [1, 2]
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    work = Path(tempfile.mkdtemp(prefix="p7-"))
    common.private_cache_dir()
    if args.nodes_from:
        biggest = max((int(p.stem.split("_")[1]), p) for p in args.nodes_from.glob("p7_[0-9]*.json"))[0]
        nodes = run_nodes(work, args.nodes, args.nodes_from / f"p7_{biggest}.json", args.nodes_from / f"cache{biggest}")
        common.write_result("p7_campaign_scale_nodes", args, {"nodes": args.nodes, "from": args.nodes_from},
                            {"nodes": nodes}, {"seed_s_per_node": growth(nodes, "nodes", "seed_s"),
                                               "reseed_s_per_node": growth(nodes, "nodes", "reseed_s"),
                                               "preflight_s_per_node": growth(nodes, "nodes", "preflight_s")})
        return
    ray.init(address="local", num_cpus=args.actors, include_dashboard=False, namespace="triton-dist-p7")
    try:
        address = ray.get_runtime_context().gcs_address
        campaigns = []
        for n in args.cases:
            row = run_campaign(work, address, n)
            campaigns.append(row)
            print(f"  {n} cases: peak RSS {row['peak_rss_mb']} MB, report {row['report_s']}s, overhead "
                  f"{row['overhead_ms_per_case']} ms/case, {row['cases_per_s']} cases/s", flush=True)
        resume = run_resume(work, address, args.resume_cases) if args.resume_cases else None
        if resume:
            print(f"  resume: {resume}", flush=True)
    finally:
        ray.shutdown()
    biggest = campaigns[-1]
    nodes = run_nodes(work, args.nodes, Path(biggest["campaign"]), Path(biggest["cache"])) if args.nodes else []
    per_case = None
    if len(campaigns) >= 2 and campaigns[-1]["peak_rss_mb"] and campaigns[0]["peak_rss_mb"]:
        per_case = 1024 * (campaigns[-1]["peak_rss_mb"] - campaigns[0]["peak_rss_mb"]) / (
            campaigns[-1]["cases"] - campaigns[0]["cases"])
    summary = {
        "cases": biggest["cases"], "peak_rss_mb": biggest["peak_rss_mb"], "rss_kb_per_case": per_case,
        "report_s": biggest["report_s"], "overhead_ms_per_case": biggest["overhead_ms_per_case"],
        "cases_per_s": biggest["cases_per_s"],
        "resume_decide_s": resume and resume["decide_s"], "resume_tuned_twice": resume and resume["tuned_twice"],
        "resume_missing": resume and resume["missing"],
        "seed_s_per_node": growth(nodes, "nodes", "seed_s"), "reseed_s_per_node": growth(nodes, "nodes", "reseed_s"),
        "preflight_s_per_node": growth(nodes, "nodes", "preflight_s"),
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if plot(campaigns, nodes, Path(args.out) / "campaign_scale.png"):
        print(f"figure: {Path(args.out) / 'campaign_scale.png'}")
    common.write_result("p7_campaign_scale", args, {"cases": args.cases, "actors": args.actors,
                                                    "resume_cases": args.resume_cases, "nodes": args.nodes},
                        {"campaigns": campaigns, "resume": resume, "nodes": nodes}, summary)


if __name__ == "__main__":
    main()
