"""Host time per step of graph mode's warm-up on a tutorial kernel's first call (P2, issue 16),
without a profiler: the steps are wrapped with perf_counter accumulators (inclusive; steps
nest), the call is run a few times as P7 runs it, and the median per first call is printed with
its count. In the recompose schedule the device has one candidate's probes (a sample of ~1 ms)
to run while the host runs the next candidate's first run and capture: per candidate, host time
over ~1 ms is device idle.

Run on the GPU machine: python3 scripts/device/host_steps.py [layer_norm|attention|softmax|matmul ...]"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p7_tutorials as p7
import tutorial_kernels as tk

from triton_dist._backends import base, cuda_compose, get_backend
from triton_dist._measure import guard, rounds, runs

CASES = {"layer_norm": (8192, 4096), "attention": (4, 16, 1024, 64), "softmax": (8192, 8192),
         "matmul": (2048, 2048, 2048)}
STEPS = [(rounds._Rounds, "warm_up"), (rounds._Rounds, "first_run"), (runs.CandidateRuns, "run"),
         (guard.RunGuard, "check_first"), (guard.RunGuard, "settle"), (rounds._Rounds, "next_capture"),
         (rounds._Rounds, "_capture_settled"), (runs.CandidateRuns, "capture"),
         (cuda_compose.ComposedGraph, "__init__"),
         (rounds._Rounds, "_warm_rest"), (rounds._Rounds, "_first_k"), (rounds._Rounds, "_finish_recomposed"),
         (rounds._Rounds, "_rebuild"), (rounds._Rounds, "timed_rounds"), (rounds._Rounds, "results"),
         (runs.CandidateRuns, "start"), (runs.CandidateRuns, "replay"),
         # finer (2026-12-03 22:00 UTC): the capture's own parts and the detections' pieces
         (base, "_capture"), (cuda_compose, "build"), (cuda_compose, "capture_kept"),
         (guard._FlagBlock, "values"), (guard.RunGuard, "_queued_detection"), (guard.RunGuard, "_restore"),
         (rounds._Rounds, "_timed_sample"), (rounds._Rounds, "_move"), (rounds._Rounds, "_checkpoint"),
         # the shared probe graph (2026-12-04; absent from older trees: skipped there)
         (runs.CandidateRuns, "load_probe"), (runs.CandidateRuns, "replay_probe"),
         (getattr(cuda_compose, "SharedProbe", None), "load"), (cuda_compose.ComposedGraph, "_release")]
# steps of other trees only (A/B runs against .device/old), skipped where absent; STEPS must exist on
# main (tests/unit/test_device_profilers.py): the branch detections-next-turn (2026-12-04, session 28)
OTHER_TREES = [(rounds._Rounds, "_read_detections"), (rounds._Rounds, "_capture_one")]
STEPS += OTHER_TREES


class Steps:
    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)
        clock = time.perf_counter
        for owner, name in STEPS:
            real = getattr(owner, name, None)
            if real is None:  # a step of another tree
                continue
            label = f"{owner.__name__.rpartition('.')[2]}.{name}"

            def wrapped(*a, _real=real, _label=label, **k):
                start = clock()
                try:
                    return _real(*a, **k)
                finally:
                    self.total[_label] += clock() - start
                    self.count[_label] += 1

            setattr(owner, name, wrapped)


def main(names: list[str]) -> None:
    backend = get_backend()
    scratch = Path(tempfile.mkdtemp(prefix="steps_"))
    os.chdir(scratch)
    steps = Steps()
    for name in names:
        tut = next(t for t in tk.tutorials(backend.device()) if t.name == name)
        shape = CASES[name] if backend.kind != "cpu" else tut.shapes[0]  # the interpreter: a smoke run
        args = tut.make_args(shape, backend.device())
        runner = p7.Runner(tut, backend, scratch, tk)
        runner.run("default", args)
        per: dict[str, list[float]] = defaultdict(list)
        counts: dict[str, int] = {}
        walls, ideals = [], []
        for _ in range(5):
            steps.total.clear()
            steps.count.clear()
            _, wall, entry = runner.run("default", args)
            walls.append(wall * 1e3)
            ideals.append(sum(c["time_ms"] * c["runs"] for c in entry["candidates"] if c.get("time_ms")))
            for label, seconds in steps.total.items():
                per[label].append(seconds * 1e6)
                counts[label] = steps.count[label]
        ratio = statistics.median(w / i for w, i in zip(walls, ideals, strict=True))
        print(f"{name} {shape}: wall median {statistics.median(walls):.2f} ms, measured Σ time x runs "
              f"{statistics.median(ideals):.2f} ms ({ratio:.4f})")
        for label, values in sorted(per.items(), key=lambda kv: -statistics.median(kv[1])):
            print(f"  {statistics.median(values):9.1f} µs in {counts[label]:4d} calls  {label}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["layer_norm"])
