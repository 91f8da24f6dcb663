"""Graph replays against eager launches, per config (issue 16, P7 run of 2026-12-01 18:40 UTC):
on softmax 8192 x 8192, eager timing (``graphs=False``, ``contextual_autotune``) picked config 6
where the graph oracle's best is config 14, 3.8 % apart, in most trials. Which is the config a
user's eager run is fastest with? Each config's time (µs per run), configs interleaved in 9
rounds after a warm-up, three ways:

- ``graph``: the P7 oracle (``workloads.gpu_oracle``: graph replays of ~5 ms);
- ``eager``: 200 eager host calls back to back, behind a 2 ms device sleep, in one event pair;
- ``wall``: the same 200 calls timed on the host clock to a synchronisation (what a loop costs).

Run on the GPU machine from the repository root: ``python3 scripts/device/probe_eager.py``."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import tutorial_kernels as tk
import workloads as wl

RUNS = 200


def eager_times(host, space, args, rounds: int = 9) -> tuple[list[float], list[float]]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_event: dict[int, list[float]] = {i: [] for i in range(len(space))}
    per_wall: dict[int, list[float]] = {i: [] for i in range(len(space))}
    for config in space:
        host(*args, **config)
    torch.cuda.synchronize()
    for r in range(rounds):
        order = list(range(len(space)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            torch.cuda.synchronize()
            torch.cuda._sleep(2_000_000)  # the device ahead of the host for the whole loop
            t0 = time.perf_counter()
            start.record()
            for _ in range(RUNS):
                host(*args, **space[i])
            end.record()
            end.synchronize()
            per_wall[i].append((time.perf_counter() - t0) / RUNS * 1e6)
            per_event[i].append(start.elapsed_time(end) / RUNS * 1e3)
    return ([statistics.median(per_event[i]) for i in range(len(space))],
            [statistics.median(per_wall[i]) for i in range(len(space))])


def main() -> None:
    device = torch.device("cuda")
    cases = {"softmax": (8192, 8192), "matmul": (128, 4096, 4096), "layer_norm": (8192, 4096)}
    for tut in sorted((t for t in tk.tutorials(device) if t.name in cases), key=lambda t: list(cases).index(t.name)):
        shape = cases[tut.name]
        args = tut.make_args(shape, device)
        space = []
        for c in tut.space:  # the configs that run here (a tutorial config can exceed shared memory)
            if tut.prune is not None and not tut.prune(c, args):
                continue
            try:
                tut.host(*args, **c)
            except Exception as exc:  # noqa: BLE001 - a config that cannot run is left out, as tuning does
                print(f"{tut.name}: config {c} left out: {type(exc).__name__}")
                continue
            space.append(c)

        def host(*a, _tut=tut, **c):
            return _tut.host(*a, **c)

        graph = wl.gpu_oracle(host, space, None, rep_ms=5.0)(0, args)
        eager, wall = eager_times(host, space, args)
        print(f"\n{tut.name} {shape}: {len(space)} configs (us per run)")
        print("config | graph | eager | wall | eager/graph")
        for i, c in enumerate(space):
            ratio = eager[i] / (graph[i] * 1e3)
            print(f"{i} {c} | {graph[i] * 1e3:.2f} | {eager[i]:.2f} | {wall[i]:.2f} | {ratio:.4f}")
        for name, times in (("graph", [g * 1e3 for g in graph]), ("eager", eager), ("wall", wall)):
            best = min(range(len(space)), key=lambda j: times[j])
            print(f"best by {name}: config {best}; its eager time {eager[best]:.2f} us "
                  f"(eager regret {eager[best] / min(eager) - 1:.2%}), graph regret "
                  f"{graph[best] / min(graph) - 1:.2%}")


if __name__ == "__main__":
    main()
