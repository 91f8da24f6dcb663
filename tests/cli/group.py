"""Two real gloo ranks (spawned processes) tuning with timing reuse; bounded in time."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

calls: Counter = Counter()
S3 = [{"c": 0}, {"c": 1}, {"c": 2}]
S4 = S3 + [{"c": 3}]


def host(n, c):
    calls[c] += 1
    return c, sum(range(n * (c + 1)))


def _tuner(space):
    from triton_dist.tune import autotune

    return autotune(config_space=list(space), key_fn=lambda n: ("n", n), n_warmup=0, n_repeat=2)(host)


def grow(rank: int, shared: str, private: str) -> dict[str, Any]:
    """Seed S3 for two keys in the shared root; then S4: all ranks on the shared root (one plan,
    only the new config and the old best measured), and rank 1 on an empty root of its own
    (plans differ: every config is measured, and no rank fails)."""
    import torch.distributed as dist

    from triton_dist.settings import override

    world = dist.group.WORLD
    out: dict[str, Any] = {}
    with override(TRITON_DIST_AUTOTUNE_DIR=shared):
        seed = _tuner(S3)
        seed(10, autotune_pg=world)
        seed(11, autotune_pg=world)
        out["seed_best"] = seed.best_config(10)["c"]
        dist.barrier()
        calls.clear()
        tuner = _tuner(S4)
        tuner(10, autotune_pg=world)
        out["same"] = {"calls": dict(calls), "best": tuner.best_config(10)["c"]}
    dist.barrier()
    calls.clear()
    with override(TRITON_DIST_AUTOTUNE_DIR=private if rank == 1 else shared):
        tuner = _tuner(S4)
        tuner(11, autotune_pg=world)
        out["differ"] = {"calls": dict(calls), "best": tuner.best_config(11)["c"]}
    return out


def _child(rank: int, port: int, out: str, args: tuple) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TRITON_DIST_DEVICE="cpu")
    try:
        import datetime

        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=60)  # the parent hosts the store: no port race
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
        result = {"ok": grow(rank, *args)}
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    Path(out).write_text(json.dumps(result, default=repr))
    os._exit(0)


def run_two_ranks(tmp: Path, *args: str, timeout_s: float = 120) -> list[dict[str, Any]]:
    import datetime

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout_s + 60))
    port = store.port
    ctx = mp.get_context("spawn")
    outs = [tmp / f"rank{r}.json" for r in range(2)]
    procs = [ctx.Process(target=_child, args=(r, port, str(outs[r]), args)) for r in range(2)]
    for p in procs:
        p.start()
    results = []
    for p, out in zip(procs, outs, strict=True):
        p.join(timeout_s)
        if p.is_alive():
            p.kill()
            p.join(5)
            results.append({"hung": True})
        else:
            results.append(json.loads(out.read_text()) if out.exists() else {"died": p.exitcode})
    return results
