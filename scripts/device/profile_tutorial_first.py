"""Where the real first call's wall goes on Triton's tutorial kernels of 30-60 µs (P2 on P7's
first-call column, issue 16): layer norm 8192 x 4096 and the attention forward 4 x 16 x 1024 x 64,
each tuned from nothing as P7 does (a fresh tuner and cache per call), then: the wall against the
entry's own measured ideal (Σ time x runs + one run), the measurement's phases (DEBUG marks),
cProfile's top entries, and the device's idle gaps inside the call (torch.profiler).
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

import p7_tutorials as p7  # noqa: E402
import tutorial_kernels as tk  # noqa: E402

from triton_dist._backends import get_backend  # noqa: E402

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
            print(f"  trial {trial}: wall {wall * 1e3:.2f} ms, measured ideal {ideal:.2f} ms, "
                  f"ratio {wall * 1e3 / ideal:.3f}, {len(entry['candidates'])} candidates")
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
