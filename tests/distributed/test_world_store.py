"""A campaign block forms its world through a store its first rank hosts on a port the kernel
picks: the port is held from the moment the driver learns it, so no process can take it before
the ranks rendezvous (a CI run lost a kept gang to ``EADDRINUSE`` when the first rank picked a
free port, closed it, and bound it again later)."""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def _rank(rank: int, ports: mp.Queue, held: mp.Queue, out: str) -> None:
    import os

    import torch
    import torch.distributed as dist

    from ray_runner.world import form_world, host_store
    from triton_dist._backends import get_backend

    os.environ["TRITON_DIST_DEVICE"] = "cpu"
    hosted = None
    if rank == 0:
        hosted = host_store("127.0.0.1", 60)
        for _ in range(2):
            ports.put(hosted.port)
        held.get(timeout=60)  # the parent tried to bind the port meanwhile
        port = hosted.port
    else:
        port = ports.get(timeout=60)
    world = form_world("127.0.0.1", port, 2, rank, local_index=0, timeout_s=60, backend=get_backend(),
                       hosted=hosted)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, group=world)
    Path(out).write_text(json.dumps({"size": dist.get_world_size(), "rank": dist.get_rank(), "sum": t.item(),
                                     "env": [os.environ["RANK"], os.environ["WORLD_SIZE"]]}))
    os._exit(0)


def test_the_world_store_holds_its_port_until_the_ranks_join(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    ports, held = ctx.Queue(), ctx.Queue()
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    procs = [ctx.Process(target=_rank, args=(r, ports, held, str(outs[r]))) for r in range(2)]
    for p in procs:
        p.start()
    try:
        port = ports.get(timeout=60)
        with socket.socket() as s, pytest.raises(OSError) as taken:
            s.bind(("127.0.0.1", port))
        assert taken.value.errno == errno.EADDRINUSE
        held.put(True)
        for p in procs:
            p.join(90)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    results = [json.loads(o.read_text()) for o in outs]
    assert [(r["size"], r["rank"], r["sum"], r["env"]) for r in results] == [
        (2, 0, 3.0, ["0", "2"]), (2, 1, 3.0, ["1", "2"])]
