"""Does a launch right after another config's run cost more (issue 16, contextual on softmax
8192 x 8192 picking config 6 over 14, which 200 back-to-back eager launches and graph replays both
find 3 % faster)? Two configs, A and B, timed in samples of ``k`` launches in one event pair,
behind a device sleep, in four patterns, 20 rounds each (µs per launch, medians):

- ``alternate k``: A x k, B x k, A x k, ... (what interleaved tuning does; k = 1 is the eager tuner,
  k ~ 1 ms of launches is contextual_autotune's sample);
- ``alternate k, first untimed``: the same, the pair opened after the sample's first launch;
- ``same k``: B x k after B x k (no switch).

Run on the GPU machine from the repository root: ``python3 scripts/device/probe_switch.py``."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import tutorial_kernels as tk

ROUNDS = 20


def sample(host, args, config, k: int, skip_first: bool) -> tuple[torch.cuda.Event, torch.cuda.Event]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if skip_first:
        host(*args, **config)
    start.record()
    for _ in range(k - int(skip_first)):
        host(*args, **config)
    end.record()
    return start, end


def pattern(host, args, configs, k: int, skip_first: bool, same: bool) -> dict[int, float]:
    pairs: dict[int, list[tuple[Any, Any, int]]] = {i: [] for i in range(len(configs))}
    torch.cuda.synchronize()
    torch.cuda._sleep(5_000_000)  # the device ahead of the host for the whole pattern
    for _ in range(ROUNDS):
        for i, config in enumerate(configs):
            if same:  # the sample follows a sample of its own config
                sample(host, args, config, k, False)
            s, e = sample(host, args, config, k, skip_first)
            pairs[i].append((s, e, k - int(skip_first)))
    torch.cuda.synchronize()
    return {i: statistics.median(s.elapsed_time(e) / n * 1e3 for s, e, n in p) for i, p in pairs.items()}


def main() -> None:
    device = torch.device("cuda")
    cases = {"softmax": ((8192, 8192), (6, 14)), "layer_norm": ((8192, 4096), (6, 8))}
    for tut in tk.tutorials(device):
        if tut.name not in cases:
            continue
        shape, chosen = cases[tut.name]
        args = tut.make_args(shape, device)
        configs = [tut.space[i] for i in chosen]
        for c in configs:
            tut.host(*args, **c)
        per_launch = tut.host
        print(f"\n{tut.name} {shape}: configs {chosen} = {configs}")
        for k in (1, 2, 7, 28):
            for skip_first, same, name in ((False, False, "alternate"), (True, False, "alternate, first untimed"),
                                           (False, True, "same")):
                if skip_first and k == 1:
                    continue
                times = pattern(per_launch, args, configs, k, skip_first, same)
                print(f"k={k:2d} {name:26s}: " + ", ".join(f"config {chosen[i]} {t:.2f} us" for i, t in times.items())
                      + f"  (B/A {times[1] / times[0]:.4f})")


if __name__ == "__main__":
    main()
