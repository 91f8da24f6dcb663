"""Host costs of graph measurement on this GPU: an eager run of examples/scale.py's host function,
a capture of one run, a replay, an event pair (medians of 50, µs). Prints one JSON line."""

from __future__ import annotations

import json
import statistics
import time

import torch
import triton

from examples.scale import scale_kernel
from triton_dist._backends import get_backend


def host(x, y, BLOCK=1024, num_warps=4):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, 2.0, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    return out


def median_us(fn, n=50) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def costs(backend, n: int) -> dict[str, float]:
    x = torch.randn(n, device="cuda")
    host(x, None)
    torch.cuda.synchronize()
    pool = backend.graph_pool()
    graphs = []
    row = {"eager_us": median_us(lambda: host(x, None)),
           "capture_us": median_us(lambda: graphs.append(backend.capture(lambda: host(x, None), 1, pool)), 20)}
    row["replay_us"] = median_us(graphs[-1].replay)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    row["event_pair_us"] = median_us(lambda: (start.record(), end.record()))
    torch.cuda.synchronize()
    return {k: round(v, 1) for k, v in row.items()}


def main() -> None:
    backend = get_backend()
    print(json.dumps({n: costs(backend, n) for n in (2**16, 2**24)}))


if __name__ == "__main__":
    main()
