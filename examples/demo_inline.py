"""The training side of the README's main job: start warm from a campaign's cache.

Reads the campaign file, then calls every tuned function exactly as a job would:
single-rank cases in this process, multi-rank cases in a real torch.distributed job (gloo ranks
on the CPU, ``autotune_pg`` = the job's world group). Run it with
``TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict``: a miss is then an error naming the function, the key
and why no entry matched, so a clean run proves that every rank hit and nothing was measured.

    python -m examples.demo_inline [examples/campaigns/cpu.yaml]
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import torch.multiprocessing as mp

from ray_runner.spec import load_campaign
from ray_runner.worker import CaseContext, build_args, load_target


def _call(target, case, ctx, pg=None):
    tuner = load_target(target.function)
    args, kwargs = build_args(target.args, case, ctx)
    start = time.perf_counter()
    tuner(*args, autotune_pg=pg, **kwargs)
    elapsed_ms = (time.perf_counter() - start) * 1e3
    best = tuner.best_config(*args, **kwargs)
    return elapsed_ms, {k: getattr(v, "all_kwargs", lambda v=v: v)() for k, v in best.items()}


def _rank_main(rank, world_size, port, targets, results):
    import torch.distributed as dist

    from triton_dist._backends import get_backend
    from triton_dist.dist import init_distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    init_distributed(rank, world_size, timeout_s=120)
    device = get_backend().device()
    try:
        for target in targets:
            for case in target.all_cases():
                ctx = CaseContext(rank, world_size, device, dist.group.WORLD)
                ms, best = _call(target, case, ctx)  # autotune_pg=None -> the registered world group
                results.put((rank, target.function, case, ms, best))
    finally:
        dist.destroy_process_group()


def main() -> int:
    campaign = load_campaign(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "campaigns" / "cpu.yaml")
    mode = os.environ.get("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "off")
    print(f"campaign {campaign.name!r}; TRITON_DIST_AUTOTUNE_CACHE_ONLY={mode}")
    from triton_dist._backends import get_backend

    device = get_backend().device()
    for target in campaign.targets:
        if target.world_size != 1:
            continue
        for case in target.all_cases():
            ms, best = _call(target, case, CaseContext(0, 1, device))
            print(f"  1 rank   {target.function} {case}: first call {ms:7.1f} ms, config {best}")
    for world_size in sorted({t.world_size for t in campaign.targets if t.world_size > 1}):
        targets = [t for t in campaign.targets if t.world_size == world_size]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        procs = [ctx.Process(target=_rank_main, args=(r, world_size, port, targets, results))
                 for r in range(world_size)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(300)
        if any(p.exitcode != 0 for p in procs):
            print(f"a {world_size}-rank job failed (exit codes {[p.exitcode for p in procs]})", file=sys.stderr)
            return 1
        rows = []
        while not results.empty():
            rows.append(results.get())
        for rank, fn, case, ms, best in sorted(rows, key=lambda r: (str(r[2]), r[0])):
            print(f"  rank {rank}/{world_size} {fn} {case}: first call {ms:7.1f} ms, config {best}")
    print("every call was served from the cache" if mode == "strict" else "done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
