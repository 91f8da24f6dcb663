"""Why the tuner and the P3 oracle rank near-tied configs of long kernels differently (P3 >= 30 µs).

For examples/scale.py at 2^24 and 2^26 and examples/gemm.py at 2048: the benchmark's oracle
(benchmarks/workloads.py ``gpu_oracle``: ~5 ms graph bursts, 9 interleaved rounds) twice, the
tuner with ``graphs=True`` three times, and sampling schemes built from the same graphs: samples
of ~200 µs or ~1 ms, interleaved in 10 rounds, with or without an untimed one-run replay of the
same config right before each sample. For each: every config's time relative to the first
oracle's, the top three, and the regret of its choice against both oracles. Prints lines.
"""

from __future__ import annotations

import math
import statistics
import sys

import torch
import triton

sys.path.insert(0, "benchmarks")
import workloads as wl

from examples import gemm, scale
from triton_dist._backends import get_backend
from triton_dist.tune import autotune


def scheme(backend, host, space, keep, args, oracle, sample_us: float, primer: bool, rounds: int = 10) -> list[float]:
    pool = backend.graph_pool()
    fastest = min(oracle[i] for i in keep) * 1e3
    k = max(1, math.ceil(sample_us / fastest))
    graphs = {i: backend.capture(lambda c=space[i]: host(*args, **c), k, pool) for i in keep}
    ones = {i: backend.capture(lambda c=space[i]: host(*args, **c), 1, pool) for i in keep} if primer else {}
    events = {i: [] for i in keep}
    backend.synchronize()
    for r in range(rounds):
        order = keep[r % len(keep):] + keep[:r % len(keep)]
        torch.cuda._sleep(2_000_000)  # keep the GPU ahead of the host for the round
        for i in order:
            if primer:
                ones[i].replay()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graphs[i].replay()
            e.record()
            events[i].append((s, e))
        backend.synchronize()
    times = [math.inf] * len(space)
    for i in keep:
        times[i] = statistics.median(s.elapsed_time(e) / k for s, e in events[i])
    graphs.clear()
    ones.clear()
    return times


def report(name: str, times: list[float], o1: list[float], o2: list[float]) -> None:
    keep = [i for i, t in enumerate(o1) if math.isfinite(t)]
    best1, best2 = min(o1), min(o2)
    chosen = min(keep, key=lambda i: (times[i], i))
    top = sorted(keep, key=lambda i: times[i])[:3]
    rel = " ".join(f"{i}:{(times[i] / o1[i] - 1) * 100:+.2f}" for i in keep)
    print(f"  {name:<28} top {top} regret vs oracle 1 {100 * (o1[chosen] / best1 - 1):.2f} %, "
          f"vs oracle 2 {100 * (o2[chosen] / best2 - 1):.2f} % | time / oracle 1 - 1 (%) {rel}")


def case(backend, label: str, host, space, prune_fn, args) -> None:
    oracle_fn = wl.gpu_oracle(host, space, prune_fn, 5.0)
    o1 = oracle_fn(0, args)
    o2 = oracle_fn(0, args)
    keep = [i for i, t in enumerate(o1) if math.isfinite(t)]
    best = min(o1)
    print(f"{label}: fastest {best * 1e3:.1f} us; oracle 1 top {sorted(keep, key=lambda i: o1[i])[:4]} "
          f"(+%: {' '.join(f'{(o1[i] / best - 1) * 100:.2f}' for i in sorted(keep, key=lambda i: o1[i])[:4])}), "
          f"oracle 2 top {sorted(keep, key=lambda i: o2[i])[:4]}")
    report("oracle 2", o2, o1, o2)
    tuner = autotune(space, lambda *a, **k: ("probe",), prune_fn, graphs=True)(host)
    for trial in range(3):
        entry = tuner.tune(*args, force=True, write_cache=False)
        times = [math.inf] * len(space)
        for c in entry["candidates"]:
            if c["time_ms"] is not None:
                times[int(c["index"])] = c["time_ms"]
        report(f"tuner graphs=True #{trial + 1}", times, o1, o2)
    for sample_us in (200, 1000):
        for primer in (False, True):
            for trial in range(2):
                times = scheme(backend, host, space, keep, args, o1, sample_us, primer)
                report(f"{sample_us} us{' + primer' if primer else ''} #{trial + 1}", times, o1, o2)


def main() -> None:
    backend = get_backend()
    ew_space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)}
                for b in (256, 512, 1024, 2048, 4096) for w in (2, 4, 8)]
    for n in (2**24, 2**26):
        x = torch.randn(n, device="cuda")
        case(backend, f"scale 2^{n.bit_length() - 1}", scale.scale.fn, ew_space, None, (x, 2.5))
    g = torch.Generator(device="cpu").manual_seed(2048)
    a = torch.randn(2048, 2048, generator=g).to(torch.float16).cuda()
    b = torch.randn(2048, 2048, generator=g).to(torch.float16).cuda()
    case(backend, "gemm 2048", gemm.matmul.fn, gemm.configs(), gemm.prune_fn, (a, b))


if __name__ == "__main__":
    main()
