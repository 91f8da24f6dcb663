"""Issue 7 R4 on a GPU: a candidate that makes an illegal memory access (crash_target.py, config 1).

1. inline: one process tunes ``crash_copy``. The core stops at candidate 1 with a
   ``DeviceStateError`` (``details["index"] == 1``) instead of timing the later candidates on a
   broken device, and a fresh CUDA operation in that process fails too: the error is sticky, the
   process cannot recover, so inline tuning cannot finish past such a candidate.
2. isolated: every attempt runs in a fresh subprocess; after a ``DeviceStateError`` the next
   attempt passes ``known_failures={1: reason}`` (``AutoTuner.tune``), so it completes with
   candidate 1 recorded as failed; the entry is written and a fresh process hits it.
3. ray (when ``import ray`` works): the same through ``python -m ray_runner run`` on an embedded
   local Ray: the first attempt's actor reports the DeviceStateError and is retired, the retry on a
   fresh actor has candidate 1 marked failed, the campaign finishes; a fresh process hits the
   seeded cache.

    python scripts/device/crash_isolation.py --out DIR [--dry-run]

``--dry-run`` disarms the bad config (``TD_CRASH_OOB=0``) to check the plumbing where there is no
GPU. Writes ``DIR/crash_isolation.json``; exit status 0 when every phase that ran held.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
N = int(os.environ.get("TD_CRASH_N", str(1 << 20)))


def _write(path: str, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2, default=str))


def child_inline(out: str) -> None:
    import torch
    from crash_target import crash_copy

    from triton_dist._backends import get_backend

    backend = get_backend()
    src = torch.arange(N, dtype=torch.float32, device=backend.device())
    result: dict = {"device": backend.kind}
    try:
        entry = crash_copy.tune(src, write_cache=False)
        result.update(outcome="completed", errors=[c["error"] for c in entry["candidates"]])
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        result.update(outcome=type(exc).__name__, message=str(exc)[:1000],
                      index=getattr(exc, "details", {}).get("index"))
    try:  # is the device still usable in this process?
        value = (torch.ones(16, device=backend.device()) * 2).sum().item()
        backend.synchronize()
        result["after"] = f"usable (a new op returned {value})"
    except Exception as exc:  # noqa: BLE001
        result["after"] = f"unusable: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    _write(out, result)


def child_attempt(root: str, known: str, out: str) -> None:
    import torch
    from crash_target import crash_copy

    from triton_dist._backends import get_backend

    backend = get_backend()
    src = torch.arange(N, dtype=torch.float32, device=backend.device())
    failures = {int(k): v for k, v in json.loads(known).items()}
    try:
        entry = crash_copy.tune(src, cache_dir=root, known_failures=failures, check_correctness=True)
        _write(out, {"outcome": "completed", "entry": entry})
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        details = getattr(exc, "details", {}) or {}
        _write(out, {"outcome": type(exc).__name__, "message": str(exc)[:1000],
                     "index": details.get("index"), "reason": details.get("reason")})


def child_hit(out: str) -> None:
    import torch
    from crash_target import CALLS, SPACE, crash_copy

    from triton_dist._backends import get_backend

    src = torch.arange(N, dtype=torch.float32, device=get_backend().device())
    dst = crash_copy(src)
    _write(out, {"host_calls": CALLS[0], "best": SPACE.index(crash_copy.best_config(src)),
                 "correct": bool(torch.equal(dst, src))})


def _child(mode: str, *args: str, env: dict, timeout: float = 600) -> dict:
    out = Path(args[-1])
    proc = subprocess.run([sys.executable, __file__, mode, *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    data = json.loads(out.read_text()) if out.exists() else {"outcome": "died", "exit": proc.returncode}
    data["stderr_tail"] = proc.stderr[-1500:]
    return data


def phase_inline(work: Path, env: dict) -> dict:
    r = _child("_inline", str(work / "inline.json"), env=env)
    r["held"] = (r.get("outcome") == "DeviceStateError" and r.get("index") == 1
                 and str(r.get("after", "")).startswith("unusable"))
    return r


def phase_isolated(work: Path, env: dict, dry_run: bool, retries: int = 3) -> dict:
    root = work / "isolated-cache"
    known: dict[str, str] = {}
    attempts = []
    for attempt in range(retries + 1):
        r = _child("_attempt", str(root), json.dumps(known), str(work / f"attempt{attempt}.json"),
                   env={**env, "TRITON_DIST_AUTOTUNE_DIR": str(root)})
        entry = r.pop("entry", None)
        attempts.append(r)
        if entry is not None:
            break
        if r.get("outcome") == "DeviceStateError" and isinstance(r.get("index"), int):
            known[str(r["index"])] = r.get("reason") or r.get("message", "")
    else:
        return {"held": False, "attempts": attempts}
    hit = _child("_hit", str(work / "isolated-hit.json"), env={**env, "TRITON_DIST_AUTOTUNE_DIR": str(root)})
    bad = entry["candidates"][1]
    return {"attempts": attempts, "known_failures": known, "best": entry["best"],
            "candidate1": bad, "hit": hit,
            "held": (hit.get("host_calls") == 1 and hit.get("correct") is True and (dry_run or (
                len(attempts) == 2 and bad["time_ms"] is None and entry["best"]["index"] != 1)))}


def phase_ray(work: Path, env: dict, dry_run: bool) -> dict:
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        return {"skipped": f"Ray is not importable here ({exc}); unpack .device/ray-py312.tar.xz"}
    root = work / "ray-cache"
    report_dir = work / "ray-report"
    campaign = work / "crash.yaml"
    lines = ["name: crash-isolation", f"device: {'cpu' if dry_run else 'cuda'}", "retries: 2",
             "case_timeout_s: 300", "placement_timeout_s: 120", f"report_dir: {report_dir}",
             "check_correctness: true", "env:",
             f"  TD_CRASH_OOB: \"{'0' if dry_run else '1'}\"",
             f"  TRITON_INTERPRET: \"{env.get('TRITON_INTERPRET', '0')}\"",
             "targets:", "  - function: crash_target:crash_copy", "    args: crash_target:make_args",
             "    world_size: 1", "    cases:", f"      - {{n: {N}}}"]
    campaign.write_text("\n".join(lines) + "\n")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ray_runner", "run", str(campaign), "--cache-dir", str(root),
                           "--no-progress"], env={**env, "TRITON_DIST_AUTOTUNE_DIR": str(root)},
                          capture_output=True, text=True, timeout=900)
    (work / "ray_runner.log").write_text(proc.stdout + proc.stderr)
    reports = sorted(report_dir.glob("*.json"))
    report = json.loads(reports[0].read_text()) if reports else {}
    case = (report.get("cases") or [{}])[0] if isinstance(report.get("cases"), list) else {}
    hit = _child("_hit", str(work / "ray-hit.json"), env={**env, "TRITON_DIST_AUTOTUNE_DIR": str(root)})
    copies = root / "crash_copy"
    entries = [json.loads(p.read_text()) for p in copies.glob("*.json")] if copies.exists() else []
    bad = entries[0]["candidates"][1] if entries else {}
    result = {"exit": proc.returncode, "seconds": round(time.monotonic() - start, 1), "case": case,
              "candidate1": bad, "hit": hit, "log_tail": (proc.stdout + proc.stderr)[-2000:]}
    retried = dry_run or (case.get("attempts", 0) >= 2 and "1" in (case.get("known_failures") or {}))
    result["held"] = (proc.returncode == 0 and retried and hit.get("host_calls") == 1
                      and hit.get("correct") is True and (dry_run or bad.get("time_ms") is None))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"crash-isolation-{os.getpid()}"
    work.mkdir(parents=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parents[1]), env.get("PYTHONPATH", "")])
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if args.dry_run:
        global N
        N = 4096  # the interpreter is slow: a small case
        env.update(TD_CRASH_OOB="0", TRITON_INTERPRET="1", TRITON_DIST_DEVICE="cpu", TD_CRASH_N=str(N))
    summary: dict = {"dry_run": args.dry_run}
    summary["inline"] = phase_inline(work, env)
    summary["isolated"] = phase_isolated(work, env, args.dry_run)
    summary["ray"] = phase_ray(work, env, args.dry_run)
    ran = [p for p in ("inline", "isolated", "ray") if "held" in summary[p]]
    summary["ok"] = all(summary[p]["held"] for p in ran if not (args.dry_run and p == "inline"))
    text = json.dumps(summary, indent=2, default=str)
    (args.out / "crash_isolation.json").write_text(text + "\n")
    print(text)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    if len(sys.argv) > 1 and sys.argv[1] == "_inline":
        child_inline(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "_attempt":
        child_attempt(*sys.argv[2:5])
    elif len(sys.argv) > 1 and sys.argv[1] == "_hit":
        child_hit(sys.argv[2])
    else:
        sys.exit(main())
