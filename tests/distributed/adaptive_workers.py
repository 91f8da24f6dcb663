"""Rank functions for the multi-rank adaptive tests (module level: spawned children import them)."""

from __future__ import annotations

import torch.distributed as dist

from triton_dist.tune import autotune

# Per-rank cost (ms) of each config; config 3 is the best. Alone, rank 0 would keep config 0
# (as fast as config 3 and earlier in the space, so it would win the tie) and rank 1 would drop
# it; the MAX over both (3.0) drops it on both ranks.
COST_MS = {0: [1.0, 5.0, 1.01, 1.0], 1: [3.0, 5.0, 1.01, 1.0]}
CALLS: dict[int, int] = {}
_COST_NOW: list[float] = []


def _key(n, rank_cost=None):
    return (n,)


def _bench(fn, n_warmup, n_repeat):
    """Deterministic timings from this rank's cost table; runs fn like a real benchmarker."""
    for _ in range(n_warmup):
        fn()
    return [_COST_NOW[fn() % 10] for _ in range(n_repeat)]


@autotune(config_space=[{"cfg": c} for c in range(4)], key_fn=_key, do_bench=_bench, adaptive=True)
def host(n, rank_cost, cfg):
    CALLS[cfg] = CALLS.get(cfg, 0) + 1
    _COST_NOW[:] = rank_cost
    return n * 10 + cfg


def adaptive_group(rank, world_size, alone=False):
    value = host(7, COST_MS[rank], autotune_pg=None if alone else dist.group.WORLD)
    return {"value": value, "calls": CALLS}


@autotune(config_space=[{"cfg": c} for c in range(3)], key_fn=_key, do_bench=_bench, adaptive=True)
def host_bug(n, rank_cost, cfg):
    _COST_NOW[:] = rank_cost
    if cfg == 1 and dist.get_rank() == 1:
        raise TypeError("a bug in the host function on rank 1")
    return n * 10 + cfg


def adaptive_bug(rank, world_size):
    return host_bug(3, [1.0, 2.0, 3.0], autotune_pg=dist.group.WORLD)
