"""The tuned function of P4's CPU campaign: configs of known cost (sleeping, so that several
actors share a small machine without slowing each other), and its argument builder."""

from __future__ import annotations

import time
from typing import Any

from triton_dist.tune import autotune

#: per-run cost of each config in ms
COSTS_MS = (4.0, 6.0, 5.0, 7.0)


def key_fn(n: int, scale: float) -> tuple:
    return (n,)


@autotune([{"cost_ms": c} for c in COSTS_MS], key_fn)
def sleepy(n: int, scale: float, *, cost_ms: float) -> int:
    time.sleep(cost_ms * scale / 1e3)
    return n


def make_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    return (int(case["n"]), float(case.get("scale", 1.0))), {}
