"""Tuned functions for the Ray fault tests (imported by the actors as
``tests.reliability.ray_fault_targets``: their ``sys.path`` holds the driver's working directory).
"""

from __future__ import annotations

import time
from typing import Any

from triton_dist.tune import autotune

#: per-config cost in ms: about a second per case (1 warm-up + 3 timed runs of 3 configs)
COST_MS = (120.0, 40.0, 80.0)
ILLEGAL = "CUDA error: an illegal memory access was encountered"
_poisoned = [False]


def _key(n: int, **_: Any) -> tuple:
    return (n,)


@autotune([{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], _key, n_warmup=1, n_repeat=3)
def slow_host(n: int, *, cfg: int) -> int:
    time.sleep(COST_MS[cfg] / 1000.0)
    return n * 10


def _broken_synchronize() -> None:
    raise RuntimeError(ILLEGAL)


@autotune([{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], _key, n_warmup=1, n_repeat=2)
def poisoning_host(n: int, *, cfg: int) -> int:
    """Config 1 does on the CPU what an out-of-bounds kernel does on CUDA: it fails, and from then
    on the process's device is unusable (every synchronise and every later run fails)."""
    if _poisoned[0]:
        raise RuntimeError(ILLEGAL)
    if cfg == 1:
        from triton_dist._backends import get_backend

        _poisoned[0] = True
        get_backend().synchronize = _broken_synchronize  # sticky, like a CUDA context
        raise RuntimeError(ILLEGAL)
    time.sleep(0.002 * (cfg + 1))
    return n


def make_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    return (int(case["n"]),), {}
