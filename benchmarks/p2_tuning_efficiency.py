"""P2 tuning efficiency: wall time of one tuning against the ideal, sum of kernel time x runs.

For each workload size, ``AutoTuner.tune(force=True, write_cache=False)`` with the defaults (graph
replay on CUDA/NPU, the seed's 5 + 10 eager runs on the CPU), the whole miss path (the same plus
writing the cache entry and the tuning log), the same without the in-place guard
(``restore_inplace=False``), the seed's eager schedule (``graphs=False``) and **the real first
call** (``tuned(*args)`` with nothing in memory or on disk: tuning, the entry's write and the
call itself) are timed ``--repeats`` times each after a first, untimed tuning (which compiles the
kernels); the median wall time is divided by the ideal: sum over the kept configs of the runs the
device executed x the config's oracle time (plus the call's own run for the first call).
On a GPU, plain ``triton.autotune`` tuning the same kernel and configs for a new key is timed too
(its own schedule: time-based warm-up and repetitions), against the same ideal.

Target (issue 8, H200): wall / ideal <= 1.05 for kernels >= 30 us. On the CPU the workloads are
host functions of known cost (busy-waiting), ``spin`` here.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from typing import Any

import common
import workloads as wl

from triton_dist._backends import get_backend
from triton_dist.tune import autotune

LONG_KERNEL_MS = 0.030


def triton_autotune_wall(workload: wl.Workload, size: int, args: tuple, backend: Any) -> float | None:
    """Seconds plain triton.autotune takes to tune this key (same kernel, same configs)."""
    import triton

    if workload.name != "elementwise":
        return None
    import torch

    from examples import scale

    kernel = triton.autotune([c["cfg"] for c in workload.space], key=["n"])(scale.scale_kernel)
    x, alpha = args
    y = torch.empty_like(x)
    n = x.numel()

    def call() -> None:
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, alpha, n)

    call()  # tune once (compiled already), then time a fresh tuning of the same key
    kernel.cache.clear()
    backend.synchronize()
    start = time.perf_counter()
    call()
    backend.synchronize()
    return time.perf_counter() - start


def first_call_wall(tuner: Any, call_args: tuple, backend: Any) -> tuple[float, dict[str, Any] | None]:
    """Seconds of the real first call (nothing in memory, an empty cache directory) and the entry
    it wrote."""
    import json
    import os
    import tempfile
    from pathlib import Path

    previous = os.environ.get("TRITON_DIST_AUTOTUNE_DIR")
    root = tempfile.mkdtemp(prefix="triton-dist-p2-first-")
    os.environ["TRITON_DIST_AUTOTUNE_DIR"] = root
    try:
        tuner.clear()
        backend.synchronize()
        start = time.perf_counter()
        tuner(*call_args)
        backend.synchronize()
        wall = time.perf_counter() - start
        files = [p for p in Path(root).rglob("*.json") if "history" not in p.parts]
        return wall, json.loads(files[0].read_text()) if files else None
    finally:
        if previous is not None:
            os.environ["TRITON_DIST_AUTOTUNE_DIR"] = previous


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    common.private_cache_dir()
    backend = get_backend()
    repeats = 1 if args.quick else args.repeats
    if backend.kind == "cpu":
        costs = [30.0, 100.0] if args.quick else [10.0, 30.0, 100.0, 300.0, 1000.0]
        workloads = [wl.spin_workload(costs)]
    else:
        workloads = wl.gpu_workloads(backend.device(), args.quick)
    rows = []
    for workload in workloads:
        host, counts = workload.counted()
        tuner = autotune(workload.space, workload.key_fn, workload.prune_fn)(host)
        # the same without the in-place guard (snapshots and first-run comparisons of the
        # tensor arguments, issue 7): what that safety costs the tuning wall
        bare = autotune(workload.space, workload.key_fn, workload.prune_fn, restore_inplace=False)(host)
        # the seed's eager schedule (graph replay is the default on devices with graphs)
        graphed = (autotune(workload.space, workload.key_fn, workload.prune_fn, graphs=False)(host)
                   if backend.graphs else None)
        for size in workload.sizes:
            call_args = workload.make_args(size)
            tuner.tune(*call_args, force=True)  # compiles; not timed
            oracle = workload.oracle_ms(size, call_args)
            if graphed is not None:
                graphed.tune(*call_args, force=True, write_cache=False)  # its first capture
            walls: dict[str, list[float]] = {"tune": [], "miss": [], "no_guard": [], "graphs": [], "first": []}
            ideals: dict[str, float] = {}
            # each tuning against its own ideal: graph mode's runs per sample (k) can differ by one
            # between tunings of the same key, and with it the device work (run 3: k = 8 or 9)
            ratios: dict[str, list[float]] = {what: [] for what in walls}
            runs_per_config = 0
            for _ in range(repeats):
                for what, write, which in (("tune", False, tuner), ("miss", True, tuner), ("no_guard", False, bare),
                                           ("graphs", False, graphed)):
                    if which is None:
                        continue
                    counts.clear()
                    backend.synchronize()
                    start = time.perf_counter()
                    entry = which.tune(*call_args, force=True, write_cache=write)
                    backend.synchronize()
                    walls[what].append(time.perf_counter() - start)
                    # the runs the device executed per config (a graph replay of k runs counts
                    # k; the host function is called only to capture), else the calls counted
                    runs = {c["index"]: c["runs"] for c in entry["candidates"] if c.get("runs")} or dict(counts)
                    ideals[what] = sum(oracle[i] * n for i, n in runs.items() if math.isfinite(oracle[i])) / 1e3
                    ratios[what].append(walls[what][-1] / ideals[what])
                    if what == "tune":
                        runs_per_config = max(runs.values())
                first, entry = first_call_wall(tuner, call_args, backend)
                walls["first"].append(first)
                runs = {c["index"]: c["runs"] for c in entry["candidates"] if c.get("runs")} if entry else {}
                if runs:  # its runs, then the call's own run of the chosen config
                    ideal = sum(oracle[i] * n for i, n in runs.items() if math.isfinite(oracle[i]))
                    ratios["first"].append(first / ((ideal + oracle[entry["best"]["index"]]) / 1e3))
            kept = list(counts)
            ideal_s = ideals["tune"]
            wall = statistics.median(walls["tune"])
            miss_wall = statistics.median(walls["miss"])
            bare_wall = statistics.median(walls["no_guard"])
            kernel_ms = statistics.median(oracle[i] for i in kept)
            graph_wall = statistics.median(walls["graphs"]) if walls["graphs"] else None
            graph_ratio = graph_wall / ideals["graphs"] if graph_wall else None
            first_wall = statistics.median(walls["first"])
            at_wall = triton_autotune_wall(workload, size, call_args, backend) if backend.kind == "cuda" else None
            row = {"workload": workload.name, "size": size, "configs": len(kept),
                   "runs_per_config": runs_per_config, "kernel_ms_median": kernel_ms,
                   "ideal_s": ideal_s, "wall_s": wall, "walls_s": walls, "ratios": ratios,
                   "ratio": statistics.median(ratios["tune"]),
                   "miss_wall_s": miss_wall, "miss_ratio": statistics.median(ratios["miss"]),
                   "no_guard_wall_s": bare_wall, "no_guard_ratio": statistics.median(ratios["no_guard"]),
                   "graphs_wall_s": graph_wall, "graphs_ideal_s": ideals.get("graphs"), "graphs_ratio": graph_ratio,
                   "first_call_wall_s": first_wall,
                   "first_call_ratio": statistics.median(ratios["first"]) if ratios["first"] else None,
                   "triton_autotune_wall_s": at_wall,
                   "triton_autotune_ratio": at_wall / ideal_s if at_wall else None}
            rows.append(row)
            print(f"{workload.name:12s} size {size:>9}: kernel {kernel_ms * 1e3:9.2f} us x {len(kept)} configs x "
                  f"{runs_per_config} runs: ideal {ideal_s * 1e3:9.3f} ms, wall {wall * 1e3:9.3f} ms, "
                  f"ratio {row['ratio']:6.3f} (with the cache write {row['miss_ratio']:6.3f})"
                  + (f"; graphs=False {graph_wall * 1e3:9.3f} ms, ratio {graph_ratio:6.3f}" if graph_wall else "")
                  + (f"; triton.autotune {at_wall * 1e3:9.1f} ms ({at_wall / ideal_s:.1f}x ideal)" if at_wall else ""),
                  flush=True)
    long_rows = [r for r in rows if r["kernel_ms_median"] >= LONG_KERNEL_MS]
    summary = {
        "max_ratio_long_kernels": max((r["ratio"] for r in long_rows), default=None),
        "median_ratio_long_kernels": statistics.median([r["ratio"] for r in long_rows]) if long_rows else None,
        "max_ratio_all": max(r["ratio"] for r in rows),
        "max_miss_ratio_long_kernels": max((r["miss_ratio"] for r in long_rows), default=None),
        "max_first_call_ratio_long_kernels": max((r["first_call_ratio"] for r in long_rows), default=None),
        "max_graphs_ratio_long_kernels": max((r["graphs_ratio"] for r in long_rows if r["graphs_ratio"]), default=None),
        "median_graphs_ratio_long_kernels": (
            statistics.median([r["graphs_ratio"] for r in long_rows if r["graphs_ratio"]])
            if any(r["graphs_ratio"] for r in long_rows) else None),
    }
    print("\n" + common.md_table(
        ["workload", "size", "kernel us (median)", "configs", "ideal ms", "wall ms", "wall / ideal",
         "with cache write / ideal", "real first call / ideal", "restore_inplace=False / ideal",
         "graphs=False / its ideal", "triton.autotune / ideal"],
        [[r["workload"], r["size"], r["kernel_ms_median"] * 1e3, r["configs"], r["ideal_s"] * 1e3,
          r["wall_s"] * 1e3, r["ratio"], r["miss_ratio"], r["first_call_ratio"], r["no_guard_ratio"],
          r["graphs_ratio"] or "-",
          r["triton_autotune_ratio"] or "-"]
         for r in rows]))
    common.write_result("p2_tuning_efficiency", args, {"repeats": repeats, "long_kernel_ms": LONG_KERNEL_MS},
                        rows, summary, backend)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
