"""What ``prune_fn`` keeps for one call: the configs a tuning measures, and the ones a cached
best must be among (``_store.decide``: an entry whose best the prune now rejects is a miss).

Used by inline tuning (``_tuning``), a campaign's workers and ``preflight`` (``ray_runner``), so
that all of them ask the hit rule the same question.
"""

from __future__ import annotations

from typing import Any

from triton_dist._measure.result import describe
from triton_dist.errors import PruneError

__all__ = ["kept_configs", "kept_for_lookup"]


def kept_configs(target: Any, args: tuple, kwargs: dict, key_text: str) -> list[int]:
    """The indices of the configs ``prune_fn`` keeps for this call (all without one), or a
    :class:`PruneError` that says what is wrong with it."""
    if target.prune_fn is None:
        return list(range(len(target.config_space)))
    kept, returned_none = [], 0
    for index, config in enumerate(target.config_space):
        try:
            keep = target.prune_fn(config, *args, **kwargs)
        except Exception as exc:
            raise PruneError(
                f"prune_fn raised on config_space[{index}] = {config!r:.200} for key {key_text}: "
                f"{describe(exc)}. prune_fn must be a side-effect-free check that returns True/False."
            ) from exc
        returned_none += keep is None
        try:
            keep = bool(keep)
        except Exception as exc:  # noqa: BLE001 - e.g. a tensor of several elements
            raise PruneError(f"prune_fn returned {type(keep).__name__} {keep!r:.100} on config_space[{index}] "
                             f"for key {key_text}: no single truth value ({describe(exc)}). Return True "
                             "(keep) or False (prune); reduce a tensor check, e.g. bool((x > 0).all()).") from None
        if keep:
            kept.append(index)
    if not kept:
        # a prune_fn that forgot its return statement returns None for every config (a tester: "kept
        # no config" did not say why, session 28)
        forgot = (f" It returned None for {'every' if returned_none == len(target.config_space) else returned_none} "
                  "config: does it end with a return statement?" if returned_none else "")
        raise PruneError(
            f"prune_fn kept no config of {target.name}'s config_space ({len(target.config_space)} "
            f"candidates) for key {key_text}; it must keep at least one (config_space[0] is a "
            f"good always-valid default).{forgot}"
        )
    return kept


def kept_for_lookup(target: Any, args: tuple, kwargs: dict, key_text: str) -> tuple[int, ...] | None:
    """What the hit rule compares a cached best with (``CallId.kept``): the configs ``prune_fn``
    keeps for this call, None without a ``prune_fn`` (every config is kept)."""
    if target.prune_fn is None:
        return None
    return tuple(kept_configs(target, args, kwargs, key_text))
