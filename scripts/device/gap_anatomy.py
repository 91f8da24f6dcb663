"""What the host does while the device idles during a tutorial kernel's first call (the P2 gap on
kernels of 30-60 µs, issue 16): the first call's steps are labelled (``torch.profiler``'s
``record_function``), the call is profiled with CPU and CUDA activity, and every idle stretch of
the device is charged to the labels (and CUDA runtime calls) the host was inside at the time.

Run on the GPU machine: python3 scripts/device/gap_anatomy.py [layer_norm|attention ...]"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p7_tutorials as p7
import torch
import tutorial_kernels as tk

from triton_dist import _tuning
from triton_dist._backends import cuda, cuda_compose, get_backend
from triton_dist._measure import guard, rounds, runs

CASES = {"layer_norm": (8192, 4096), "attention": (4, 16, 1024, 64), "softmax": (4096, 8192)}
LABELS = [(_tuning, "precompile_target"), (_tuning, "measure_candidates"), (_tuning, "_pick"),
          (_tuning, "build_entry"), (_tuning, "_write"), (_tuning, "decide_locally"),
          (rounds._Rounds, "warm_up"), (rounds._Rounds, "set_up_graphs"), (rounds._Rounds, "_rebuild"),
          (rounds._Rounds, "next_capture"), (rounds._Rounds, "_capture_settled"), (rounds._Rounds, "_first_k"),
          (rounds._Rounds, "_finish_recomposed"), (rounds._Rounds, "_build"), (rounds._Rounds, "_warm_rest"),
          (rounds._Rounds, "_capture_and_probe"), (rounds._Rounds, "timed_rounds"), (rounds._Rounds, "results"),
          (rounds._Rounds, "_checkpoint"), (rounds._Rounds, "first_run"), (runs.CandidateRuns, "start"),
          (runs.CandidateRuns, "run"), (runs.CandidateRuns, "replay"), (runs.CandidateRuns, "capture"),
          (guard.RunGuard, "__enter__"), (guard.RunGuard, "__exit__"), (guard.RunGuard, "check_first"),
          (guard.RunGuard, "settle"), (guard.RunGuard, "_restore"), (guard.RunGuard, "_after_first"),
          (cuda.CudaBackend, "warm_up"), (cuda.CudaBackend, "_sleep_ahead"),
          (cuda.CudaBackend, "synchronize"), (cuda_compose.ComposedGraph, "__init__")]
RUNTIME = ("cuda", "cu")  # runtime / driver API calls recorded by kineto


def label_all() -> None:
    for owner, name in LABELS:
        real = getattr(owner, name)
        tag = f"td.{getattr(owner, '__name__', 'm')}.{name}"

        def labelled(*a, _real=real, _tag=tag, **k):
            with torch.profiler.record_function(_tag):
                return _real(*a, **k)

        setattr(owner, name, labelled)


def idle_gaps(events, min_us: float = 20.0) -> list[tuple[float, float]]:
    device = sorted((e.time_range.start, e.time_range.end) for e in events if e.device_type.name == "CUDA")
    gaps, last = [], device[0][1] if device else 0
    for start, end in device[1:]:
        if start > last + min_us:
            gaps.append((last, start))
        last = max(last, end)
    return gaps


def charge(events, gaps) -> None:
    cpu = [e for e in events if e.device_type.name == "CPU"
           and (e.name.startswith("td.") or e.name.startswith(RUNTIME))]
    idle = defaultdict(float)
    spent = defaultdict(float)
    for e in cpu:
        spent[e.name] += e.time_range.end - e.time_range.start
        for start, end in gaps:
            overlap = min(end, e.time_range.end) - max(start, e.time_range.start)
            if overlap > 0:
                idle[e.name] += overlap
    total = sum(end - start for start, end in gaps)
    print(f"  device idle (gaps > 20 µs): {total / 1e3:.2f} ms in {len(gaps)} gaps; charged to what the "
          "host was inside (inclusive; labels nest):")
    for name, us in sorted(idle.items(), key=lambda kv: -kv[1])[:28]:
        print(f"    {us / 1e3:7.2f} ms idle of {spent[name] / 1e3:7.2f} ms host  {name}")
    print("  the ten largest gaps, with the innermost labels active:")
    for start, end in sorted(gaps, key=lambda g: g[0] - g[1])[:10]:
        inside = sorted((e for e in cpu if e.time_range.start < end and e.time_range.end > start),
                        key=lambda e: e.time_range.end - e.time_range.start)
        names = ", ".join(f"{e.name} {(min(end, e.time_range.end) - max(start, e.time_range.start)) / 1e3:.2f}"
                          for e in inside[:6])
        print(f"    {(end - start) / 1e3:6.2f} ms: {names}")


def main(names: list[str]) -> None:
    backend = get_backend()
    scratch = Path(tempfile.mkdtemp(prefix="gaps_"))
    os.chdir(scratch)
    label_all()
    for name in names:
        tut = next(t for t in tk.tutorials(backend.device()) if t.name == name)
        args = tut.make_args(CASES[name], backend.device())
        runner = p7.Runner(tut, backend, scratch, tk)
        runner.run("default", args)
        runner.run("default", args)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            _, wall, entry = runner.run("default", args)
        events = prof.events()
        ideal = sum(c["time_ms"] * c["runs"] for c in entry["candidates"] if c.get("runs") and c.get("time_ms"))
        print(f"{name} {CASES[name]}: wall {wall * 1e3:.2f} ms (profiled), measured Σ time x runs {ideal:.2f} ms")
        charge(events, idle_gaps(events))


if __name__ == "__main__":
    main(sys.argv[1:] or ["layer_norm", "attention"])
