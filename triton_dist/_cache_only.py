"""Cache-only mode's miss (``TRITON_DIST_AUTOTUNE_CACHE_ONLY``): config_space[0] untuned with one
warning per key, or ``CacheMissError`` (``=strict``) naming why, as ``cache why`` does."""

from __future__ import annotations

import logging
from pathlib import Path

from triton_dist._backends import Backend
from triton_dist._store.decide import CallId
from triton_dist._target import Outcome, TuneTarget
from triton_dist._warn import warn_user
from triton_dist.errors import CacheMissError
from triton_dist.settings import Settings

__all__ = ["untuned"]

log = logging.getLogger("triton_dist._tuning")  # the logger cache-only warnings always went to


def untuned(target: TuneTarget, call: CallId | None, lookup_why: str, key_text: str, path: Path | None, root: Path,
            backend: Backend, settings: Settings) -> Outcome:
    """A miss in cache-only mode: ``CacheMissError`` (strict), else config_space[0] untuned."""
    why = _explain(target, call, root, backend, lookup_why)  # type: ignore[arg-type]
    if call is not None and call.job_world:  # alone in a multi-rank job: the likelier fix
        why += (f" (this process tunes alone in a {call.job_world}-rank job without a tuning group: register "
                "one with triton_dist.dist.init_distributed() or set_world_group(), or pass autotune_pg=)")
    if settings.cache_only == "strict":
        raise CacheMissError(
            f"TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict and {target.qualname} has no usable cache "
            f"entry for key {key_text}: {why} (looked for {path}). Seed the cache with a "
            "campaign (`python -m ray_runner run ...`), check with `python -m triton_dist.cache "
            f"why {target.name} {key_text!r}{_world_flag(call)}`, or unset the variable to tune.",
            function=target.qualname, key=key_text, reason=why,
        )
    # once per key: the AutoTuner keeps config_space[0] as the key's config from now on
    message = (f"{target.qualname}: no cache entry for key {key_text} ({why}); "
               "TRITON_DIST_AUTOTUNE_CACHE_ONLY=1, so config_space[0] is used untuned.")
    warn_user(message, log=log)
    return Outcome(0, "default", path=path)


def _world_flag(call: CallId | None) -> str:
    """``cache why``'s ``--world-size`` for this call (without it, why does not compare worlds)."""
    return f" --world-size {call.world}" if call is not None and call.world else ""


def _explain(target: TuneTarget, call: CallId, root: Path, backend: Backend, why: str) -> str:
    """The lookup's reason, made specific by the miss diagnosis (which component differs)."""
    from triton_dist._store.diagnose import explain_here  # only on a cache-only miss

    try:
        diag = explain_here(root, call.function, call.key, call.world, target, backend=backend, cache_only=True)
    except OSError as exc:
        return f"{why}; the cache directory could not be scanned: {exc}"
    return diag.reason if diag.reason and not diag.hit else why
