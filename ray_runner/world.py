"""The world a campaign case runs in: as in a real job of the case's world size W.

While a case of world size W is built and tuned, everything a ``key_fn``, an argument builder or
a host function can ask answers as in a W-rank job launched by ``torchrun``:
``torch.distributed.is_initialized()`` is True, ``get_world_size()`` is W, ``get_rank()`` is the
rank in the case's block, the default group (``group.WORLD``) holds exactly the block's ranks,
``triton_dist.dist.get_world_group()`` returns it, and ``RANK``/``WORLD_SIZE`` are set (a W=1 case
runs in a one-rank world, as ``torchrun --nproc_per_node=1`` would), and so is ``LOCAL_RANK``: the
index of the device the actor uses, which ``torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))``
expects (a target module reading it at import failed every case with ``KeyError: 'LOCAL_RANK'``,
2026-12-05).

How (docs/architecture.md, "The case's world"): an actor has one default group at a time. A gang's
block of W ranks *forms* its world (:func:`form_world`: destroy the actor's current default group,
``init_process_group`` with a new store hosted by the block's first rank, one probe collective).
The driver re-forms a block only when the block it dispatches to is not the world its ranks are
in, so a gang running cases of one size forms once, and a gang that moves from size 2 to size 1
re-forms each block once.

``preflight`` computes keys without tuning: :func:`fake_world` gives it a W-rank world in one
process (torch's ``fake`` backend: sizes and ranks are real, collectives do nothing).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["fake_world", "form_world", "host_store", "leave_world"]

#: the environment variables a launcher sets and a world answers for
_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def leave_world() -> None:
    """Destroy this process's default group (if any) and forget the registered world group."""
    import torch.distributed as dist

    from triton_dist.dist import set_world_group

    set_world_group(None)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def host_store(addr: str, timeout_s: float) -> Any:
    """A new TCP store for a world's rendezvous, listening on a port the kernel picks (its
    ``.port``). Rank 0 hosts it: picking a free port first and binding it later is a race another
    process can win (``EADDRINUSE``: a CI run lost a kept gang to it)."""
    import torch.distributed as dist

    return dist.TCPStore(addr, 0, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=timeout_s))


def form_world(addr: str, port: int, size: int, rank: int, *, local_index: int, timeout_s: float,
               backend: Any, hosted: Any = None) -> Any:
    """Make this actor rank ``rank`` of a ``size``-rank world whose store is at ``addr:port``
    (``hosted``: rank 0's own, from :func:`host_store`). Blocks until every rank of the world has
    joined (``timeout_s``)."""
    import torch
    import torch.distributed as dist

    from triton_dist.dist import init_distributed

    leave_world()
    store = hosted if hosted is not None else dist.TCPStore(
        addr, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))
    world = init_distributed(rank, size, store=store, timeout_s=timeout_s, local_rank=local_index)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(local_index)})
    # One collective now: NCCL/HCCL communicators are created lazily; creating them while every
    # rank of the block is here proves the world works before a case depends on it.
    dist.all_reduce(torch.zeros(1, device=backend.device()), group=world)
    backend.synchronize()
    return world


@contextlib.contextmanager
def fake_world(size: int, rank: int, local_index: int = 0) -> Iterator[Any]:
    """Rank ``rank`` of a ``size``-rank world in this process alone (``fake`` backend), for
    computing keys as a W-rank job would (``LOCAL_RANK``: ``local_index``, the device this
    process uses); the previous state is restored on exit."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from triton_dist.dist import get_world_group, set_world_group

    if dist.is_initialized():
        raise RuntimeError("fake_world needs a process without a default process group")
    saved = {k: os.environ.get(k) for k in _ENV}
    previous = get_world_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    set_world_group(dist.group.WORLD)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(local_index)})
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()
        set_world_group(previous)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
