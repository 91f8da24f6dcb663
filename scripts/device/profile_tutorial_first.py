"""Where the real first call's wall goes on Triton's tutorial kernels of 30-60 µs (P2 on P7's
first-call column, issue 16): layer norm 8192 x 4096 and the attention forward 4 x 16 x 1024 x 64,
each tuned from nothing as P7 does (a fresh tuner and cache per call), then: the wall against the
entry's own measured ideal (Σ time x runs + one run), the measurement's phases (DEBUG marks),
cProfile's top entries, the device's idle gaps inside the call (torch.profiler), the host time of
the first call's steps (wrapped: the run guard's set-up, the compile pass, the measurement, the
pick, the entry's build and write) and the caching allocator's segments allocated and freed
during a call (does each tuning's fresh graph pool cudaMalloc and cudaFree its outputs?).
Run on the GPU machine: python3 scripts/device/profile_tutorial_first.py"""

from __future__ import annotations

import cProfile
import logging
import os
import pstats
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p7_tutorials as p7
import tutorial_kernels as tk

from triton_dist._backends import get_backend

CASES = [("layer_norm", (8192, 4096)), ("attention", (4, 16, 1024, 64))]


def measured_ideal_ms(entry: dict) -> float:
    runs = [(c["time_ms"], c["runs"]) for c in entry["candidates"] if c.get("runs") and c.get("time_ms")]
    return sum(t * n for t, n in runs) + entry["best"]["time_ms"]


def gaps(prof, wall_ms: float) -> None:
    """The device's busy time inside the call and its idle gaps over 30 µs (CUDA kernels and copies)."""
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    if not events:
        print("  no device events recorded")
        return
    busy, last_end, found = 0.0, events[0].time_range.start, []
    t0 = events[0].time_range.start
    for e in events:
        start, end = e.time_range.start, e.time_range.end
        if start > last_end + 30:
            found.append(((last_end - t0) / 1e3, (start - last_end) / 1e3, e.name[:60]))
        busy += max(0, end - max(start, last_end))
        last_end = max(last_end, end)
    span = (last_end - t0) / 1e3
    print(f"  device: busy {busy / 1e3:.2f} ms of a {span:.2f} ms span (call wall {wall_ms:.2f} ms); "
          f"idle before the first kernel and after the last: {wall_ms - span:.2f} ms")
    total = sum(g for _, g, _ in found)
    print(f"  {len(found)} gaps > 30 µs, {total:.2f} ms in all; the largest:")
    for at, gap, name in sorted(found, key=lambda g: -g[1])[:15]:
        print(f"    at {at:8.2f} ms: {gap:6.2f} ms idle, then {name}")


class Phases:
    """Host seconds per wrapped step of the first call (module attributes replaced, restored by undo)."""

    def __init__(self) -> None:
        import time

        from triton_dist import _tuning
        from triton_dist._measure import guard

        self.spent: dict[str, float] = {}
        self.undo: list[tuple[object, str, object]] = []
        self.clock = time.perf_counter
        for owner, name, label in [(_tuning, "precompile_target", "compile pass"),
                                   (_tuning, "measure_candidates", "measurement"),
                                   (_tuning, "_pick", "pick"), (_tuning, "build_entry", "build entry"),
                                   (_tuning, "_write", "write entry"),
                                   (guard.RunGuard, "__enter__", "guard set-up"),
                                   (guard.RunGuard, "__exit__", "guard exit"),
                                   (_tuning, "decide_locally", "lookup (decide_locally)")]:
            self._wrap(owner, name, label)

    def _wrap(self, owner: object, name: str, label: str) -> None:
        real = getattr(owner, name)

        def timed(*a, **k):
            start = self.clock()
            try:
                return real(*a, **k)
            finally:
                self.spent[label] = self.spent.get(label, 0.0) + self.clock() - start

        self.undo.append((owner, name, real))
        setattr(owner, name, timed)

    def report(self) -> str:
        return ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in self.spent.items())

    def close(self) -> None:
        for owner, name, real in reversed(self.undo):
            setattr(owner, name, real)


def segments() -> dict[str, int]:
    import torch

    stats = torch.cuda.memory_stats()
    return {k: stats.get(k, 0) for k in ("num_device_alloc", "num_device_free", "segment.all.allocated",
                                         "segment.all.freed", "reserved_bytes.all.current")}


def main() -> None:
    logging.basicConfig(stream=sys.stdout, format="  %(name)s: %(message)s")
    logging.getLogger("triton_dist._measure.rounds").setLevel(logging.DEBUG)
    backend = get_backend()
    scratch = Path(tempfile.mkdtemp(prefix="p2tut_"))
    os.chdir(scratch)
    for name, shape in CASES:
        tut = next(t for t in tk.tutorials(backend.device()) if t.name == name)
        shape = shape if backend.kind != "cpu" else tut.shapes[0]  # the interpreter: a smoke run
        args = tut.make_args(shape, backend.device())
        runner = p7.Runner(tut, backend, scratch, tk)
        runner.run("default", args)  # compiles (the compile pass) and warms the allocator, as P7
        print(f"{name} {shape}:")
        for trial in range(3):
            _, wall, entry = runner.run("default", args)
            ideal = measured_ideal_ms(entry)
            reserved = (f", reserved {segments()['reserved_bytes.all.current'] / 2**20:.0f} MiB"
                        if backend.kind == "cuda" else "")  # grows per tuning if dead graph pools stay reserved
            print(f"  trial {trial}: wall {wall * 1e3:.2f} ms, measured ideal {ideal:.2f} ms, "
                  f"ratio {wall * 1e3 / ideal:.3f}, {len(entry['candidates'])} candidates{reserved}")
        cuda = backend.kind == "cuda"
        before = segments() if cuda else {}
        phases = Phases()
        _, wall, entry = runner.run("default", args)
        phases.close()
        print(f"  phases (wall {wall * 1e3:.2f} ms): {phases.report()}")
        if cuda:
            after = segments()
            print("  allocator during the call: " + ", ".join(f"{k} {after[k] - before[k]:+d}" for k in before)
                  + f" (reserved now {after['reserved_bytes.all.current'] / 2**20:.0f} MiB)")
        profiler = cProfile.Profile()
        profiler.enable()
        _, wall, entry = runner.run("default", args)
        profiler.disable()
        print(f"  profiled: wall {wall * 1e3:.2f} ms, ratio {wall * 1e3 / measured_ideal_ms(entry):.3f}")
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(25)
        if backend.kind == "cuda":
            import torch

            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                _, wall, entry = runner.run("default", args)
            gaps(prof, wall * 1e3)


if __name__ == "__main__":
    main()
