"""A job that runs for days: memory, references and cost of a tuned function over many keys.

Figures only (nothing asserted; the defects these found have tests in tests/unit/test_references.py
and tests/reliability/test_exits.py). A cheap host function (``n + c``, 2 configs, 1 timed run),
so that what is measured is the tuner's own state and cost:

- ``keys``: N distinct keys tuned in one process (a key per exact sequence length): the Python
  memory the tuner holds per key (tracemalloc, after a collection), the process's RSS, the wall
  per tuning and the disk per key (files and allocated bytes);
- ``hit``: a hit's cost with 1 key decided and with N (the same process, rounds taking turns;
  min and median over rounds), and a loop over all N keys in random order (cache misses);
- ``first_call``: fresh processes on the root the N keys left, and on an empty one: the first
  call of a new key (a miss: the key log and folder are read once per process and function) and
  the next call of a key on disk (a hit);
- ``held``: first calls of new 4 MB tensors, a key each, with the collector on: how many of those
  tensors are still alive (peak, end) once the caller has dropped them (before 78a517a: up to 47);
- ``exit``: processes that exit right after a tuning, normally or by ``os._exit``: how many synced
  their entry first (the fsync thread is a daemon; before 3a78dc8 a normal exit dropped it in
  4 of 5 runs).

``--keys N`` (default 10,000; ``--quick``: 200).
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve().parent


def _tuned(name: str = "op") -> Any:
    from triton_dist.tune import autotune

    def host(n: int, c: int) -> int:
        return n + c

    host.__name__ = host.__qualname__ = name
    return autotune(config_space=[{"c": 0}, {"c": 1}], key_fn=lambda n, *a, **k: n, n_warmup=0, n_repeat=1)(host)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _disk(root: Path) -> tuple[int, int]:
    size = files = 0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                size += os.stat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                continue
            files += 1
    return size, files


def _loop_ns(fn: Any, keys: list[int], reps: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(reps):
        for key in keys:
            fn(key)
    return (time.perf_counter_ns() - start) / (reps * len(keys))


def keys_and_hits(n: int, root: Path, rounds: int) -> dict[str, Any]:
    one, many = _tuned("one"), _tuned("op")
    one(0)
    many(-1)
    gc.collect()
    tracemalloc.start()
    traced0, rss0 = tracemalloc.get_traced_memory()[0], _rss_mib()
    start = time.perf_counter()
    for key in range(n):
        many(key)
    wall = time.perf_counter() - start
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - traced0
    top = [str(s) for s in tracemalloc.take_snapshot().statistics("filename")[:6]]
    tracemalloc.stop()
    size, files = _disk(root / "op")
    hit_one, hit_many = [], []
    for _ in range(rounds):  # taking turns: both see the same machine state
        hit_one.append(_loop_ns(one, [0], 100_000))
        hit_many.append(_loop_ns(many, [n // 2], 100_000))
    order = list(range(n))
    random.Random(0).shuffle(order)
    cycling = [_loop_ns(many, order, max(1, 100_000 // n)) for _ in range(max(3, rounds // 3))]
    return {"keys": n, "tuning_ms": wall / n * 1e3, "traced_bytes_per_key": traced / n,
            "rss_mib": _rss_mib() - rss0, "disk_bytes_per_key": size / (n + 1), "disk_files": files,
            "top_allocations": top,
            "hit_1_key_ns": [min(hit_one), statistics.median(hit_one)],
            "hit_n_keys_ns": [min(hit_many), statistics.median(hit_many)],
            "hit_all_keys_random_ns": [min(cycling), statistics.median(cycling)]}


def held_tensors(n: int) -> dict[str, Any]:
    import torch

    from triton_dist.tune import autotune

    @autotune(config_space=[{"c": 0}, {"c": 1}], key_fn=lambda x, *a, **k: x.shape[0], n_warmup=0, n_repeat=1)
    def first(x: Any, c: int) -> Any:
        return x[:1] + c

    refs: list[weakref.ref[Any]] = []
    peak = 0
    for i in range(n):
        x = torch.empty((1 << 20) - i)  # 4 MB, a new length: a new key
        first(x)
        refs.append(weakref.ref(x))
        del x
        peak = max(peak, sum(r() is not None for r in refs))
    return {"first_calls": n, "peak_alive": peak, "alive_at_end": sum(r() is not None for r in refs)}


def child(mode: str, keys: list[int]) -> None:
    """In a fresh process: the first calls (``first``), or a tuning and an exit (``exit-*``)."""
    if mode.startswith("exit"):
        synced, real = os.environ["LONG_JOB_SYNCED"], os.fsync

        def recorded(fd: int) -> None:
            real(fd)
            with open(synced, "a") as f:
                f.write(os.readlink(f"/proc/self/fd/{fd}") + "\n")

        os.fsync = recorded
    from triton_dist import _triton_prewarm

    op = _tuned("op")
    _triton_prewarm.wait()
    gc.collect()
    times = []
    for key in keys:
        start = time.perf_counter()
        op(key)
        times.append((time.perf_counter() - start) * 1e3)
    if mode == "exit-os._exit":
        os._exit(0)
    print(" ".join(f"{t:.3f}" for t in times))


def _run_child(mode: str, root: Path, keys: list[int], **extra: str) -> list[float]:
    env = dict(os.environ, TRITON_DIST_AUTOTUNE_DIR=str(root), **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(common.REPO), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", mode, *map(str, keys)],
                         env=env, capture_output=True, text=True, timeout=600, check=True)
    return [float(t) for t in out.stdout.split()]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(argv[1], [int(k) for k in argv[2:]])
        return {}
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--processes", type=int, default=3)
    args = p.parse_args(argv)
    n = 200 if args.quick else args.keys
    processes = 1 if args.quick else args.processes
    root = common.private_cache_dir()
    results: dict[str, Any] = {"keys": keys_and_hits(n, root, 5 if args.quick else 15)}
    k = results["keys"]
    print(f"{n} keys: {k['tuning_ms']:.2f} ms per tuning, {k['traced_bytes_per_key']:.0f} B per key traced, "
          f"RSS +{k['rss_mib']:.1f} MiB, disk {k['disk_bytes_per_key'] / 1024:.1f} KiB per key "
          f"({k['disk_files']} files)")
    print("  largest:", *k["top_allocations"], sep="\n    ")
    print(f"hit (min/median ns): 1 key {k['hit_1_key_ns'][0]:.0f}/{k['hit_1_key_ns'][1]:.0f}, {n} keys "
          f"{k['hit_n_keys_ns'][0]:.0f}/{k['hit_n_keys_ns'][1]:.0f}, all {n} keys in random order "
          f"{k['hit_all_keys_random_ns'][0]:.0f}/{k['hit_all_keys_random_ns'][1]:.0f}")
    empty = Path(tempfile.mkdtemp(prefix="triton-dist-long-job-empty-"))
    rows = []
    for i in range(processes):  # taking turns
        full = _run_child("first", root, [10 * n + i, n // 2])
        none = _run_child("first", empty, [20 * n + i, 20 * n + i])
        rows.append({"new_key_n_on_disk_ms": full[0], "disk_hit_ms": full[1], "new_key_empty_ms": none[0],
                     "memory_hit_ms": none[1]})
    results["first_call"] = rows
    for name in rows[0]:
        print(f"fresh process, {name}: " + ", ".join(f"{r[name]:.1f}" for r in rows))
    results["held"] = held_tensors(50 if args.quick else 300)
    print(f"first calls of new 4 MB tensors, collector on: {results['held']}")
    exits: dict[str, int] = {}
    for how in ("exit-normal", "exit-os._exit"):
        synced_runs = 0
        for i in range(2 if args.quick else 5):
            folder = Path(tempfile.mkdtemp(prefix="triton-dist-long-job-exit-"))
            _run_child(how, folder / "cache", [i], LONG_JOB_SYNCED=str(folder / "synced"))
            synced = (folder / "synced").read_text() if (folder / "synced").exists() else ""
            synced_runs += any(line.endswith(".json") for line in synced.splitlines())
        exits[how] = synced_runs
    results["exit"] = exits
    print("processes that synced their entry before exiting: " + ", ".join(f"{h}: {c}" for h, c in exits.items()))
    summary = {"traced_bytes_per_key": k["traced_bytes_per_key"], "hit_1_key_ns": k["hit_1_key_ns"][0],
               "hit_n_keys_ns": k["hit_n_keys_ns"][0],
               "first_new_key_n_on_disk_ms": statistics.median(r["new_key_n_on_disk_ms"] for r in rows),
               "first_new_key_empty_ms": statistics.median(r["new_key_empty_ms"] for r in rows),
               "held_peak_alive": results["held"]["peak_alive"]}
    common.write_result("long_job", args, {"keys": n, "processes": processes}, results, summary)
    return results


if __name__ == "__main__":
    main()
