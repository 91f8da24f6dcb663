"""Workloads the benchmarks tune: host functions, config spaces, sizes and what each config costs.

On the CPU they are host functions that busy-wait for a known time (a cost model shaped like an
elementwise kernel or a tiled GEMM, with injected noise on top of the machine's own), so the
oracle cost of every config is known exactly. On a GPU they are the project's own examples, the
elementwise ``examples/scale.py`` kernel and the tiled ``examples/gemm.py`` matmul, and the oracle
replays CUDA graphs of many runs (kernel time, not launch rate), configs interleaved in rounds
after a GPU warm-up (:func:`gpu_oracle`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: injected noise of the CPU workloads: per-run lognormal spread and rare slow runs
NOISE_SIGMA = 0.03
OUTLIER_P = 0.02
OUTLIER_FACTOR = 1.5

_rng = random.Random(0)


def seed_noise(seed: int) -> None:
    _rng.seed(seed)


def spin(us: float) -> None:
    """Busy-wait ``us`` microseconds (a host function of known cost)."""
    end = time.perf_counter_ns() + int(us * 1e3)
    while time.perf_counter_ns() < end:
        pass


def noisy(us: float) -> float:
    factor = math.exp(_rng.gauss(0.0, NOISE_SIGMA))
    if _rng.random() < OUTLIER_P:
        factor *= OUTLIER_FACTOR
    return us * factor


def config_key(config: dict[str, Any]) -> tuple:
    """A hashable identity of a config dict (plain values by value, objects by identity)."""
    return tuple(sorted((k, v if isinstance(v, (int, float, str, bool)) else id(v))
                        for k, v in config.items()))


@dataclasses.dataclass
class Workload:
    """One tunable host function with its sizes; ``oracle_ms(size)`` is each config's true cost
    (``inf`` for configs that are pruned or cannot run)."""

    name: str
    sizes: list[int]
    space: list[dict[str, Any]]
    host: Callable[..., Any]
    key_fn: Callable[..., Any]
    make_args: Callable[[int], tuple]
    oracle: Callable[[int, tuple], list[float]]
    prune_fn: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        self._index = {config_key(c): i for i, c in enumerate(self.space)}
        self._oracle: dict[int, list[float]] = {}

    def oracle_ms(self, size: int, args: tuple) -> list[float]:
        """Each config's true cost at ``size`` (ms), computed once; with ``BENCH_ORACLE_CACHE``
        set, kept in that JSON file for the next benchmark process (GPU oracles take minutes)."""
        if size not in self._oracle:
            store = os.environ.get("BENCH_ORACLE_CACHE")
            key = f"{self.name}/{size}/{len(self.space)}"
            saved = json.loads(Path(store).read_text()) if store and Path(store).exists() else {}
            if key in saved:
                self._oracle[size] = [math.inf if t is None else float(t) for t in saved[key]]
            else:
                self._oracle[size] = self.oracle(size, args)
                if store:
                    saved[key] = [t if math.isfinite(t) else None for t in self._oracle[size]]
                    Path(store).write_text(json.dumps(saved, indent=1, sort_keys=True))
        return self._oracle[size]

    def counted(self, run_host: bool = True) -> tuple[Callable[..., Any], Counter]:
        """The host function, counting its runs per config index (device time = runs x cost);
        with ``run_host=False`` it only counts (replaying recorded timings)."""
        counts: Counter = Counter()
        host, index = self.host, self._index

        @functools.wraps(host)
        def run(*args: Any, **config: Any) -> Any:
            counts[index[config_key(config)]] += 1
            return host(*args, **config) if run_host else None

        return run, counts


# ---------------------------------------------------------------------------- CPU workloads

def _elementwise_us(n: int, BLOCK: int, num_warps: int) -> float:
    # A memory-bound kernel: efficiency peaks when the block matches the warps (256 elements per
    # warp), and fewer, larger blocks save a per-wave cost. Several configs tie exactly.
    eff = 1.0 - 0.08 * abs(math.log2(BLOCK / (num_warps * 256)))
    waves = math.ceil(n / BLOCK / 64)
    return 20.0 + n * 0.004 / eff + 2.0 * waves


def cpu_elementwise_host(n: int, *, BLOCK: int, num_warps: int) -> int:
    spin(noisy(_elementwise_us(n, BLOCK, num_warps)))
    return n


_GEMM_TILES = [  # BM, BN, BK, num_warps, num_stages, relative rate
    (64, 64, 32, 4, 3, 0.62), (128, 256, 64, 8, 3, 1.0), (256, 128, 64, 8, 3, 0.98),
    (128, 128, 64, 8, 4, 0.93), (128, 128, 32, 4, 4, 0.88), (128, 64, 32, 4, 4, 0.80),
    (64, 128, 32, 4, 4, 0.80), (64, 64, 64, 4, 4, 0.66),
]


def _gemm_us(s: int, BM: int, BN: int, BK: int, num_warps: int, num_stages: int) -> float:
    # Tile quantisation: a wave is 16 programs; large tiles win on large matrices only.
    rate = next(r for bm, bn, bk, w, st, r in _GEMM_TILES
                if (bm, bn, bk, w, st) == (BM, BN, BK, num_warps, num_stages))
    tiles = math.ceil(s / BM) * math.ceil(s / BN)
    waves = math.ceil(tiles / 16)
    return 30.0 + waves * BM * BN * s / (rate * 1.0e5)


def cpu_gemm_host(s: int, *, BM: int, BN: int, BK: int, num_warps: int, num_stages: int) -> int:
    spin(noisy(_gemm_us(s, BM, BN, BK, num_warps, num_stages)))
    return s


@functools.lru_cache(maxsize=1)
def call_overhead_ms() -> float:
    """What a CPU workload's host call costs beyond its spin (the call, the noise draw, the clock
    reads): added to the cost model, so that the oracle is the real cost of a run."""
    def host(n: int, *, BLOCK: int, num_warps: int) -> int:
        spin(noisy(0.0))
        return n

    best = math.inf
    for _ in range(500):
        start = time.perf_counter_ns()
        host(1, BLOCK=1, num_warps=1)
        best = min(best, time.perf_counter_ns() - start)
    return best / 1e6


def _size_key(size: int) -> tuple:
    return (size,)


def cpu_workloads(quick: bool = False) -> list[Workload]:
    ew_space = [{"BLOCK": b, "num_warps": w} for b in (256, 512, 1024, 2048, 4096) for w in (2, 4, 8)]
    gemm_space = [{"BM": bm, "BN": bn, "BK": bk, "num_warps": w, "num_stages": st}
                  for bm, bn, bk, w, st, _ in _GEMM_TILES]
    ew_sizes = [2**12, 2**14] if quick else [2**12, 2**14, 2**16, 2**18]
    gemm_sizes = [64, 128] if quick else [64, 128, 256, 512]
    if quick:
        ew_space, gemm_space = ew_space[::4], gemm_space[::3]
    return [
        Workload("elementwise", ew_sizes, ew_space, cpu_elementwise_host, _size_key,
                 make_args=lambda n: (n,),
                 oracle=lambda n, args: [_elementwise_us(n, **c) / 1e3 + call_overhead_ms() for c in ew_space]),
        Workload("gemm", gemm_sizes, gemm_space, cpu_gemm_host, _size_key,
                 make_args=lambda s: (s,),
                 oracle=lambda s, args: [_gemm_us(s, **c) / 1e3 + call_overhead_ms() for c in gemm_space]),
    ]


def spin_workload(costs_us: Sequence[float], name: str = "spin") -> Workload:
    """Configs of known cost ``base x factor`` (P2: tuning wall time against the ideal)."""
    factors = [1.0, 1.25, 0.9, 1.5, 1.1, 2.0, 0.95, 1.3]
    space = [{"factor": f} for f in factors]

    def host(base_us: float, *, factor: float) -> float:
        spin(base_us * factor)
        return base_us

    return Workload(name, list(costs_us), space, host, lambda base_us: (base_us,),
                    make_args=lambda base: (float(base),),
                    oracle=lambda base, args: [base * f / 1e3 + call_overhead_ms() for f in factors])


# ---------------------------------------------------------------------------- GPU workloads

def gpu_oracle(host: Callable[..., Any], space: list[dict[str, Any]],
               prune_fn: Callable[..., Any] | None, rep_ms: float,
               rounds: int = 9, shared_pool: bool = False,
               keep: list[Any] | None = None, queued: bool = False) -> Callable[[int, tuple], list[float]]:
    """Each config's kernel time from CUDA-graph replays, interleaved: the configs take turns.

    The first GPU run measured the configs one after the other (``do_bench_cudagraph`` each):
    the GPU, idle at 345 MHz, ramped up during the first configs and throttled under long GEMMs
    in later ones, so one config measured 12% apart from the tuner's figure, which disagreed with
    every strategy including ``triton.testing.do_bench``. Now: spin the GPU to steady clocks
    first, capture one graph per config (about ``rep_ms`` of back-to-back runs), then replay the
    graphs in ``rounds`` rounds, the order rotating each round; a config's figure is the median
    of its rounds (per run).

    Each config's graph has a memory pool of its own (its outputs at an address of their own);
    ``shared_pool``: one pool for every config, as the tuner's graphs share one
    (``scripts/device/probe_place.py``). ``keep``: the graphs are appended to it, alive, so
    that a later oracle's pools lie elsewhere. ``queued``: every round's replays queued back to
    back with one synchronisation at the end, the device never idle (the tuner's own load), where
    by default every sample is synchronised: a GEMM at the power cap reorders configs within ~1 %
    with the load pattern (``scripts/device/probe_load.py matmul``, 2026-12-03)."""
    import torch

    def warm(seconds: float) -> None:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            torch.cuda._sleep(1_000_000)
            torch.cuda.synchronize()

    def oracle(size: int, args: tuple) -> list[float]:
        graphs: dict[int, tuple[Any, int]] = {}
        stream = torch.cuda.Stream()
        pool = torch.cuda.graph_pool_handle() if shared_pool else None
        warm(0.2)
        with torch.cuda.stream(stream):
            for i, config in enumerate(space):
                if prune_fn is not None and not prune_fn(config, *args):
                    continue
                try:
                    def run(c: dict[str, Any] = config) -> Any:
                        return host(*args, **c)

                    run()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(5):
                        run()
                    end.record()
                    torch.cuda.synchronize()
                    n = max(1, min(1000, int(rep_ms / max(start.elapsed_time(end) / 5, 1e-4))))
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        for _ in range(n):
                            run()
                    torch.cuda.synchronize()
                    graphs[i] = (graph, n)
                except Exception:  # noqa: BLE001 - a config that cannot run here (resources)
                    torch.cuda.synchronize()
            samples: dict[int, list[float]] = {i: [] for i in graphs}
            pending: list[tuple[int, Any, Any, int]] = []
            order = list(graphs)
            for r in range(rounds):
                shift = r % max(len(order), 1)
                for i in order[shift:] + order[:shift]:
                    graph, n = graphs[i]
                    graph.replay()  # untimed: the same state before every timed replay
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    graph.replay()
                    end.record()
                    pending.append((i, start, end, n))
                    if not queued:
                        end.synchronize()
        torch.cuda.synchronize()
        for i, start, end, n in pending:
            samples[i].append(start.elapsed_time(end) / n)
        if keep is not None:
            keep.append(graphs)
        return [statistics.median(samples[i]) if i in samples else math.inf for i in range(len(space))]

    return oracle


def gpu_oracle_placed(host: Callable[..., Any], space: list[dict[str, Any]],
                      prune_fn: Callable[..., Any] | None, rep_ms: float, placements: int,
                      rounds: int = 5, seed: int = 0) -> Callable[[Any, tuple], list[list[float]]]:
    """``gpu_oracle`` in ``placements`` memory placements: one figure per config per placement.

    A memory-bound kernel's time depends on where its tensors lie: on an H200, layer norm
    8192 x 4096 and softmax 8192^2 configs moved by up to 2 % from one set of private graph
    pools to the next, not all together, so a pair of configs < 1 % apart swapped places from
    one placement to another (``scripts/device/probe_place.py``, 2026-12-03). A user's step puts
    its tensors wherever its allocator does, so a config's time is a distribution over
    placements; one placement is one draw. Here each placement captures every config anew while
    the earlier placements' graphs stay alive, after a scratch allocation of a random size (from
    ``seed``): its outputs lie elsewhere. The caller averages (or compares) the placements."""
    import torch

    def oracle(size: Any, args: tuple) -> list[list[float]]:
        rng = random.Random(seed)
        keep: list[Any] = []
        figures = []
        for p in range(placements):
            if p:
                keep.append(torch.empty(rng.randint(1, 64) * 2**20 + rng.randint(0, 4095) * 256,
                                        dtype=torch.uint8, device=torch.cuda.current_device()))
            figures.append(gpu_oracle(host, space, prune_fn, rep_ms, rounds=rounds, keep=keep)(size, args))
        del keep
        torch.cuda.synchronize()
        return figures

    return oracle


def mean_placements(figures: list[list[float]]) -> list[float]:
    """Each config's mean over placements (infinite where any placement could not time it)."""
    return [statistics.fmean(column) if all(math.isfinite(v) for v in column) else math.inf
            for column in zip(*figures, strict=True)]


def gpu_workloads(device: Any, quick: bool = False, oracle_rep_ms: float = 5.0) -> list[Workload]:
    import torch
    import triton

    from examples import gemm, scale

    ew_space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)}
                for b in (256, 512, 1024, 2048, 4096) for w in (2, 4, 8)]
    ew_sizes = [2**16, 2**20] if quick else [2**16, 2**18, 2**20, 2**22, 2**24, 2**26]
    gemm_sizes = [256, 1024] if quick else [256, 512, 1024, 2048, 4096, 8192]
    gemm_space = gemm.configs()

    def ew_args(n: int) -> tuple:
        return (torch.randn(n, device=device), 2.5)

    def gemm_args(s: int) -> tuple:
        g = torch.Generator(device="cpu").manual_seed(s)
        a = torch.randn(s, s, generator=g).to(torch.float16).to(device)
        b = torch.randn(s, s, generator=g).to(torch.float16).to(device)
        return (a, b)

    return [
        Workload("elementwise", ew_sizes, ew_space, scale.scale.fn, scale.key_fn, ew_args,
                 gpu_oracle(scale.scale.fn, ew_space, scale.prune_fn, oracle_rep_ms), scale.prune_fn),
        Workload("gemm", gemm_sizes, gemm_space, gemm.matmul.fn, gemm.key_fn, gemm_args,
                 gpu_oracle(gemm.matmul.fn, gemm_space, gemm.prune_fn, oracle_rep_ms), gemm.prune_fn),
    ]


def workloads_for(backend: Any, quick: bool = False) -> list[Workload]:
    if backend.kind == "cpu":
        return cpu_workloads(quick)
    return gpu_workloads(backend.device(), quick)
