"""Tuned functions and argument builders for the Ray campaign tests (imported by the actors as
``tests.ray.ray_targets``: the workers' ``sys.path`` holds the driver's working directory).

``host`` is a pure-host function whose config 1 is clearly the fastest (sleep-based costs), so
campaigns are fast and their result is known. A case may ask the builder to misbehave once
(``fail_once`` / ``die_once`` / ``hang_once``: a marker file records that it already did) or
always (``always_fail``), on one rank (``rank``, default 0).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from triton_dist.tune import autotune

#: per-config cost in ms: config 1 wins by a wide margin
COST_MS = (6.0, 0.5, 3.0)
CALLS: dict[int, int] = {}


class Behaviour:
    """A misbehaviour injected by the builder; runs inside the tuned function (mid-case)."""

    def __init__(self, action: str, marker: str | None) -> None:
        self.action, self.marker = action, marker

    def __repr__(self) -> str:  # stable: never part of the key anyway
        return f"Behaviour({self.action!r})"

    def act(self) -> None:
        if self.marker is not None:
            path = Path(self.marker)
            if path.exists():
                return
            path.write_text(str(os.getpid()))
        if self.action == "die":
            os._exit(17)  # the actor process dies mid-case
        if self.action == "hang":
            time.sleep(3600)
        if self.action == "fail":
            raise TypeError("injected bug in the tuned function")  # a bug, not a config failure


def _key(n: int, behaviour: Behaviour | None = None, **_: Any) -> tuple:
    return (n,)


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], key_fn=_key, n_warmup=1, n_repeat=3)
def host(n: int, behaviour: Behaviour | None = None, *, cfg: int) -> int:
    CALLS[cfg] = CALLS.get(cfg, 0) + 1
    if behaviour is not None:
        behaviour.act()
    time.sleep(COST_MS[cfg] / 1000.0)
    return n * 10  # the same for every config (campaigns check results against the default)


def make_host_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    behaviour = None
    if ctx.rank == int(case.get("rank", 0)):
        for action in ("fail", "die", "hang"):
            if f"{action}_once" in case:
                behaviour = Behaviour(action, case[f"{action}_once"])
        if case.get("always_fail"):
            behaviour = Behaviour("fail", None)
    return (int(case["n"]),), {"behaviour": behaviour}


def not_tuned(n: int) -> int:
    return n


def make_args_that_hang(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    """A builder that never returns (a user's bug): what a preflight check's bound is for."""
    time.sleep(3600)
    return make_host_args(case, ctx)
