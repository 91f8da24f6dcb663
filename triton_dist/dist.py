"""The project's distributed initialisation: what ``autotune_pg=None`` falls back to.

``init_distributed()`` initialises torch.distributed with the current device's backend
(gloo / nccl / hccl) from the usual ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` variables (or
explicit arguments), binds the process to its local device, and registers the world group.
``get_world_group()`` returns that group, or None when the project did not initialise one: a
process group created elsewhere is only used when it is passed as ``autotune_pg`` or registered
with ``set_world_group``.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from triton_dist._backends import get_backend

__all__ = ["get_world_group", "init_distributed", "set_world_group"]

_world_group: Any = None


def set_world_group(group: Any) -> None:
    """Register ``group`` (or None to clear) as the default tuning group of this process."""
    global _world_group
    _world_group = group


def get_world_group() -> Any:
    """The registered world group, or None (single-process tuning)."""
    if _world_group is None:
        return None
    import torch.distributed as dist

    if not dist.is_initialized():  # destroyed since registration
        return None
    return _world_group


def init_distributed(
    rank: int | None = None,
    world_size: int | None = None,
    *,
    init_method: str | None = None,
    timeout_s: float = 600.0,
    local_rank: int | None = None,
) -> Any:
    """Initialise torch.distributed for this device (idempotent) and register the world group."""
    import torch.distributed as dist

    backend = get_backend()
    if not dist.is_initialized():
        rank = int(os.environ["RANK"]) if rank is None else rank
        world_size = int(os.environ["WORLD_SIZE"]) if world_size is None else world_size
        local = int(os.environ.get("LOCAL_RANK", rank)) if local_rank is None else local_rank
        backend.set_device(local)
        dist.init_process_group(
            backend=backend.dist_backend,
            init_method=init_method or "env://",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    set_world_group(dist.group.WORLD)
    return dist.group.WORLD
