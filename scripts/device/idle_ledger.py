"""Where the device idles in a tutorial kernel's first call (P2, issue 16), without a profiler.

CUDA timing events are recorded at the phase ends of graph mode's measurement (after the
device's warm-up, after the warm-up loop, after the graphs' set-up, after the last timed sample
is queued) and around the whole call; after the call, each phase's device time (between its two
events) is set against the device work queued in it: the runs each candidate had in the phase
times the candidate's measured time per run. What is left is the phase's idle (gaps while the
device waited for the host, keep-ahead sleeps, the guard's detections). The host's time per
phase is printed beside it. The events cost a few µs each: the ledger's own wall is a little
longer than an unobserved call's.

Run on the GPU machine: python3 scripts/device/idle_ledger.py [layer_norm|softmax|attention ...]
(TRIALS=5 by default; each a fresh tuner and cache, as P7 runs it). ORDERS=given,slow-first also
measures the configs reordered so that the slowest one (by the first tuning's entry) comes first:
the first candidate's probes then set a short ``k0``, as in P7's worst trials of layer norm
8192 x 4096 (2026-12-03, runs V and Y). PRE=stock (or stock,contextual) runs those methods' tunings
of the same shape before each first call, as P7's trials do (stock, default, contextual in turn).
HOST_DELAY_US=150 makes every call of the host function (eager or captured) spin that long first:
a slower host's warm-up loop on a fast one (2026-12-04, the early samples of graph_setup). The
``k0->k`` column adds how many candidates had an early sample."""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import common
import p7_tutorials as p7
import torch
import tutorial_kernels as tk

from triton_dist._backends import get_backend
from triton_dist._measure import rounds

CASES = {"layer_norm": [(8192, 4096), (16384, 8192)], "softmax": [(8192, 8192)],
         "attention": [(4, 16, 1024, 64)], "matmul": [(2048, 2048, 2048)]}
PHASES = ["front", "warm-up loop", "set-up", "timed rounds", "tail"]


class Ledger:
    """Events and run counts at the measurement's phase ends (patched into _Rounds)."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, object, float, dict[int, int]]] = []
        self.rounds: rounds._Rounds | None = None
        mark = self.mark
        real_timer = rounds._Rounds.warm_up
        real_setup = rounds._Rounds.set_up_graphs
        real_timed = rounds._Rounds.timed_rounds

        def warm_up(self_, *a, **k):
            ledger.rounds = self_
            real_run_timer = self_.backend.run_timer

            def run_timer():
                mark("device warmed", {})
                return real_run_timer()

            self_.backend.run_timer = run_timer
            try:
                return real_timer(self_, *a, **k)
            finally:
                del self_.backend.run_timer
                mark("warm-up loop", dict(self_.runs))

        def set_up_graphs(self_, *a, **k):
            try:
                return real_setup(self_, *a, **k)
            finally:
                mark("set-up", dict(self_.runs))

        def timed_rounds(self_, *a, **k):
            try:
                return real_timed(self_, *a, **k)
            finally:
                mark("rounds queued", dict(self_.runs))

        ledger = self
        rounds._Rounds.warm_up = warm_up
        rounds._Rounds.set_up_graphs = set_up_graphs
        rounds._Rounds.timed_rounds = timed_rounds

    def mark(self, name: str, runs: dict[int, int]) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.marks.append((name, event, time.perf_counter(), runs))

    def reset(self) -> None:
        self.marks.clear()
        self.rounds = None


class Marked(p7.Runner):
    """P7's runner with the ledger's first and last marks around the call itself (the call's
    own run of the best config queued before the last)."""

    ledger: Ledger

    def timed(self, call):
        self.backend.synchronize()
        start = time.perf_counter()
        self.ledger.mark("call", {})
        call()
        self.ledger.mark("end", {})
        self.backend.synchronize()
        return time.perf_counter() - start


def where_host_runs() -> str:
    """This process's CPU now, its NUMA node, its affinity, and a pure-Python loop's time (the
    host's speed for the tuner's own steps), to set beside the phases' host times."""
    cpu = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
    nodes = sorted(p.name for p in Path(f"/sys/devices/system/cpu/cpu{cpu}").glob("node*"))
    return (f"host: cpu {cpu} ({','.join(nodes) or 'no node'}), affinity {len(os.sched_getaffinity(0))} cpus, "
            f"a 100k-step Python loop {common.host_loop_ms(repeats=5):.2f} ms (min of 5)")


def slowed(runner: Marked) -> Marked:
    """``runner`` whose host function spins ``HOST_DELAY_US`` before each call (0: as it is)."""
    delay = float(os.environ.get("HOST_DELAY_US", "0")) / 1e6
    if delay > 0:
        real = runner.host

        def host(*a, **k):
            until = time.perf_counter() + delay
            while time.perf_counter() < until:
                pass
            return real(*a, **k)

        host.__name__ = host.__qualname__ = real.__name__
        runner.host = host
    return runner


def main(names: list[str]) -> None:
    import triton_dist

    print("triton_dist from", Path(triton_dist.__file__).parent)
    print(where_host_runs())
    backend = get_backend()
    trials = int(os.environ.get("TRIALS", "5"))
    scratch = Path(tempfile.mkdtemp(prefix="ledger_"))
    os.chdir(scratch)
    ledger = Ledger()
    for name in names:
        tut = next(t for t in tk.tutorials(backend.device()) if t.name == name)
        for shape in CASES[name]:
            args = tut.make_args(shape, backend.device())
            runner = slowed(Marked(tut, backend, scratch, tk))
            runner.ledger = ledger
            _, _, first = runner.run("default", args)  # compiled, as in P7's trials after the first
            for order in os.environ.get("ORDERS", "given").split(","):
                if order == "slow-first" and first is not None:
                    times = {c["index"]: c["time_ms"] for c in first["candidates"] if c.get("time_ms")}
                    slow = max(times, key=times.__getitem__)
                    configs = [tut.configs[slow]] + [c for i, c in enumerate(tut.configs) if i != slow]
                    runner = slowed(Marked(dataclasses.replace(tut, configs=configs), backend, scratch, tk))
                    runner.ledger = ledger
                    runner.run("default", args)
                ledger_trials(runner, ledger, name, shape, order, trials, args)


def ledger_trials(runner: Marked, ledger: Ledger, name: str, shape: tuple, order: str, trials: int,
                  args: tuple) -> None:
    table: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    ratios, walls, ideals, ks = [], [], [], []
    pre = [m for m in os.environ.get("PRE", "").split(",") if m]
    for _ in range(trials):
        for method in pre:
            runner.run(method, args)
        ledger.reset()
        _, wall, entry = runner.run("default", args)
        times = {c["index"]: c["time_ms"] for c in entry["candidates"] if c.get("time_ms")}
        ideal = sum(c["time_ms"] * c["runs"] for c in entry["candidates"] if c.get("time_ms"))
        ratios.append(wall * 1e3 / ideal)
        walls.append(wall * 1e3)
        ideals.append(ideal)
        r = ledger.rounds
        ks.append(f"{getattr(r, 'k0', '?')}->{getattr(r, 'k', '?')}"
                  + (f" ({len(r.early)} early)" if r is not None and hasattr(r, "early") else ""))
        marks = ledger.marks
        final = {c["index"]: c["runs"] for c in entry["candidates"] if c.get("time_ms")}
        before: dict[int, int] = {}
        for (_, e0, h0, _), (label, e1, h1, runs) in zip(marks, marks[1:], strict=False):
            runs = runs or (final if label == "end" else before)
            work = sum((runs.get(i, 0) - before.get(i, 0)) * times.get(i, 0.0) for i in runs)
            device = e0.elapsed_time(e1)
            table[label].append((device, work, (h1 - h0) * 1e3))
            before = runs
    after = f", after {'+'.join(pre)}" if pre else ""
    print(f"{name} {shape} [{order}{after}]: first call / measured ideal median {statistics.median(ratios):.4f} "
          f"(trials: {', '.join(f'{r:.3f}' for r in ratios)}); wall median {statistics.median(walls):.1f} ms, "
          f"ideal {statistics.median(ideals):.1f} ms; k0->k {', '.join(ks)}")
    print("  phase ending at    device ms   work ms   idle ms   host ms   (medians)")
    for label, rows in table.items():
        device, work, host = (statistics.median(col) for col in zip(*rows, strict=True))
        idle = statistics.median(d - w for d, w, _ in rows)
        print(f"  {label:16s} {device:10.3f} {work:9.3f} {idle:9.3f} {host:9.3f}")
    print(f"  {where_host_runs()}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["layer_norm"])
