"""Does a graph-mode measurement's memory pool stay reserved after its graphs die, and which
pool strategy reuses memory across measurements (issue 16: each tuning of layer norm 8192 x 4096
left 66 MiB more reserved)? Five "measurements" (capture a 64 MiB-output function, replay, drop
the graph) per strategy; reserved memory and each measurement's host time after every one.

Run on the GPU machine: python3 scripts/device/pool_probe.py"""

from __future__ import annotations

import time

import torch

MIB = 2**20


def main() -> None:
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.float16)
    stream = torch.cuda.Stream()

    def measure(pool) -> float:
        start = time.perf_counter()
        graphs = []
        for _ in range(3):  # three candidates share the measurement's pool
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream):
                g.capture_begin(pool=pool)
                (x * 2).sum()
                g.capture_end()
            graphs.append(g)
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        del graphs
        return time.perf_counter() - start

    def report(name, make_pool, after=None) -> None:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_reserved()
        line = []
        for _ in range(5):
            pool = make_pool()
            try:
                took = measure(pool.id if hasattr(pool, "id") else pool)
            except RuntimeError as exc:
                line.append(f"failed: {str(exc)[:120]}")
                break
            if after is not None:
                after(pool)
            del pool
            line.append(f"{(torch.cuda.memory_reserved() - base) / MIB:.0f} MiB/{took * 1e3:.2f} ms")
        torch.cuda.empty_cache()
        print(f"{name:42s}: " + ", ".join(line) + f"; after empty_cache "
              f"{(torch.cuda.memory_reserved() - base) / MIB:.0f} MiB", flush=True)

    report("fresh graph_pool_handle per measurement", torch.cuda.graph_pool_handle)
    from triton_dist._backends import get_backend

    backend = get_backend()
    report("the CUDA backend's graph_pool()", backend.graph_pool)
    kept = [torch.cuda.MemPool()]
    report("one MemPool kept across measurements", lambda: kept[0])
    kept.clear()
    report("a MemPool per measurement, dropped", torch.cuda.MemPool)
    try:
        from torch._C import _cuda_releasePool  # noqa: F401
        print("torch._C._cuda_releasePool exists")
    except ImportError:
        pass
    handle = torch.cuda.graph_pool_handle()
    anchor = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        anchor.capture_begin(pool=handle)
        torch.zeros(1, device="cuda").add_(1)
        anchor.capture_end()
    report("one handle kept alive by an anchor graph", lambda: handle)
    print("MemPool.use_count of a fresh pool:", torch.cuda.MemPool().use_count())


if __name__ == "__main__":
    main()
