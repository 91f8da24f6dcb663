"""R2 stress: cache writers killed with SIGKILL, at random moments and at chosen points.

    python scripts/stress/kill_writers.py [--kills 100] [--point-repeats 3] [--concurrent 4]
                                          [--root DIR] [--json OUT]

Phase 1: ``--concurrent`` writers write real entries for 3 shared keys in a loop; each is killed
at a random moment of its writing (uniform within ~ten writes) and replaced, ``--kills`` times,
while a reader reads every final file. Phase 2: a writer kills itself at each chosen point of the
write path (lock held, after the history link, half-written temp file, before fsync, before and
after the rename), ``--point-repeats`` times each; after each death the entry's lock file is
still there, and the parent takes the ``flock`` on it at once (the kernel released it) and a
fresh writer writes. Afterwards: no final name ever showed a partial or empty file, every file
parses, every write a writer completed is in the final file or history, stale lock and temp
files blocked nothing, and the public API hits every key. Prints a JSON summary.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

from triton_dist._store import files as _cache

KEYS = 3
POINTS = ("locked", "history-linked", "temp-partial", "before-fsync", "before-replace", "after-replace")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(point: str) -> None:
    """Make this process SIGKILL itself at ``point`` of ``_cache.write_entry``."""
    real_link, real_replace, real_fdopen = os.link, os.replace, os.fdopen
    if point == "locked":
        lock_for = _cache._lock_for

        class DyingLock:  # the entry's lock taken, then the writer dies holding it
            def __init__(self, path):
                self.lock = lock_for(path)
                self.lock_file = self.lock.lock_file

            def acquire(self, timeout=None):
                self.lock.acquire(timeout=timeout)
                _die()

            def release(self):
                self.lock.release()

        _cache._lock_for = DyingLock
    elif point == "history-linked":
        os.link = lambda *a, **k: (real_link(*a, **k), _die())
    elif point == "before-fsync":
        os.fsync = lambda fd: _die()
    elif point == "before-replace":
        os.replace = lambda *a, **k: _die()
    elif point == "after-replace":
        os.replace = lambda *a, **k: (real_replace(*a, **k), _die())
    elif point == "temp-partial":
        def fdopen(fd, *a, **k):
            f = real_fdopen(fd, *a, **k)
            write = f.write

            def half(text):
                write(text[: len(text) // 2])
                f.flush()
                _die()
            f.write = half
            return f
        os.fdopen = fdopen


def writer(root: Path, template: Path, wid: int, count: int, point: str, log: Path) -> None:
    """Write entries for the shared keys (``count`` of them, or forever with 0); log each token
    after ``write_entry`` returned (so the log lists completed writes only)."""
    base = json.loads(template.read_text())
    rng = random.Random(wid)
    if point != "none":
        _arm(point)
    with open(log, "a", encoding="utf-8") as out:
        print("ready", flush=True)
        seq = 0
        while count == 0 or seq < count:
            k = rng.randrange(KEYS) if point == "none" else 0
            entry = dict(base, **base["variants"][k], stress_token=f"{wid}-{seq}")
            entry.pop("variants")
            _cache.write_entry(root, entry)
            out.write(f"{entry['stress_token']}\n")
            out.flush()
            seq += 1


def reader(root: Path, fn_dir: Path, stop: Path, out: Path) -> None:
    reads, bad = 0, []
    while not stop.exists():
        for path in sorted(fn_dir.glob("*.json")) if fn_dir.exists() else []:
            data, why = _cache.load_json(path, root)
            reads += 1
            if data is None and why != "missing":
                bad.append(f"{path.name}: {why}")
    out.write_text(json.dumps({"reads": reads, "bad": bad[:20], "n_bad": len(bad)}))


def make_template(root: Path, out: Path) -> tuple[object, list[tuple]]:
    """A real entry of a really tuned function, and its variants for KEYS keys."""
    from triton_dist._store import files as cache
    from triton_dist.tune import autotune

    @autotune([{"b": 1}, {"b": 2}, {"b": 3}], lambda n: ("n", n), n_warmup=1, n_repeat=2)
    def killed_fn(n, b):
        return n * b

    variants, args = [], []
    for n in range(KEYS):
        entry = killed_fn.tune(n, cache_dir=root)
        variants.append({"id": entry["id"], "key": entry["key"]})
        args.append((n,))
    for path in (root / "killed_fn").glob("*"):
        if path.is_file():
            path.unlink()
    out.write_text(cache.dumps_entry({**entry, "variants": variants}))
    return killed_fn, args


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--point-repeats", type=int, default=3)
    ap.add_argument("--concurrent", type=int, default=4)
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="td-stress-r2-"))
    root = args.root or work / "cache"
    os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(root)
    fn, call_args = make_template(root, work / "template.json")
    fn_dir = root / "killed_fn"
    env = _common.child_env(root)
    script = Path(__file__).resolve()
    t0 = time.monotonic()
    stop = work / "stop"
    rd = _common.spawn(script, "_reader", root, fn_dir, stop, work / "reader.json", env=env)
    rng = random.Random(0)
    logs: list[Path] = []
    failures: list[str] = []

    def start(wid: int, count: int = 0, point: str = "none"):
        log = work / f"writer{wid}.log"
        logs.append(log)
        p = _common.spawn(script, "_writer", root, work / "template.json", wid, count, point, log,
                          env=env, stdout=subprocess.PIPE, text=True)
        if p.stdout.readline().strip() != "ready":
            failures.append(f"writer {wid} did not start")
        return p

    # phase 1: random moments
    wid, kills, live = 0, 0, []
    while kills < args.kills:
        while len(live) < args.concurrent:
            live.append(start(wid))
            wid += 1
        victim = live.pop(rng.randrange(len(live)))
        time.sleep(rng.uniform(0.0, 0.03))
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        kills += 1
    for p in live:
        p.kill()
        p.wait(30)

    # phase 2: chosen points; the lock is released by the kernel on death (flock, not a pid file)
    lock_path = fn_dir / ".locks" / f"{json.loads((work / 'template.json').read_text())['variants'][0]['id']}.lock"
    point_deaths, lock_taken, fresh_writes = 0, 0, 0
    for point in POINTS:
        for _ in range(args.point_repeats):
            p = start(wid, count=1, point=point)
            wid += 1
            code = p.wait(60)
            point_deaths += code == -signal.SIGKILL
            if code != -signal.SIGKILL:
                failures.append(f"point {point}: writer exited with {code}, not SIGKILL")
            if not lock_path.exists():
                failures.append(f"point {point}: no lock file left behind")
            else:
                with open(lock_path, "a") as f:
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # immediately, or it was kept
                        fcntl.flock(f, fcntl.LOCK_UN)
                        lock_taken += 1
                    except BlockingIOError:
                        failures.append(f"point {point}: the dead writer's lock is still held")
            q = start(wid, count=1)  # a fresh writer is not blocked by stale lock or temp files
            wid += 1
            if q.wait(120) == 0:
                fresh_writes += 1
            else:
                failures.append(f"point {point}: the next writer failed")
    stop.touch()
    rd.wait(60)
    elapsed = time.monotonic() - t0

    # what is on disk now
    completed = {line for log in logs if log.exists() for line in log.read_text().split()}
    found, unparseable, empty_finals = [], [], 0
    for path in sorted(fn_dir.glob("*.json")) + sorted((fn_dir / "history").glob("*.json")):
        if path.stat().st_size == 0 and path.parent == fn_dir:
            empty_finals += 1
        data, why = _cache.load_json(path, root)
        if data is None:
            unparseable.append(f"{path.relative_to(fn_dir)}: {why}")
        else:
            found.append(data.get("stress_token"))
    lost = sorted(completed - set(found))
    reads = json.loads((work / "reader.json").read_text()) if (work / "reader.json").exists() \
        else {"reads": 0, "n_bad": 1, "bad": ["the reader died"]}
    # the public API: a call per key hits the cache (no "ignoring cache file" warning)
    from triton_dist.settings import override

    fn.clear()  # forget what make_template decided in memory: read the files
    api_misses = 0
    with warnings.catch_warnings(record=True) as caught, override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"):
        warnings.simplefilter("always")
        for a in call_args:
            try:
                fn(*a)
            except Exception as exc:  # noqa: BLE001 - strict cache-only: a miss raises
                failures.append(f"public API missed key {a}: {exc}")
                api_misses += 1
    api_misses += sum("ignoring cache file" in str(w.message) for w in caught)
    summary = {
        "promise": "R2: SIGKILLed writers leave no partial/empty file under a final name; stale "
                   "locks/temp files block nothing",
        "random_kills": kills, "point_kills": point_deaths, "points": list(POINTS),
        "point_repeats": args.point_repeats, "concurrent_writers": args.concurrent,
        "completed_writes": len(completed), "lost_completed_writes": len(lost), "lost_examples": lost[:5],
        "files_checked": len(found) + len(unparseable), "unparseable_files": unparseable[:10],
        "n_unparseable": len(unparseable), "empty_final_files": empty_finals,
        "reader_reads": reads["reads"], "reader_bad_reads": reads["n_bad"], "reader_examples": reads["bad"][:5],
        "stale_temp_files": len(list(fn_dir.glob(".*.tmp"))) + len(list((fn_dir / "history").glob(".*.tmp"))),
        "stale_lock_files": len(list((fn_dir / ".locks").glob("*.lock"))),
        "lock_taken_after_death": lock_taken, "fresh_writes_after_death": fresh_writes,
        "api_warnings": api_misses, "failures": failures[:10], "elapsed_s": round(elapsed, 1),
        "work_dir": str(work),
    }
    summary["ok"] = (not failures and not lost and not unparseable and not empty_finals
                     and not reads["n_bad"] and not api_misses
                     and lock_taken == fresh_writes == len(POINTS) * args.point_repeats)
    return _common.finish(summary, args.json)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_writer":
        _, _, root, template, wid, count, point, log = sys.argv
        writer(Path(root), Path(template), int(wid), int(count), point, Path(log))
    elif len(sys.argv) > 1 and sys.argv[1] == "_reader":
        reader(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))
    else:
        sys.exit(main())
