"""One case per cache entry: which case of a campaign owns each entry (pure, no Ray).

Cases are identified in their own world (the worker computes the key with the case's world
formed), so two cases merge exactly when an inline job would look up one entry for both: e.g.
``{n: 8}`` and ``{n: 8.0}`` with a ``key_fn`` that normalises to ``int``. The first case to be
identified owns the entry and is tuned; a later one with the same key in the same world is
*merged* into it (reported, never tuned: two gangs would race to write the same file). The same
entry from another world size is a conflict: the key ignores the world size, so one file would
hold the timings of two worlds; that case fails with the fix (include the world size in the key).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["Claims", "Clash"]


@dataclasses.dataclass(frozen=True)
class Clash:
    """This case's entry is owned by case ``owner``: ``merged`` (same world) or ``conflict``."""

    kind: str
    owner: Any
    """The owning ``CaseRun``."""
    message: str


class Claims:
    def __init__(self) -> None:
        self._owners: dict[tuple[str, str], Any] = {}

    def claim(self, run: Any, identity: dict[str, Any]) -> Clash | None:
        """None: ``run`` owns the entry of ``identity`` (now or already); else who does."""
        slot = (identity["function"], identity["id"])
        owner = self._owners.get(slot)
        if owner is None or owner is run or owner.status == "failed":
            self._owners[slot] = run  # a failed owner's entry goes to the next case that has it
            return None
        label = owner.spec.label()
        if owner.world_size == run.world_size:
            return Clash("merged", owner, f"same cache entry (key {identity['key']}) as case {label}: "
                                          "merged into it")
        return Clash("conflict", owner, (
            f"key {identity['key']} names the same cache entry as case {label}, which runs over "
            f"{owner.world_size} rank(s) while this case runs over {run.world_size}: the key_fn ignores the "
            "world size. Include it, e.g. `torch.distributed.get_world_size() if "
            "torch.distributed.is_initialized() else 1`, so that each world has its own entry."))
