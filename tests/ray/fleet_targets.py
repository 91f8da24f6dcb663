"""A tuned function whose fastest config depends on the node it runs on, for the fleet tests
(``tests/ray/test_ray_fleet.py``): the node's raylet sets ``FLEET_TEST_FAST_CFG``, the way two
kinds of accelerator favour different block sizes. Imported by the actors as
``tests.ray.fleet_targets`` (the workers' ``sys.path`` holds the driver's working directory).
"""

from __future__ import annotations

import os
import time
from typing import Any

from triton_dist.tune import autotune

#: ms per call: the node's fast config, and every other one
FAST_MS, SLOW_MS = 0.5, 30.0  # a wide gap: the tests run on loaded machines
CALLS: dict[int, int] = {}


@autotune(config_space=[{"block": 32}, {"block": 64}, {"block": 128}], key_fn=lambda n: (n,),
          n_warmup=1, n_repeat=5)
def scaled(n: int, *, block: int) -> int:
    CALLS[block] = CALLS.get(block, 0) + 1
    fast = int(os.environ.get("FLEET_TEST_FAST_CFG", "0"))
    time.sleep((FAST_MS if block == (32, 64, 128)[fast] else SLOW_MS) / 1000.0)
    return n * 10  # the same for every config: the correctness check passes


def make_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    time.sleep(float(case.get("hold_s", 0)))  # a case that is still running when the test interrupts
    return (int(case["n"]),), {}
