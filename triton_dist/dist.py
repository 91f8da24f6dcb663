"""The project's distributed initialisation: what ``autotune_pg=None`` falls back to.

The rule for a call without ``autotune_pg`` (the seed's; issue 18 item 2):

1. the group registered here — by ``init_distributed()`` or ``set_world_group(group)`` — if any;
2. else the process tunes alone. A group made elsewhere (a plain
   ``torch.distributed.init_process_group``) is never adopted implicitly, because a function
   that only some ranks call would then wait for the others; instead, when torch.distributed
   has more than one rank, the first miss of each function warns (``TritonDistWarning``) that
   it tunes alone and names the two fixes: ``autotune_pg=`` on the call, or registering a
   default group once (``set_world_group(torch.distributed.group.WORLD)``, or
   ``init_distributed()``, which is idempotent and registers WORLD of an existing group).
   ``set_world_group(None)`` says "tune alone" deliberately and silences that warning.

``init_distributed()`` initialises torch.distributed with the current device's backend
(gloo / nccl / hccl) from the usual ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` variables (or
explicit arguments), binds the process to its local device, and registers the world group.
"""

from __future__ import annotations

import datetime
import itertools
import os
import weakref
from typing import Any

from triton_dist._backends import get_backend

__all__ = ["default_group_chosen", "get_world_group", "init_distributed", "set_world_group", "world_generation"]

_UNSET: Any = object()
_world_group: Any = _UNSET


#: the tuners of this process: their decisions for calls without ``autotune_pg`` hold for the
#: default group they were made with, and are forgotten when it changes
_tuners: weakref.WeakSet[Any] = weakref.WeakSet()


def track(tuner: Any) -> None:
    """Called by every ``AutoTuner``: see ``_tuners``."""
    _tuners.add(tuner)


#: a number per torch.distributed init of this process (per default group object): a group of a
#: later init, after destroy_process_group, has the ranks of one of the earlier init but not its
#: members' decisions (a rank that restarted holds none; a tester, 2026-12-05)
_generations: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_next_generation = itertools.count(1)


def world_generation() -> int:
    """The number of this process's current torch.distributed init (0 when none)."""
    import torch.distributed as dist

    world = dist.group.WORLD if dist.is_available() and dist.is_initialized() else None
    if world is None:
        return 0
    number = _generations.get(world)
    if number is None:
        number = _generations[world] = next(_next_generation)
    return number


def set_world_group(group: Any) -> None:
    """Register ``group`` as the default tuning group of this process; None: tune alone on
    purpose (calls without ``autotune_pg`` do not warn about it). When the group changes, the
    decisions that calls without ``autotune_pg`` made before are forgotten (made alone, or with
    another group: a rank reusing one would skip the new group's agreement, and the others
    would wait for it); their next call looks again (disk, then tuning with the group)."""
    global _world_group
    changed = group is not _world_group
    _world_group = group
    if changed:
        for tuner in list(_tuners):
            tuner._forget_default()


def default_group_chosen() -> bool:
    """True once :func:`set_world_group` or :func:`init_distributed` has run in this process."""
    return _world_group is not _UNSET


def get_world_group() -> Any:
    """The registered world group, or None (single-process tuning)."""
    if _world_group is None or _world_group is _UNSET:
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
    store: Any = None,
) -> Any:
    """Initialise torch.distributed for this device (idempotent) and register the world group.

    ``store`` (a ``torch.distributed.Store``) rendezvouses instead of ``init_method``."""
    import torch.distributed as dist

    backend = get_backend()
    if not dist.is_initialized():
        rank = int(os.environ["RANK"]) if rank is None else rank
        world_size = int(os.environ["WORLD_SIZE"]) if world_size is None else world_size
        local = int(os.environ.get("LOCAL_RANK", rank)) if local_rank is None else local_rank
        backend.set_device(local)
        where = {"store": store} if store is not None else {"init_method": init_method or "env://"}
        dist.init_process_group(
            backend=backend.dist_backend,
            **where,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    set_world_group(dist.group.WORLD)
    return dist.group.WORLD
