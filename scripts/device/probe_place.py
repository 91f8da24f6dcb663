"""Does a memory-bound kernel's time depend on where its tensors lie (issue 16)? The load probe
of 2026-12-03 06:48 UTC (``probe_load.py``) found the P7 oracle's figure for layer norm 8192 x
4096 config 8 3 % under the same config's ~3 ms graph captured in the tuner's shared graph pool
(softmax 8192^2 config 14: 1.2 %), while every other config agreed within ~0.5 %, and the
default's misses since are near-ties that it ranks opposite to the oracle in every trial of one
run and like it in the next (softmax configs 6/14, layer norm 8/9).

The oracle (``workloads.gpu_oracle``) captures each config into a graph with a private memory
pool of its own, so each config's output lands at its own address; the tuner's graphs share one
pool. Here the oracle itself (``gpu_oracle`` over the chosen configs: a ~3 ms graph each, an
untimed replay before each timed one, configs taking turns, median of 7 rounds) times them in
several placements:

- ``pool r``: graphs captured again, each in a new private pool (earlier ones kept alive, a
  scratch allocation of a random size between placements): the output's address changes;
- ``x + off``: the input copied to an offset into a larger buffer (the output as in ``pool``);
- ``shared r``: every config's graph captured into one pool shared by all of them (as the tuner's
  graphs are: ``Backend.graph_pool``), a new shared pool each time.

Printed per config: its figure in each placement over the fastest figure of the first placement,
and its spread over placements; then the fastest config of each placement.

Run on the GPU machine: python3 scripts/device/probe_place.py"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import torch
import tutorial_kernels as tk
import workloads as wl

CASES = {"layer_norm": ((8192, 4096), [6, 8, 9, 10]), "softmax": ((8192, 8192), [6, 9, 14]),
         "matmul": ((2048, 2048, 2048), [0, 1, 2])}
POOLS = 4
SHARED = 2
OFFSETS = [2 * 2**20 + 512, 5 * 2**20 + 4096]  # bytes
ROUNDS = 7
REP_MS = 3.0


def shifted(t: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of ``t`` that starts ``offset`` bytes into a buffer of its own (the buffer kept)."""
    size = t.element_size()
    buf = torch.empty(t.numel() + offset // size + 1, dtype=t.dtype, device=t.device)
    view = buf[offset // size: offset // size + t.numel()].view(t.shape)
    view.copy_(t)
    return view, buf


def measure(host, space, configs, args, keep: list, shared: bool = False) -> dict[int, float]:
    """The P7 oracle (``workloads.gpu_oracle``) over ``configs`` only, its graphs kept alive."""
    chosen = [space[i] for i in configs]

    def only(config, *a, **k):
        return any(config is c for c in chosen)

    figures = wl.gpu_oracle(host, space, only, REP_MS, rounds=ROUNDS, shared_pool=shared, keep=keep)(0, args)
    return {i: figures[i] for i in configs}


def main(names: list[str]) -> None:
    random.seed(0)
    device = torch.device("cuda")
    for name in names:
        shape, configs = CASES[name]
        tut = next(t for t in tk.tutorials(device) if t.name == name)
        args = tut.make_args(shape, device)

        def host(*a, _t=tut, **c):
            return _t.launch(_t.kernel, *a, **c)

        keep: list = []
        figures: dict[str, dict[int, float]] = {}
        for r in range(POOLS):
            keep.append(torch.empty(random.randint(1, 64) * 2**20 + random.randint(0, 4095) * 16,
                                    dtype=torch.uint8, device=device))
            figures[f"pool {r}"] = measure(host, tut.space, configs, args, keep)
        for off in OFFSETS:
            x, buf = shifted(args[0], off)
            keep.append(buf)
            figures[f"x+{off}"] = measure(host, tut.space, configs, (x, *args[1:]), keep)
        for r in range(SHARED):
            keep.append(torch.empty(random.randint(1, 64) * 2**20, dtype=torch.uint8, device=device))
            figures[f"shared {r}"] = measure(host, tut.space, configs, args, keep, shared=True)
        base = min(figures["pool 0"].values())
        cols = list(figures)
        print(f"{name} {shape}: per-run time over the fastest of 'pool 0' ({base * 1e3:.2f} us)")
        print("  config | " + " | ".join(cols) + " | spread %")
        for i in configs:
            vals = [figures[c][i] for c in cols]
            print(f"  {i:6d} | " + " | ".join(f"{v / base:.4f}" for v in vals)
                  + f" | {100 * (max(vals) / min(vals) - 1):.2f}")
        firsts = [min(figures[c], key=figures[c].get) for c in cols]
        print("  fastest per placement: " + ", ".join(f"{c}: {f}" for c, f in zip(cols, firsts, strict=True)))
        del keep
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:] or list(CASES))
