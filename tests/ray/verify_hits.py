"""Run in a fresh process: call tuned functions in cache-only mode and prove nothing is measured.

``python -m tests.ray.verify_hits SPEC_JSON`` with ``SPEC_JSON`` = ``{"world_size": W, "calls":
[[function, builder, case], ...]}``. With W > 1 it is started once per rank (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and calls with ``autotune_pg`` = the world group,
as a multi-rank training job would. ``"init": true`` initialises the gloo world also for W = 1
(``torchrun --nproc_per_node=1``); ``"registered": true`` calls without ``autotune_pg`` (the world
group ``init_distributed`` registered is used, as in a training script that never names it).
Measuring anything raises; so does a miss under
``TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict``. Prints one JSON line per call.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    spec = json.loads(sys.argv[1])
    world_size = int(spec["world_size"])
    rank = int(os.environ.get("RANK", "0"))

    from triton_dist import _tuning
    from triton_dist._backends import get_backend

    def refuse(*args, **kwargs):
        raise AssertionError("a cache-only run measured candidates")

    _tuning.measure_candidates = refuse  # any tuning would go through here

    group = None
    if world_size > 1 or spec.get("init"):
        from triton_dist.dist import init_distributed

        group = init_distributed(timeout_s=60)

    from ray_runner.worker import CaseContext, build_args, load_target

    device = get_backend().device()
    for function, builder, case in spec["calls"]:
        tuner = load_target(function)
        args, kwargs = build_args(builder, case, CaseContext(rank, world_size, device, group))
        if group is not None and not spec.get("registered"):
            tuner(*args, autotune_pg=group, **kwargs)
        else:
            tuner(*args, **kwargs)
        module = sys.modules[tuner.fn.__module__]
        calls = dict(getattr(module, "CALLS", {}))
        print(json.dumps({"function": function, "case": case, "rank": rank,
                          "best": repr(tuner.best_config(*args, **kwargs)), "calls": calls}), flush=True)
        if calls:
            module.CALLS.clear()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # skip the interpreter's teardown of the gloo group (as tests/distributed/harness.py does): with
    # a peer already gone, torch's threads of the group could abort the process ("terminate called
    # without an active exception", seen once in CI) after every line had been printed
    os._exit(code)
