"""Where the GPU waits during one graph-mode tuning (P2), and what graph capture and replay cost.

1. ``torch.profiler`` around one ``tune()`` with ``graphs=True`` (after an untimed one that
   compiles) for examples/scale.py at 2^24 and 2^26 and examples/gemm.py at 2048: the GPU's busy
   time (union of kernels, copies, sets) against the wall, and the host work that overlaps the
   GPU's idle gaps, summed by name (the library's phases are labelled by wrapping its functions
   here; nothing in the library changes). The profiler slows the host, so the absolute figures
   are upper bounds; the unprofiled wall is printed beside them.
2. Micro costs at 2^24: capture of c runs (begin / runs / end), first and later replay, release;
   and the device time per run of a sample of 6 runs as one 6-run graph, three 2-run graphs and
   six 1-run graphs (what a boundary between graph launches costs the GPU).

Prints lines; run on the GPU machine: ``python scripts/device/probe_p2.py [trace_dir]``.
"""

from __future__ import annotations

import collections
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

from examples import gemm, scale
from triton_dist._backends import cuda as cuda_backend
from triton_dist._backends import get_backend
from triton_dist._measure import guard as _safety
from triton_dist._measure import rounds as _rounds
from triton_dist.tune import autotune


def label(owner, name, tag):
    original = getattr(owner, name)

    def wrapped(*a, **k):
        with torch.profiler.record_function(tag):
            return original(*a, **k)

    setattr(owner, name, wrapped)


def labelled() -> None:
    label(cuda_backend.CudaBackend, "capture", "td.capture")
    label(cuda_backend.CudaBackend, "_sleep_ahead", "td.sleep_ahead")
    label(cuda_backend.CudaBackend, "synchronize", "td.synchronize")
    label(_rounds, "_agree_on_k", "td.agree_on_k")
    label(_safety.RunGuard, "_after_first", "td.guard_first_run")
    label(_safety.RunGuard, "_restore", "td.guard_restore")
    label(_safety.RunGuard, "__init__", "td.guard_snapshot")


def gpu_intervals(trace: dict) -> list[tuple[float, float]]:
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in trace["traceEvents"]
             if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    spans.sort()
    merged: list[list[float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def analyse(trace: dict, wall_name: str = "probe.tune") -> None:
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    window = [e for e in events if e.get("name") == wall_name]
    if not window:
        print("  (no tune window in the trace)")
        return
    t0, t1 = window[0]["ts"], window[0]["ts"] + window[0]["dur"]
    busy = [(max(s, t0), min(e, t1)) for s, e in gpu_intervals(trace) if e > t0 and s < t1]
    busy_us = sum(e - s for s, e in busy)
    gaps, cursor = [], t0
    for s, e in busy:
        if s > cursor:
            gaps.append((cursor, s))
        cursor = max(cursor, e)
    if cursor < t1:
        gaps.append((cursor, t1))
    print(f"  profiled wall {(t1 - t0) / 1e3:.2f} ms, GPU busy {busy_us / 1e3:.2f} ms, idle "
          f"{(t1 - t0 - busy_us) / 1e3:.2f} ms in {len(gaps)} gaps (>= 20 us: "
          f"{sum(1 for s, e in gaps if e - s >= 20)})")
    # host work overlapping idle gaps: innermost labels (td.*) and runtime calls, by name
    host = [e for e in events if e.get("cat") in ("user_annotation", "cuda_runtime", "cuda_driver")
            and t0 <= e["ts"] <= t1 and e.get("name") != wall_name]
    by_name: dict[str, float] = collections.defaultdict(float)
    for name_filter in ("user_annotation", "cuda_runtime"):
        by_name.clear()
        for e in host:
            if e.get("cat") != name_filter and not (name_filter == "cuda_runtime" and e.get("cat") == "cuda_driver"):
                continue
            s, end = e["ts"], e["ts"] + e.get("dur", 0)
            for gs, ge in gaps:
                if ge <= s:
                    continue
                if gs >= end:
                    break
                by_name[e["name"]] += min(end, ge) - max(s, gs)
        top = sorted(by_name.items(), key=lambda kv: -kv[1])[:12]
        print(f"  idle GPU overlapped by {name_filter}: " + ", ".join(f"{n} {v / 1e3:.2f} ms" for n, v in top))
    totals: dict[str, list[float]] = collections.defaultdict(list)
    for e in host:
        totals[e["name"]].append(e.get("dur", 0))
    top = sorted(totals.items(), key=lambda kv: -sum(kv[1]))[:14]
    print("  host time by name (count, total ms): " + ", ".join(
        f"{n} ({len(v)}, {sum(v) / 1e3:.2f})" for n, v in top))


def profile_case(name: str, host, space, key_fn, prune_fn, args, trace_dir: Path | None) -> None:
    tuner = autotune(space, key_fn, prune_fn, graphs=True)(host)
    tuner.tune(*args, force=True, write_cache=False)  # compiles
    walls = []
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        tuner.tune(*args, force=True, write_cache=False)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1e3)
    print(f"{name}: unprofiled tune() {statistics.median(walls):.2f} ms (median of 3)")
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        torch.cuda.synchronize()
        with torch.profiler.record_function("probe.tune"):
            tuner.tune(*args, force=True, write_cache=False)
            torch.cuda.synchronize()
    path = (trace_dir or Path("/tmp")) / f"trace_{name.replace(' ', '_')}.json"
    prof.export_chrome_trace(str(path))
    analyse(json.loads(path.read_text()))


def micro() -> None:
    backend = get_backend()
    x = torch.randn(2**24, device="cuda")

    def host():
        y = torch.empty_like(x)
        scale.scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, 2.0, x.numel(), BLOCK=1024, num_warps=4)
        return y

    host()
    torch.cuda.synchronize()
    pool = backend.graph_pool()
    keeper = backend.capture(host, 1, pool)  # the pool lives as long as one of its graphs does
    stream = torch.cuda.Stream()
    clock = time.perf_counter
    for runs in (1, 2, 6):
        rows = collections.defaultdict(list)
        for _ in range(12):
            g = torch.cuda.CUDAGraph()
            t = [clock()]
            with torch.cuda.stream(stream):
                g.capture_begin(pool=pool, capture_error_mode="thread_local")
                t.append(clock())
                for _ in range(runs):
                    host()
                t.append(clock())
                g.capture_end()
            t.append(clock())
            g.replay()
            t.append(clock())
            g.replay()
            t.append(clock())
            torch.cuda.synchronize()
            t.append(clock())
            del g
            t.append(clock())
            for i, part in enumerate(("begin", "runs", "end", "first replay", "second replay", "sync", "release")):
                rows[part].append((t[i + 1] - t[i]) * 1e6)
        print(f"capture of {runs} run(s), host us (median of 12): " + ", ".join(
            f"{k} {statistics.median(v):.1f}" for k, v in rows.items()))
    # device time per run: one 6-run graph vs 3 x 2-run vs 6 x 1-run
    graphs = {}
    shapes = ((6, 1), (3, 2), (1, 6), (30, 1), (10, 3), (1, 30))  # (runs per graph, replays)
    for c in {c for c, _ in shapes}:
        graphs[c] = backend.capture(host, c, pool)
    start_end = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(40 * len(shapes))]
    samples = collections.defaultdict(list)
    for i in range(40):
        torch.cuda.synchronize()
        torch.cuda._sleep(5_000_000)
        for j, (c, r) in enumerate(shapes):
            s, e = start_end[len(shapes) * i + j]
            s.record()
            for _ in range(r):
                graphs[c].replay()
            e.record()
    torch.cuda.synchronize()
    for i in range(40):
        for j, (c, r) in enumerate(shapes):
            s, e = start_end[len(shapes) * i + j]
            samples[(c, r)].append(s.elapsed_time(e) * 1e3)
    print("sample device us (median, stdev, per run) of 40, 2^24 elementwise: " + ", ".join(
        f"{r} x {c}-run graph {statistics.median(v):.1f} sd {statistics.stdev(v):.2f} "
        f"({statistics.median(v) / (c * r):.2f}/run)" for (c, r), v in samples.items()))
    graphs.clear()
    del keeper


def main() -> None:
    trace_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    if trace_dir:
        trace_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(stream=sys.stdout, format="%(message)s")
    micro()
    labelled()
    logging.getLogger("triton_dist._measure.rounds").setLevel(logging.DEBUG)
    ew_space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)}
                for b in (256, 512, 1024, 2048, 4096) for w in (2, 4, 8)]
    for n in (2**24, 2**26):
        x = torch.randn(n, device="cuda")
        profile_case(f"scale 2^{n.bit_length() - 1}", scale.scale.fn, ew_space, scale.key_fn, scale.prune_fn,
                     (x, 2.5), trace_dir)
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(2048, 2048, generator=g).to(torch.float16).cuda()
    b = torch.randn(2048, 2048, generator=g).to(torch.float16).cuda()
    profile_case("gemm 2048", gemm.matmul.fn, gemm.configs(), gemm.key_fn, gemm.prune_fn, (a, b), trace_dir)


if __name__ == "__main__":
    main()
