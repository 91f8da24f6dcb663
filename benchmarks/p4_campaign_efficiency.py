"""P4 campaign efficiency: how well a Ray campaign keeps its devices busy.

Starts a Ray cluster of its own (``--actors`` CPUs, or the GPUs of the machine), runs a campaign
through the fixed interface ``python -m ray_runner run CAMPAIGN --address ... --force``, and reads
its report:

- efficiency = sum over tuned cases of (world size x case seconds) / (devices x wall seconds),
  i.e. Σ(single-gang case time) ÷ (gangs × wall) (the report's own figure);
- gang start-up times (paid once per gang, amortised over its cases);
- per-case scheduling overhead: the report's own (case seconds minus the time its ranks say they
  spent on it: dispatch and transfers), median and max; on the CPU also the median case time minus
  the time the same tuning takes in-process; everywhere, the device time not spent in cases or
  gang start-ups (Σ start-up × gang size), per case.

CPU campaign: ``benchmarks/campaign_target.py`` (configs that sleep a known time), world size 1.
GPU campaign: the GEMM example (``examples/gemm.py``): 30 shapes of world size 1 and 4 of world
size 2, or with ``--long`` 128 and 8 (``--cases`` caps the first).
Targets (issue 8): efficiency >= 0.9 with 2 GPUs and with 4 CPU actors; overhead <= 50 ms per case.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

from triton_dist._backends import get_backend

HERE = Path(__file__).resolve().parent


def campaign(kind: str, cases: int, scale: float, report_dir: Path, quick: bool,
             long: bool = False) -> dict[str, Any]:
    common_fields = {"name": "p4", "device": kind, "retries": 1, "case_timeout_s": 900,
                     "placement_timeout_s": 300, "report_dir": str(report_dir)}
    if kind == "cpu":
        return {**common_fields, "targets": [{
            "function": "campaign_target:sleepy", "args": "campaign_target:make_args", "world_size": 1,
            "grid": {"n": list(range(cases)), "scale": [scale]}}]}
    sizes = [256, 512] if quick else [256, 512, 1024, 2048, 4096]
    dtypes = ["float16"] if quick else ["float16", "bfloat16"]
    aspects = [(1, 1, 1)] if quick else [(1, 1, 1), (2, 1, 1), (1, 1, 4)]
    if long:  # a pre-tuning campaign of realistic length: 120 single-GPU shapes, 8 two-GPU ones
        sizes = [256, 512, 1024, 1536, 2048, 3072, 4096, 6144]
        aspects = [(1, 1, 1), (2, 1, 1), (1, 1, 4), (4, 1, 1), (1, 2, 2),
                   (1, 4, 1), (2, 2, 1), (1, 1, 2)][:8]
    shapes = [{"M": s * m, "N": s * n, "K": s * k, "dtype": d}
              for s in sizes for d in dtypes for m, n, k in aspects]
    return {**common_fields, "targets": [
        {"function": "examples.gemm:matmul", "args": "examples.gemm:make_matmul_args", "world_size": 1,
         "cases": shapes[:cases]},
        {"function": "examples.gemm:matmul", "args": "examples.gemm:make_matmul_args", "world_size": 2,
         "cases": [{"M": s, "N": s, "K": 2 * s, "dtype": d} for s in sizes[:4]
                   for d in (dtypes if long else dtypes[:1])]},
    ]}


def in_process_case_s(scale: float) -> float:
    """How long one CPU case's tuning takes without Ray (the reference for the overhead)."""
    import campaign_target

    start = time.perf_counter()
    campaign_target.sleepy.tune(10**6, scale, force=True, write_cache=False)
    return time.perf_counter() - start


def run_once(path: Path, address: str, work: Path, tag: str, keep: list[str], reference_s: float | None,
             kind: str) -> tuple[dict[str, Any], dict[str, Any], subprocess.CompletedProcess]:
    """Run the campaign through the CLI once and read its report into the P4 figures."""
    start = time.perf_counter()
    reports = work / f"reports{tag}"
    spec = json.loads(path.read_text())
    spec["report_dir"] = str(reports)
    run_path = path.with_name(f"p4{tag}.yaml")
    run_path.write_text(json.dumps(spec, indent=2))  # JSON is YAML
    proc = subprocess.run([sys.executable, "-m", "ray_runner", "run", str(run_path), "--address", address,
                           "--cache-dir", str(work / "cache"), "--force", "--no-progress", *keep],
                          capture_output=True, text=True, timeout=3600, check=False, cwd=str(common.REPO))
    driver_s = time.perf_counter() - start
    report_path = reports / "p4.json"
    if proc.returncode != 0 or not report_path.exists():
        print(proc.stdout[-4000:], proc.stderr[-8000:], sep="\n")
        raise SystemExit(f"the campaign failed (exit status {proc.returncode}); see the output above")
    report = json.loads(report_path.read_text())
    tuned = [c for c in report["cases"] if c["status"] == "tuned" and c["seconds"] is not None]
    starts = report["gangs"]["start_s"]
    devices, wall = report["devices"], report["wall_s"]
    busy = sum(c["world_size"] * c["seconds"] for c in tuned)
    # a gang of W ranks holds W devices while it starts (older reports: gangs of one size)
    start_device_s = report["gangs"].get("start_device_s")
    if start_device_s is None:
        sizes = report["gangs"].get("sizes") or [1]
        start_device_s = sum(starts) * (sum(sizes) / len(sizes)) if starts else 0.0
    unexplained = devices * wall - busy - start_device_s
    summary = {
        "device": kind,
        "devices": devices,
        "cases_tuned": len(tuned),
        "cases_total": len(report["cases"]),
        "wall_s": wall,
        "driver_s": driver_s,
        "efficiency": report["efficiency"],
        "efficiency_without_startup": (busy / (devices * wall - start_device_s)
                                       if devices * wall > start_device_s else None),
        "gangs_started": report["gangs"]["started"],
        "gangs_reused": report["gangs"].get("reused", 0),
        "gang_start_s_median": statistics.median(starts) if starts else None,
        "idle_device_s_per_case": unexplained / len(tuned) if tuned else None,
        "case_s_median": statistics.median(c["seconds"] for c in tuned) if tuned else None,
        "in_process_case_s": reference_s,
        "overhead_per_case_s_median": report.get("overhead_s_median"),
        "overhead_per_case_s_max": max((c["overhead_s"] for c in tuned if c.get("overhead_s") is not None),
                                       default=None),
        "overhead_per_case_s": statistics.median(c["seconds"] for c in tuned) - reference_s
        if tuned and reference_s is not None else None,
    }
    return summary, report, proc


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--actors", type=int, default=None, help="CPU actors (default 4); GPUs: all of them")
    p.add_argument("--cases", type=int, default=None, help="cases (CPU default 48; GPU: all shapes)")
    p.add_argument("--scale", type=float, default=None, help="CPU: multiplies every config's cost")
    p.add_argument("--kept", action="store_true",
                   help="run the campaign twice with --keep-gangs: the second on the gangs the first kept")
    p.add_argument("--long", action="store_true",
                   help="GPU: a campaign of realistic length (128 GEMM shapes) instead of 34")
    args = p.parse_args(argv)
    try:
        import ray
    except ImportError:
        print("P4 needs Ray: pip install 'ray[default]' (on the GPU machine: scripts/device/bench_x2.sh)")
        return {}
    backend = get_backend()
    kind = backend.kind
    actors = args.actors or (2 if args.quick else 4)
    cases = args.cases or (4 if args.quick else 48 if kind == "cpu" else 1000)
    scale = args.scale or (0.1 if args.quick else 4.0)  # CPU cases of ~1.4 s: start-up amortised
    work = Path(tempfile.mkdtemp(prefix="triton-dist-p4-"))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), str(common.REPO), os.environ.get("PYTHONPATH")]))
    os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(work / "driver-cache")
    reference_s = in_process_case_s(scale) if kind == "cpu" else None
    spec = campaign(kind, cases, scale, work / "reports", args.quick, args.long)
    path = work / "p4.yaml"
    path.write_text(json.dumps(spec, indent=2))  # JSON is YAML
    # address="local": a cluster of our own, even when another one runs on this machine
    init: dict[str, Any] = {"address": "local", "include_dashboard": False, "namespace": "triton-dist-p4"}
    if kind == "cpu":
        init["num_cpus"] = actors
    ray.init(**init)
    keep = ["--keep-gangs", "600"] if args.kept else []
    try:
        address = ray.get_runtime_context().gcs_address
        summary, report, proc = run_once(path, address, work, "", keep, reference_s, kind)
        if args.kept:  # the same campaign again, on the gangs the first one kept
            warm, _, _ = run_once(path, address, work, "-warm", keep, reference_s, kind)
            summary.update({f"kept_{k}": warm[k] for k in (
                "wall_s", "efficiency", "efficiency_without_startup", "gang_start_s_median", "gangs_reused",
                "overhead_per_case_s_median", "idle_device_s_per_case")})
            subprocess.run([sys.executable, "-m", "ray_runner", "pool", "stop", "--address", address],
                           capture_output=True, text=True, timeout=120, check=False, cwd=str(common.REPO))
    finally:
        ray.shutdown()
    print(common.md_table(["figure", "value"], [[k, v] for k, v in summary.items()]))
    common.write_result("p4_campaign_efficiency", args,
                        {"actors": actors if kind == "cpu" else None, "cases": cases, "scale": scale,
                         "campaign": spec}, {"report": report, "stdout_tail": proc.stdout[-2000:]},
                        summary, backend)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
