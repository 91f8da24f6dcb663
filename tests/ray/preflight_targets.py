"""A tuned function whose key reads the process's environment, as CPU operators' keys often do
(the best block size depends on the threads the operator gets): imported by the pre-flight tests
as ``tests.ray.preflight_targets``."""

from __future__ import annotations

import os
import time
from typing import Any

from triton_dist.tune import autotune


def threads_key(n: int) -> tuple:
    return (n, int(os.environ.get("OMP_NUM_THREADS", "1")))


@autotune(config_space=[{"block": 1}, {"block": 4}], key_fn=threads_key, n_warmup=1, n_repeat=2)
def threaded(n: int, *, block: int) -> int:
    time.sleep(0.0005 / block)
    return n


def make_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    return (int(case["n"]),), {}
