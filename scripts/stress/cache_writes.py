"""R1 stress: N processes x M writes into one function directory, same and different keys.

    python scripts/stress/cache_writes.py [--procs 16] [--writes 200] [--tuners 2] [--readers 1]
                                          [--root DIR] [--json OUT]

Most writers write real entries (``build_entry`` of the function below, through
``_cache.write_entry``); ``--tuners`` of them really tune it through the public
``AutoTuner.tune`` (with ``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1``). Readers read every final file
while the writers run. Afterwards: every file (final and history) parses; for every key the
final file plus its history hold each written entry exactly once, in an order consistent with
real time, so the final file is the last writer's; a fresh process calling the public API hits
every key with the final file's best config. Prints a JSON summary; exit status 1 on any loss.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

from triton_dist._store import files as _cache
from triton_dist.tune import autotune

SPACE = [{"block": b} for b in (1, 2, 4, 8)]
SHARED_KEYS = 4
PRIVATE_KEYS = 3
CALLS = [0]


def _key(n, tag):
    return (tag, n)


@autotune(SPACE, _key, n_warmup=1, n_repeat=2)
def stress_fn(n, tag, block):
    CALLS[0] += 1
    return sum(range(n * block))


def key_args(wid: int, rng: random.Random) -> tuple[int, str]:
    if rng.random() < 0.5:
        return rng.randrange(SHARED_KEYS), "shared"
    return rng.randrange(PRIVATE_KEYS), f"p{wid}"


def token(entry: dict) -> str:
    return hashlib.sha256(_cache.dumps_entry(entry).encode()).hexdigest()[:24]


def writer(wid: int, root: Path, writes: int, tune: bool, out: Path) -> None:
    from triton_dist import _tuning
    from triton_dist._backends import get_backend
    from triton_dist._measure.result import CandidateResult

    rng = random.Random(wid)
    backend = get_backend()
    records = []
    for seq in range(writes):
        n, tag = key_args(wid, rng)
        start = time.time_ns()
        if tune:
            entry = stress_fn.tune(n, tag, cache_dir=root)
        else:
            times = [rng.uniform(0.5, 2.0) for _ in SPACE]
            results = [CandidateResult(i, t, 0.01, [t]) for i, t in enumerate(times)]
            best = min(range(len(SPACE)), key=times.__getitem__)
            entry = _tuning.build_entry(stress_fn.target, _cache.key_repr(_key(n, tag)), results,
                                        best, 0.1, backend, None)
            entry["stress_token"] = f"{wid}-{seq}"
            _cache.write_entry(root, entry)
        records.append({"key": [n, tag], "id": entry["id"], "token": token(entry),
                        "best": entry["best"]["index"], "start": start, "end": time.time_ns()})
    out.write_text(json.dumps(records))


def reader(root: Path, stop: Path, out: Path) -> None:
    fn_dir = root / "stress_fn"
    reads, bad = 0, []
    while not stop.exists():
        for path in sorted(fn_dir.glob("*.json")) if fn_dir.exists() else []:
            data, why = _cache.load_json(path, root)
            reads += 1
            if data is None and why != "missing":
                bad.append(f"{path.name}: {why}")
        time.sleep(0.001)
    out.write_text(json.dumps({"reads": reads, "bad": bad[:20], "n_bad": len(bad)}))


def verify_api(root: Path, expect: Path, out: Path) -> None:
    """In a fresh process: every key hits (one host call) with the final file's best config."""
    mismatches = []
    for item in json.loads(expect.read_text()):
        n, tag = item["key"]
        before = CALLS[0]
        stress_fn(n, tag)
        best = stress_fn.best_config(n, tag)
        if CALLS[0] - before != 1 or best != SPACE[item["best"]]:
            mismatches.append({"key": item["key"], "calls": CALLS[0] - before, "best": best,
                               "expected": SPACE[item["best"]]})
    out.write_text(json.dumps({"checked": len(json.loads(expect.read_text())), "mismatches": mismatches}))


def _history_order(name: str) -> tuple[str, int]:
    stamp = name.split(".")[1]  # <id>.<stamp>[-n].json
    base, _, n = stamp.partition("-")
    return base, int(n or 0)


def check(root: Path, records: list[dict]) -> dict:
    fn_dir = root / "stress_fn"
    unparseable, finals, history = [], {}, {}
    for path in sorted(fn_dir.glob("*.json")) + sorted((fn_dir / "history").glob("*.json")):
        data, why = _cache.load_json(path, root)
        if data is None:
            unparseable.append(f"{path.name}: {why}")
            continue
        if path.parent.name == "history":
            history.setdefault(data["id"], []).append((_history_order(path.name), token(data)))
        else:
            finals[data["id"]] = token(data)
    by_id: dict[str, list[dict]] = {}
    for r in records:
        by_id.setdefault(r["id"], []).append(r)
    lost = duplicated = order_violations = unknown = 0
    expect = []
    for eid, writes in by_id.items():
        order = [t for _, t in sorted(history.get(eid, []))] + ([finals[eid]] if eid in finals else [])
        written = {r["token"]: r for r in writes}
        lost += len(set(written) - set(order))
        duplicated += len(order) - len(set(order))
        unknown += len(set(order) - set(written))
        latest_start = 0
        for t in order:  # a write that ended before an earlier-placed one started is out of order
            r = written.get(t)
            if r is None:
                continue
            if r["end"] < latest_start:
                order_violations += 1
            latest_start = max(latest_start, r["start"])
        if eid in finals and finals[eid] in written:
            expect.append({"key": writes[0]["key"], "best": written[finals[eid]]["best"]})
    leftovers = [p.name for p in fn_dir.rglob("*.tmp")]
    return {"keys": len(by_id), "final_files": len(finals),
            "history_files": sum(len(v) for v in history.values()), "unparseable_files": unparseable[:20],
            "n_unparseable": len(unparseable), "lost": lost, "duplicated": duplicated,
            "unknown_entries": unknown, "order_violations": order_violations,
            "leftover_temp_files": len(leftovers), "expect": expect}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--tuners", type=int, default=2, help="of --procs, how many really tune")
    ap.add_argument("--readers", type=int, default=1)
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--json", default=None, help="also write the summary here")
    ap.add_argument("--timeout", type=float, default=1800.0)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="td-stress-r1-"))
    root = args.root or work / "cache"
    env = _common.child_env(root, TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1")
    script = Path(__file__).resolve()
    t0 = time.monotonic()
    stop = work / "stop"
    readers = [_common.spawn(script, "_reader", root, stop, work / f"reader{i}.json", env=env)
               for i in range(args.readers)]
    writers = [_common.spawn(script, "_writer", wid, root, args.writes, int(wid < args.tuners),
                             work / f"writer{wid}.json", env=env) for wid in range(args.procs)]
    deadline = time.monotonic() + args.timeout
    codes = [p.wait(max(1.0, deadline - time.monotonic())) for p in writers]
    stop.touch()
    for p in readers:
        p.wait(60)
    elapsed = time.monotonic() - t0
    records = [r for wid in range(args.procs) if (work / f"writer{wid}.json").exists()
               for r in json.loads((work / f"writer{wid}.json").read_text())]
    result = check(root, records)
    expect = work / "expect.json"
    expect.write_text(json.dumps(result.pop("expect")))
    api = _common.spawn(script, "_verify", root, expect, work / "api.json",
                        env=_common.child_env(root))
    api.wait(600)
    api_result = json.loads((work / "api.json").read_text()) if (work / "api.json").exists() else \
        {"checked": 0, "mismatches": ["the verifying process failed"]}
    reads = [json.loads((work / f"reader{i}.json").read_text()) for i in range(args.readers)
             if (work / f"reader{i}.json").exists()]
    summary = {
        "promise": "R1: concurrent writers lose nothing; every file parses; last writer wins",
        "procs": args.procs, "writes_per_proc": args.writes, "tuner_procs": min(args.tuners, args.procs),
        "writer_failures": sum(c != 0 for c in codes), "total_writes": len(records), **result,
        "reader_reads": sum(r["reads"] for r in reads),
        "reader_bad_reads": sum(r["n_bad"] for r in reads) + (args.readers - len(reads)),
        "reader_examples": [b for r in reads for b in r["bad"]][:5],
        "api_checked": api_result["checked"], "api_mismatches": api_result["mismatches"][:10],
        "elapsed_s": round(elapsed, 1), "work_dir": str(work),
    }
    summary["ok"] = (summary["writer_failures"] == 0 and len(records) == args.procs * args.writes
                     and not any(summary[k] for k in ("n_unparseable", "lost", "duplicated",
                                                      "unknown_entries", "order_violations",
                                                      "leftover_temp_files", "reader_bad_reads",
                                                      "api_mismatches"))
                     and summary["api_checked"] == summary["keys"])
    return _common.finish(summary, args.json)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_writer":
        _, _, wid, root, writes, tune, out = sys.argv
        writer(int(wid), Path(root), int(writes), tune == "1", Path(out))
    elif len(sys.argv) > 1 and sys.argv[1] == "_reader":
        reader(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_verify":
        verify_api(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        sys.exit(main())
