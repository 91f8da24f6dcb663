"""ray_runner: pre-tuning campaigns on Ray, merged results, caches seeded on every node.

``python -m ray_runner run CAMPAIGN.yaml [--address ADDR] [--cache-dir DIR] [--seed none|nodes|shared]
[--force]``, ``validate CAMPAIGN.yaml``, ``preflight CAMPAIGN.yaml``. A case of world size W runs on
W device actors of a gang, in a W-rank world (their default torch.distributed group, see
:mod:`ray_runner.world`), and they call the same tuning path as an inline ``autotune_pg`` call of
a W-rank job; the driver merges the ranks' entries and writes cache entries that later runs of
the decorated function hit.

Ray is optional: importing this package does not import it; commands that need it raise
:class:`~triton_dist.errors.RayNotInstalledError` with the install command.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Campaign",
    "CampaignResult",
    "CaseContext",
    "RunOptions",
    "TargetSpec",
    "load_campaign",
    "parse_campaign",
    "run_campaign",
]

_LAZY = {
    "Campaign": "ray_runner.spec",
    "TargetSpec": "ray_runner.spec",
    "load_campaign": "ray_runner.spec",
    "parse_campaign": "ray_runner.spec",
    "CaseContext": "ray_runner.worker",
    "CampaignResult": "ray_runner.campaign",
    "RunOptions": "ray_runner.campaign",
    "run_campaign": "ray_runner.campaign",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ray_runner' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
