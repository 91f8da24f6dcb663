"""P2 tuning efficiency: wall time of one tuning against the ideal, sum of kernel time x runs.

For each workload size, ``AutoTuner.tune(force=True, write_cache=False)`` (prune, measure every
config with 5 warm-up + 10 timed runs, pick) and the whole miss path (the same plus writing the
cache entry and the tuning log: an fsync), and the first without the in-place guard
(``restore_inplace=False``), are timed ``--repeats`` times each after a first,
untimed tuning (which compiles the kernels); the median wall time is divided by the ideal: sum
over the kept configs of (5 + 10) x the config's oracle time.
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
        # graph mode (opt-in on devices with graphs): runs replayed from a captured graph
        graphed = (autotune(workload.space, workload.key_fn, workload.prune_fn, graphs=True)(host)
                   if backend.graphs else None)
        for size in workload.sizes:
            call_args = workload.make_args(size)
            tuner.tune(*call_args, force=True)  # compiles; not timed
            oracle = workload.oracle_ms(size, call_args)
            if graphed is not None:
                graphed.tune(*call_args, force=True, write_cache=False)  # its first capture
            walls: dict[str, list[float]] = {"tune": [], "miss": [], "no_guard": [], "graphs": []}
            ideals: dict[str, float] = {}
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
                    if what == "tune":
                        runs_per_config = max(runs.values())
            kept = list(counts)
            ideal_s = ideals["tune"]
            wall = statistics.median(walls["tune"])
            miss_wall = statistics.median(walls["miss"])
            bare_wall = statistics.median(walls["no_guard"])
            kernel_ms = statistics.median(oracle[i] for i in kept)
            graph_wall = statistics.median(walls["graphs"]) if walls["graphs"] else None
            graph_ratio = graph_wall / ideals["graphs"] if graph_wall else None
            at_wall = triton_autotune_wall(workload, size, call_args, backend) if backend.kind == "cuda" else None
            row = {"workload": workload.name, "size": size, "configs": len(kept),
                   "runs_per_config": runs_per_config, "kernel_ms_median": kernel_ms,
                   "ideal_s": ideal_s, "wall_s": wall, "walls_s": walls, "ratio": wall / ideal_s,
                   "miss_wall_s": miss_wall, "miss_ratio": miss_wall / ideal_s,
                   "no_guard_wall_s": bare_wall, "no_guard_ratio": bare_wall / ideal_s,
                   "graphs_wall_s": graph_wall, "graphs_ideal_s": ideals.get("graphs"), "graphs_ratio": graph_ratio,
                   "triton_autotune_wall_s": at_wall,
                   "triton_autotune_ratio": at_wall / ideal_s if at_wall else None}
            rows.append(row)
            print(f"{workload.name:12s} size {size:>9}: kernel {kernel_ms * 1e3:9.2f} us x {len(kept)} configs x "
                  f"{runs_per_config} runs: ideal {ideal_s * 1e3:9.3f} ms, wall {wall * 1e3:9.3f} ms, "
                  f"ratio {wall / ideal_s:6.3f} (with the cache write {miss_wall / ideal_s:6.3f})"
                  + (f"; graphs {graph_wall * 1e3:9.3f} ms, ratio {graph_ratio:6.3f}" if graph_wall else "")
                  + (f"; triton.autotune {at_wall * 1e3:9.1f} ms ({at_wall / ideal_s:.1f}x ideal)" if at_wall else ""),
                  flush=True)
    long_rows = [r for r in rows if r["kernel_ms_median"] >= LONG_KERNEL_MS]
    summary = {
        "max_ratio_long_kernels": max((r["ratio"] for r in long_rows), default=None),
        "median_ratio_long_kernels": statistics.median([r["ratio"] for r in long_rows]) if long_rows else None,
        "max_ratio_all": max(r["ratio"] for r in rows),
        "max_miss_ratio_long_kernels": max((r["miss_ratio"] for r in long_rows), default=None),
        "max_graphs_ratio_long_kernels": max((r["graphs_ratio"] for r in long_rows if r["graphs_ratio"]), default=None),
        "median_graphs_ratio_long_kernels": statistics.median(
            [r["graphs_ratio"] for r in long_rows if r["graphs_ratio"]]) if any(r["graphs_ratio"] for r in long_rows) else None,
    }
    print("\n" + common.md_table(
        ["workload", "size", "kernel us (median)", "configs", "ideal ms", "wall ms", "wall / ideal",
         "with cache write / ideal", "restore_inplace=False / ideal", "graphs=True / its ideal",
         "triton.autotune / ideal"],
        [[r["workload"], r["size"], r["kernel_ms_median"] * 1e3, r["configs"], r["ideal_s"] * 1e3,
          r["wall_s"] * 1e3, r["ratio"], r["miss_ratio"], r["no_guard_ratio"], r["graphs_ratio"] or "-",
          r["triton_autotune_ratio"] or "-"]
         for r in rows]))
    common.write_result("p2_tuning_efficiency", args, {"repeats": repeats, "long_kernel_ms": LONG_KERNEL_MS},
                        rows, summary, backend)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
