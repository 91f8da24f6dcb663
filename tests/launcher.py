"""Rendezvous for the test jobs as ``torchrun`` gives it: this process (the launcher's agent) hosts
the store on a port the kernel picks, and every rank joins it as a client
(``TORCHELASTIC_USE_AGENT_STORE``, which ``env://`` and ``tcp://`` read). Picking a free port,
closing it and letting rank 0 bind it seconds later (after its imports) is a race another process
can win: a CI run lost to ``EADDRINUSE``."""

from __future__ import annotations

import datetime
from typing import Any


def agent_store(timeout_s: float = 600.0) -> tuple[Any, dict[str, str]]:
    """The store (keep a reference while the ranks run) and the environment the ranks need."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout_s))
    return store, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
                   "TORCHELASTIC_USE_AGENT_STORE": "True"}
