"""Cache-only mode's miss (``TRITON_DIST_AUTOTUNE_CACHE_ONLY``): config_space[0] untuned with one
warning per key, or ``CacheMissError`` (``=strict``) naming why, as ``cache why`` does."""

from __future__ import annotations

import logging
from pathlib import Path

from triton_dist._backends import Backend
from triton_dist._store.decide import CallId, alone_in_job
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
    if call is not None and call.job_world:  # alone in a multi-rank job: what serves it
        why += f" (this process tunes alone: {alone_in_job(call.job_world)})"
    if settings.cache_only == "strict":
        raise CacheMissError(
            f"TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict and {target.qualname} has no usable cache "
            f"entry for key {key_text}: {why} (looked for {path}). Seed the cache with a "
            f"campaign (`python -m ray_runner run ...`), {_check(target, call, key_text, why)}, or unset the "
            "variable to tune.",
            function=target.qualname, key=key_text, reason=why,
        )
    # once per key: the AutoTuner keeps config_space[0] as the key's config from now on
    message = (f"{target.qualname}: no cache entry for key {key_text} ({why}); "
               "TRITON_DIST_AUTOTUNE_CACHE_ONLY=1, so config_space[0] is used untuned.")
    warn_user(message, log=log, function=target.qualname, key=key_text)
    return Outcome(0, "default", path=path)


def _check(target: TuneTarget, call: CallId | None, key_text: str, why: str) -> str:
    """How to check the fix: ``cache why``, which cannot ask prune_fn (it needs the call's
    arguments) and calls an entry that prune_fn rejects a hit (a tester)."""
    command = f"`python -m triton_dist.cache why {target.name} {key_text!r}{_world_flag(call)}`"
    if why.startswith("prune_fn prunes"):
        return (f"or make prune_fn keep that config again; {command} does not ask prune_fn (it needs the "
                "call's arguments) and calls this entry a hit: check with `python -m ray_runner preflight`")
    return f"check with {command}"


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
