"""Is the default's per-config offset from the oracle on softmax 8192 x 8192 the load it measures
under (issue 16)? P7 of 2026-12-02 22:03 UTC: the default measured config 6 1.1-1.2 % under the
warm oracle's figure and config 8 1.4-3.4 % over it, in every trial of three runs, with or without
an untimed run of the config before each sample, and picked 6 over 9 (1.1 % faster in the oracle)
in 3 of 3 trials of one run. ``probe_compose.py`` found the sample graph as built within 0.5 % of
a flat capture and of the oracle's long bursts when all are queued back to back, and
``probe_prime.py`` no change from priming. What differs still: the default queues its samples
back to back for the whole measurement (the GPU never idles), the oracle synchronises after
every sample (a short idle each time, and its clocks and power may settle elsewhere).

Per config, the per-run time of its ``k``-run sample graph (as the default builds it) and of a
~3 ms graph (the oracle's), each after an untimed replay of itself, timed four ways, the modes
taking turns in rounds: ``queued`` (every sample of a round queued back to back, one
synchronisation a round: the default), ``synced`` (a synchronisation after every sample: the
oracle). Printed per config against the fastest config's ``long synced`` (the oracle's figure),
with the SM clock and power that ``nvidia-smi`` read every 20 ms during each mode (medians).

Run on the GPU machine: python3 scripts/device/probe_load.py [softmax|layer_norm ...]"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p7_tutorials as p7
import torch
import tutorial_kernels as tk
import workloads as wl

from triton_dist._backends import get_backend
from triton_dist._measure.rounds import runs_per_sample

CASES = {"softmax": ((8192, 8192), [6, 7, 8, 9, 14]), "layer_norm": ((8192, 4096), [6, 8, 9, 10]),
         # compute-bound, ~26 us at ~650 TFLOP/s: P7 of 2026-12-03 08:29 UTC, the default picked 0
         # (its own figures 0.1-0.2 % ahead of 2) where that run's oracle had 2 1.1 % ahead (0 ahead
         # in the run before, on the same machine)
         "matmul": ((2048, 2048, 2048), [0, 1, 2])}
SUSTAINED_ROUNDS = 40
ROUNDS = 12
MODES = [(size, sync) for size in ("k", "long") for sync in ("queued", "synced")]


class Smi:
    """``nvidia-smi`` polled every 20 ms in the background, its readings tagged with the mode."""

    def __init__(self) -> None:
        self.mode = "idle"
        self.readings: dict[str, list[tuple[float, float]]] = {}
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "20"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                clock, power = (float(v) for v in line.split(","))
            except ValueError:
                continue
            self.readings.setdefault(self.mode, []).append((clock, power))

    def summary(self, mode: str) -> str:
        got = self.readings.get(mode, [])
        if not got:
            return "no reading"
        return (f"SM {statistics.median(c for c, _ in got):.0f} MHz, "
                f"{statistics.median(p for _, p in got):.0f} W ({len(got)} readings)")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()


def main(names: list[str]) -> None:
    backend = get_backend()
    scratch = Path(tempfile.mkdtemp(prefix="load_"))
    os.chdir(scratch)
    smi = Smi()
    for name in names:
        shape, configs = CASES[name]
        tut = next(t for t in tk.tutorials(backend.device()) if t.name == name)
        args = tut.make_args(shape, backend.device())
        runner = p7.Runner(tut, backend, scratch, tk)
        oracle = wl.gpu_oracle(runner.host, tut.space, tut.prune_fn, 3.0)(shape, args)
        picks = []
        for _ in range(3):
            chosen, _, entry = runner.run("default", args)
            picks.append(chosen)
        measured = {c["index"]: c["time_ms"] for c in entry["candidates"] if c.get("time_ms")}
        k = runs_per_sample(min(oracle[i] for i in configs))
        pool = backend.graph_pool()
        graphs = {}
        for i in configs:
            def fn(c=tut.space[i], host=runner.host, a=args):
                return host(*a, **c)

            fn()
            graphs[(i, "k")] = (backend.capture(fn, k, pool), k)
            long = max(1, int(3.0 / oracle[i]))
            graphs[(i, "long")] = (backend.capture(fn, long, pool), long)
        torch.cuda.synchronize()
        times: dict[tuple[int, str, str], list[float]] = {(i, s, m): [] for i in configs for s, m in MODES}
        order = list(configs)
        for r in range(ROUNDS):
            shift = r % len(order)
            for size, sync in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                smi.mode = f"{size} {sync}"
                pairs = []
                for i in order[shift:] + order[:shift]:
                    graph, runs = graphs[(i, size)]
                    graph.replay()  # untimed: the sample follows its own config
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    graph.replay()
                    end.record()
                    if sync == "synced":
                        end.synchronize()
                    pairs.append((i, start, end, runs))
                torch.cuda.synchronize()
                for i, start, end, runs in pairs:
                    times[(i, size, sync)].append(start.elapsed_time(end) / runs)
        # sustained: the default's own load, every config's k-run samples queued back to back for
        # SUSTAINED_ROUNDS rounds (~SUSTAINED_ROUNDS x configs ms) with one synchronisation at the end
        smi.mode = "k sustained"
        pairs = []
        for r in range(SUSTAINED_ROUNDS):
            shift = r % len(order)
            for i in order[shift:] + order[:shift]:
                graph, runs = graphs[(i, "k")]
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                pairs.append((i, start, end, runs))
        torch.cuda.synchronize()
        sustained: dict[int, list[float]] = {i: [] for i in configs}
        for i, start, end, runs in pairs:
            sustained[i].append(start.elapsed_time(end) / runs)
        smi.mode = "idle"
        base = min(statistics.median(times[(i, "long", "synced")]) for i in configs)
        print(f"{name} {shape}: k = {k}; the default picked {picks} (3 tunings); per-run time over the "
              f"fastest 'long synced' ({base * 1e3:.2f} us)")
        print("  config | oracle | default measured | " + " | ".join(f"{s} {m}" for s, m in MODES)
              + " | k sustained (first half, second half)")
        for i in configs:
            cells = [f"{statistics.median(times[(i, s, m)]) / base:.4f}" for s, m in MODES]
            half = len(sustained[i]) // 2
            first, second = (statistics.median(part) / base for part in (sustained[i][:half], sustained[i][half:]))
            cells.append(f"{statistics.median(sustained[i]) / base:.4f} ({first:.4f}, {second:.4f})")
            print(f"  {i:6d} | {oracle[i] / base:.4f} | {measured.get(i, float('nan')) / base:.4f} | "
                  + " | ".join(cells))
        for mode in [f"{s} {m}" for s, m in MODES] + ["k sustained"]:
            print(f"  {mode}: {smi.summary(mode)}")
        del graphs
        torch.cuda.synchronize()
    smi.stop()


if __name__ == "__main__":
    main(sys.argv[1:] or ["softmax"])
