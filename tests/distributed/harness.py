"""Run a function on N real torch.distributed ranks (gloo, spawned processes), bounded in time.

Each rank's outcome comes back as a dict: ``{"ok": value}`` or ``{"error": type name,
"message": str}``; a rank that did not finish within the bound is reported as ``{"hung": True}``
(and killed), so a test can assert that no rank hangs.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def hosted_store(timeout_s: float) -> Any:
    """A TCP store this process hosts on a port the kernel picks (``.port``): the ranks join it
    as clients, so no other process can take the port between picking and binding it."""
    import datetime

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=timeout_s))


def _child(fn: Callable[..., Any], rank: int, world_size: int, port: int, env: dict[str, str],
           out: str, pg_timeout_s: float, args: tuple) -> None:
    os.environ.update(env)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    result: dict[str, Any]
    try:
        import datetime

        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=pg_timeout_s)
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
        # every rank is in the group before any runs: rank 0 (the store's host) raising at once and
        # exiting reset the connection of a rank still making its gloo group (CI, 2026-12-04)
        dist.barrier()
        result = {"ok": fn(rank, world_size, *args)}
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        result = {"error": type(exc).__name__, "message": str(exc), "mro": [c.__name__ for c in type(exc).__mro__],
                  "traceback": traceback.format_exc()}
    Path(out).write_text(json.dumps(result, default=repr))
    os._exit(0)  # skip gloo teardown: a peer may be gone


def run_ranks(fn: Callable[..., Any], world_size: int, *, timeout_s: float = 90.0,
              env: dict[str, str] | None = None, rank_env: dict[int, dict[str, str]] | None = None,
              pg_timeout_s: float = 60.0, args: tuple = (), tmp: Path) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    store = hosted_store(pg_timeout_s + timeout_s)  # held (and listening) until every rank is done
    port = store.port
    procs, outs = [], []
    for rank in range(world_size):
        out = tmp / f"rank{rank}.result.json"
        outs.append(out)
        e = {"TRITON_INTERPRET": "1", **(env or {}), **(rank_env or {}).get(rank, {})}
        p = ctx.Process(target=_child, args=(fn, rank, world_size, port, e, str(out), pg_timeout_s, args))
        p.start()
        procs.append(p)
    import time

    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    results = []
    for p, out in zip(procs, outs, strict=True):
        if p.is_alive():
            p.kill()
            p.join(5)
            results.append({"hung": True})
        elif out.exists():
            results.append(json.loads(out.read_text()))
        else:
            results.append({"died": p.exitcode})
    return results
