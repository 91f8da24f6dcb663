"""The tuned function P5's CPU child processes call: module level, so its source hash (part of
the cache file name) is the same in every process."""

from __future__ import annotations

from workloads import spin

from triton_dist.tune import autotune


def key_fn(n: int) -> tuple:
    return (n,)


@autotune([{"BLOCK": b} for b in (64, 128, 256, 512)], key_fn)
def tuned(n: int, BLOCK: int) -> int:
    spin(20.0 * (1.0 + abs(BLOCK - 256) / 256))
    return n
