"""The host's timeline at both ends of a tutorial kernel's first call (P2, issue 16), without a
profiler: the first call's steps are wrapped with perf_counter marks (enter / exit), the call is
run a few times as P7 runs it (a fresh tuner and cache each), and the median time of every mark
is printed relative to two anchors:

- the front: the call's start, up to the first candidate's first run (nothing runs on the device
  before it; every microsecond here is in P2's wall and not in its ideal);
- the tail: the moment the host saw the last timed sample complete (``_read_as_completed``
  returns; the device idles from then on), up to the call's own run of the best config.

Run on the GPU machine: python3 scripts/device/tail_anatomy.py [layer_norm|attention ...]"""

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

from triton_dist import _decision, _logging, _tuning, tune
from triton_dist._backends import get_backend
from triton_dist._measure import guard, rounds, runs
from triton_dist._store import decide, files, reuse

CASES = {"layer_norm": (8192, 4096), "attention": (4, 16, 1024, 64), "softmax": (4096, 8192)}
WRAPPED = [(tune.AutoTuner, "_miss"), (_tuning, "resolve"), (_tuning, "decide_locally"), (_tuning, "agree_plan"),
           (_tuning, "precompile_target"), (_tuning, "measure_candidates"), (_tuning, "_tune"),
           (_tuning, "_reduce"), (_tuning, "_pick"), (_tuning, "build_entry"), (_tuning, "_write"),
           (_tuning, "_on_result"), (_logging.TuningLog, "close"), (_logging.TuningLog, "__init__"),
           (rounds._Rounds, "warm_up"), (rounds._Rounds, "results"), (rounds._Rounds, "_read_as_completed"),
           (rounds, "_report"), (runs.CandidateRuns, "drop_graphs"), (runs.CandidateRuns, "start"),
           (guard.RunGuard, "__enter__"), (guard.RunGuard, "__exit__"), (rounds._Rounds, "timed_rounds"),
           # finer steps of both ends
           (decide, "identify"), (decide, "lookup"), (_decision, "kept_configs"), (reuse, "find_reusable"),
           (_tuning, "_log_path"), (_tuning, "_measurer"), (guard.RunGuard, "__init__"),
           (files, "ensure_private_dir"), (files, "dumps_entry"), (files, "_packed_bytes"),
           (files, "create_entry_text"), (files, "sync_later"), (rounds._Rounds, "first_run")]


class Marks:
    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        self.clock = time.perf_counter
        for owner, name in WRAPPED:
            real = getattr(owner, name)
            label = f"{getattr(owner, '__name__', '?').split('.')[-1]}.{name}"

            def wrapped(*a, _real=real, _label=label, **k):
                self.events.append((f"> {_label}", self.clock()))
                try:
                    return _real(*a, **k)
                finally:
                    self.events.append((f"< {_label}", self.clock()))

            setattr(owner, name, wrapped)


def timeline(events: list[tuple[str, float]], start: int, stop: int, t0: float) -> list[tuple[str, float]]:
    out, seen = [], defaultdict(int)
    for name, t in events[start:stop + 1]:
        seen[name] += 1
        label = name if seen[name] == 1 else f"{name} #{seen[name]}"
        out.append((label, (t - t0) * 1e6))
    return out


def main(names: list[str]) -> None:
    backend = get_backend()
    scratch = Path(tempfile.mkdtemp(prefix="tail_"))
    os.chdir(scratch)
    marks = Marks()
    for name in names:
        tut = next(t for t in tk.tutorials(backend.device()) if t.name == name)
        shape = CASES[name] if backend.kind != "cpu" else tut.shapes[0]  # the interpreter: a smoke run
        args = tut.make_args(shape, backend.device())
        runner = p7.Runner(tut, backend, scratch, tk)
        real_host = runner.host

        def host(*a, _real=real_host, **k):
            marks.events.append(("> host", marks.clock()))
            return _real(*a, **k)

        runner.host = host
        runner.run("default", args)  # compiles, warms up
        fronts, tails, walls = defaultdict(list), defaultdict(list), []
        for _ in range(5):
            marks.events.clear()
            start = time.perf_counter()
            _, wall, _entry = runner.run("default", args)
            walls.append(wall * 1e3)
            ev = marks.events
            first_run = next((i for i, (n, _) in enumerate(ev) if n == "> CandidateRuns.start"), len(ev) - 1)
            for label, us in timeline(ev, 0, first_run, start):
                fronts[label].append(us)
            anchor = "< _Rounds._read_as_completed" if backend.interleaved else "< _tuning.measure_candidates"
            read = max(i for i, (n, _) in enumerate(ev) if n == anchor)
            last_host = max(i for i, (n, _) in enumerate(ev) if n == "> host")
            for label, us in timeline(ev, read, len(ev) - 1, ev[read][1]):
                tails[label].append(us)
            tails["(the call's own run starts)"].append((ev[last_host][1] - ev[read][1]) * 1e6)
        print(f"{name} {shape}: wall median {statistics.median(walls):.2f} ms over {len(walls)} first calls")
        print("  front (µs from the call's start, median):")
        for label, values in sorted(fronts.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"    {statistics.median(values):9.1f}  {label}")
        print("  tail (µs from the host seeing the last sample complete, median):")
        for label, values in sorted(tails.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"    {statistics.median(values):9.1f}  {label}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["layer_norm", "attention"])
