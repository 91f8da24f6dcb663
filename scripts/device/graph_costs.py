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


def sample_graphs(backend, n: int = 2**24, k: int = 32) -> dict[str, float]:
    """A sample of k runs captured call by call vs one captured call composed k times
    (cuda_compose): host µs to capture, device µs per run (median of 20 samples)."""
    x = torch.randn(n, device="cuda")
    host(x, None)
    pool = backend.graph_pool()
    row: dict[str, float] = {}
    graphs = {}
    for name, compose in (("captured", False), ("composed", True)):
        backend._compose = compose
        took = []
        for _ in range(6):  # the first one loads the driver library (composed): not counted
            start = time.perf_counter()
            graphs[name] = backend.capture(lambda: host(x, None), k, pool)
            took.append(time.perf_counter() - start)
        row[f"{name}_capture_us"] = statistics.median(took[1:]) * 1e6
    backend._compose = True
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(20)] for name in graphs}
    for name in graphs:
        graphs[name].replay()  # upload
    torch.cuda.synchronize()
    for i in range(20):
        for name, graph in graphs.items():
            s, e = events[name][i]
            s.record()
            graph.replay()
            e.record()
    torch.cuda.synchronize()
    for name in graphs:
        row[f"{name}_us_per_run"] = statistics.median(s.elapsed_time(e) for s, e in events[name]) * 1e3 / k
    return {key: round(v, 2) for key, v in row.items()}


def main() -> None:
    backend = get_backend()
    print(json.dumps({n: costs(backend, n) for n in (2**16, 2**24)}))
    print(json.dumps({"sample of 32 runs, 2^24": sample_graphs(backend)}))


if __name__ == "__main__":
    main()
