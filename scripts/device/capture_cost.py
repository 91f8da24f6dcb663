"""Where the host time of one graph capture goes (P2, issue 16): graph mode's warm-up loop captures
every candidate once, ~0.2-0.4 ms of host time each on an H200 host against a host function of
~60 µs, and on a slow host that loop paces the device. Each step of ``base._capture`` (the torch
graph's construction, the capture stream's context, ``capture_begin``, the host function,
``capture_end``, the graph's instantiation), the whole ``Backend.capture`` and a graph of 25 runs
built from it are timed on their own, for layer norm 8192 x 4096's host function (Triton's
tutorial kernel), medians of ``REPS`` captures with the device kept busy (as in the loop).

Run on the GPU machine: python3 scripts/device/capture_cost.py"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import torch
import tutorial_kernels as tk

from triton_dist._backends import cuda_compose, get_backend

REPS = int(os.environ.get("REPS", "40"))


def main() -> None:
    backend = get_backend()
    device = backend.device()
    ln = next(t for t in tk.tutorials(device) if t.name == "layer_norm")
    args = ln.make_args((8192, 4096), device)
    config = ln.space[8]

    def host() -> object:
        return ln.host(*args, **config)

    for _ in range(3):
        host()
    torch.cuda.synchronize()
    pool = backend.graph_pool()
    stream = backend._capture_stream()
    clock = time.perf_counter_ns
    steps: dict[str, list[int]] = defaultdict(list)
    busy = torch.empty(1 << 20, device=device)
    keep = []
    for _ in range(REPS):
        torch.cuda._sleep(2_000_000)  # the device busy, as in the loop (~1 ms)
        t0 = clock()
        host()
        t1 = clock()
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        t2 = clock()
        ctx = torch.cuda.stream(stream)
        ctx.__enter__()
        t3 = clock()
        graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        t4 = clock()
        host()
        t5 = clock()
        graph.capture_end()
        t6 = clock()
        ctx.__exit__(None, None, None)
        t7 = clock()
        graph.instantiate()
        t8 = clock()
        keep.append(graph)
        t9 = clock()
        whole = backend.capture(host, 1, pool, replayed=False)
        t10 = clock()
        keep.append(whole)
        t11 = clock()
        built = cuda_compose.build(whole, 25)  # its graph of k runs, as before the timed rounds
        t12 = clock()
        keep.append(built)
        for name, value in (("eager host call", t1 - t0), ("CUDAGraph(keep_graph=True)", t2 - t1),
                            ("torch.cuda.stream() enter", t3 - t2), ("capture_begin", t4 - t3),
                            ("host call under capture", t5 - t4), ("capture_end", t6 - t5),
                            ("stream context exit", t7 - t6), ("instantiate", t8 - t7),
                            ("Backend.capture(replayed=False), whole", t10 - t9),
                            ("cuda_compose.build(capture, 25)", t12 - t11)):
            steps[name].append(value)
        busy.add_(1)
    torch.cuda.synchronize()
    print(f"layer norm 8192 x 4096, config {config}; {REPS} captures; µs, median / min / max")
    for name, values in steps.items():
        print(f"  {name:42s} {statistics.median(values) / 1e3:8.1f} {min(values) / 1e3:8.1f} {max(values) / 1e3:8.1f}")


if __name__ == "__main__":
    main()
