"""The runs and runs per sample each candidate gets with TRITON_DIST_GRAPH_PLACEMENTS=1 and 2
(examples/scale.py on 2^22 elements, six configs), tuned in both orders. Run from the repository
root with PYTHONPATH=. (H200, 2026-12-03: 759-766 runs per candidate with two, 767-771 with one:
the second graph's upload replaces a sample)."""

from __future__ import annotations

import os

import torch
import triton

from examples.scale import key_fn, scale_kernel
from triton_dist.tune import autotune


def host(x, alpha, *, BLOCK, num_warps):
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return y


space = [{"BLOCK": b, "num_warps": w} for b in (256, 1024, 4096) for w in (4, 8)]
tuner = autotune(space, key_fn)(host)
x = torch.randn(2**22, device="cuda")
for placements in (2, 1, 1, 2):
    os.environ["TRITON_DIST_GRAPH_PLACEMENTS"] = str(placements)
    entry = tuner.tune(x, 2.0, force=True, write_cache=False)
    rows = [(c.get("runs"), c.get("runs_per_sample"), round(c["time_ms"] * 1e3, 2))
            for c in entry["candidates"]]
    print(f"placements {placements}: (runs, runs/sample, us) {rows}")
