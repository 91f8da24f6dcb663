"""THE hit rule: would this call hit the disk cache, and if not, why not.

Every place that asks "is this (function, key) already tuned?" calls :func:`decide`: inline
tuning (``_tuning.resolve``, through :func:`lookup`), a campaign's skip decision
(``ray_runner.executor``), ``python -m ray_runner preflight``, ``python -m triton_dist.cache why``
(``_store.diagnose``) and the campaign's workers (through :func:`identify`). One rule, so a campaign never
skips a case that training would re-tune, and preflight never promises a hit that training misses.

A call is identified by a :class:`CallId`: the function's cache name, its business key as stable
text, its source hash, the hardware digest, the software versions, the encoded config space and
the *world*: the number of ranks the call tunes over (``autotune_pg``'s size, or 1). The entry
is ``<root>/<function>/<entry_id(source, digest, key)>.json``, or, without that file, the newest
pack of ``<root>/<function>/packs/`` that holds the id (``_store.packs.load_entry``, the one
lookup); :func:`decide` reads it and checks, in this order: readable; key and source; hardware;
world; software versions (a miss only with ``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``, else a
note); the best config still in the space and, where the call says what ``prune_fn`` keeps
(``CallId.kept``), kept by it; no config the entry never measured (space growth: a
miss unless in cache-only mode, where the entry's best is used and the new configs stay untried).

The public names here (no leading underscore) are the core's internal API for ``ray_runner``;
they are not part of the user-facing API.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import packs as _packs
from triton_dist._store.keytext import stable_key_text
from triton_dist._store.rules import note as _rules_note
from triton_dist._warn import warn_user

__all__ = ["CallId", "Verdict", "alone_in_job", "config_key", "decide", "entry_world", "identify", "identify_text",
           "lookup", "stable_key", "unmeasured", "versions_differ"]

log = logging.getLogger(__name__)


#: the key's text that names its cache entry; a KeyFunctionError when it cannot name one
stable_key = stable_key_text


def versions_differ(entry: dict[str, Any], current: dict[str, str]) -> list[str]:
    """``"name: old -> new"`` for each software version that differs (python is not compared)."""
    old = entry.get("versions") or {}
    return [f"{k}: {old.get(k)} -> {v}" for k, v in sorted(current.items())
            if k != "python" and old.get(k) != v]


config_key = _cache.config_text  # a hashable text for an encoded config (``_cache.encode_config``)


def unmeasured(entry: dict[str, Any], space: Sequence[Any], kept: Sequence[int] | None = None) -> list[int]:
    """Indices of the configs of the encoded ``space`` that ``entry`` has no candidate row for;
    with ``kept`` (what ``prune_fn`` keeps for the call), of the kept ones that ``entry`` has no
    row for or had pruned."""
    rows = [c for c in entry.get("candidates", []) if isinstance(c, dict)]
    if kept is None:
        seen = {config_key(c.get("config")) for c in rows}
        return [i for i, c in enumerate(space) if config_key(c) not in seen]
    measured = {config_key(c.get("config")) for c in rows if c.get("pruned") is not True}
    return [i for i in kept if 0 <= i < len(space) and config_key(space[i]) not in measured]


def entry_world(entry: dict[str, Any]) -> int:
    """The number of ranks the entry was measured over (entries before it was recorded: 1)."""
    world = entry.get("world_size", 1)
    return world if isinstance(world, int) and not isinstance(world, bool) else -1


@dataclasses.dataclass(frozen=True)
class CallId:
    """Everything the hit rule compares, for one call (picklable; ``to_dict`` for Ray)."""

    function: str
    """The function's cache name (``TuneTarget.name``)."""
    key: str
    source_hash: str
    digest: str
    """The hardware digest."""
    versions: dict[str, str]
    space: list[Any]
    """The encoded config space."""
    world: int | None
    """Ranks the call tunes over; None only for ``cache why`` without ``--world-size``."""
    qualname: str = ""
    job_world: int | None = None
    """A call that tunes alone (``world`` 1) in a torch.distributed job of this many ranks, no
    tuning group registered: an entry measured over the job's ranks (a campaign's) serves it."""
    kept: tuple[int, ...] | None = None
    """The configs ``prune_fn`` keeps for this call (``triton_dist._prune``), None when not known
    (no ``prune_fn``, or ``cache why`` without the call's arguments): a cached best it prunes is a
    miss, and a config the entry had pruned that it keeps now was never measured."""

    @property
    def id(self) -> str:
        return _cache.entry_id(self.source_hash, self.digest, self.key)

    def path(self, root: Path | str) -> Path:
        return _cache.entry_path(Path(root), self.function, self.id)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "id": self.id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallId:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        if fields.get("kept") is not None:
            fields["kept"] = tuple(fields["kept"])
        return cls(**fields)


def identify(target: Any, key: Any, world: int | None, backend: Any = None,
             kept: tuple[int, ...] | None = None) -> CallId:
    """The :class:`CallId` of a call of ``target`` (a ``TuneTarget``) with ``key`` (the key_fn's
    value) over ``world`` ranks, on this process's hardware and software; ``kept``: what its
    ``prune_fn`` keeps for the call (``triton_dist._prune.kept_for_lookup``)."""
    return dataclasses.replace(identify_text(target, stable_key(key), world, backend), kept=kept)


def identify_text(target: Any, key_text: str, world: int | None, backend: Any = None) -> CallId:
    """:func:`identify` for a key already written as its text (``cache why``, entries' keys).

    The one place where a call's backend, hardware digest, software versions, source hash and
    encoded space are gathered (inline tuning, preflight, workers, ``cache why``)."""
    from triton_dist._backends import get_backend
    from triton_dist._store.fingerprint import hardware_info, software_versions

    backend = backend if backend is not None else get_backend()
    # the space as decorated (``TuneTarget.encoded``): a host function may mutate its configs
    return CallId(target.name, key_text, target.source_hash(), hardware_info(backend)["digest"],
                  software_versions(backend), list(target.encoded), world, target.qualname)


@dataclasses.dataclass
class Verdict:
    """The answer of :func:`decide`."""

    index: int | None
    """Index in the config space of the entry's best config on a hit; None on a miss."""
    why: str
    """Why it misses ("" on a hit)."""
    path: Path
    entry: dict[str, Any] | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    """Differences that do not make it a miss (software versions without the check)."""
    unusable: bool = False
    """A file is there but cannot serve this call (inline tuning warns about it)."""
    source: Path | None = None
    """Where the entry was read: ``path``, or a packed entry's path (``_store.packs``)."""
    shared: bool = False
    """A miss on an entry another function wrote (``_other_function``): inline tuning says so."""

    @property
    def hit(self) -> bool:
        return self.index is not None


def decide(call: CallId, root: Path | str, *, version_check: bool, cache_only: bool | str) -> Verdict:
    """Would ``call`` hit the cache under ``root``? (the module docstring lists the checks).

    ``cache_only``: the caller's ``TRITON_DIST_AUTOTUNE_CACHE_ONLY`` (``"off"``/False: a tuning
    caller, which re-tunes when the space grew). Reads one entry; never executes anything.
    """
    root = Path(root)
    path = call.path(root)
    entry, source, problem = _packs.load_entry(root, call.function, call.id)  # loose, else packed
    if source is None:
        return Verdict(None, "no cache entry", path)
    if entry is None:
        _cache.warn_unusable(source, str(problem))
        return Verdict(None, "cache entry unusable (see warning)", path, source=source)

    def unusable(why: str) -> Verdict:
        return Verdict(None, why, path, entry, unusable=True, source=source)

    if entry["key"] != call.key or entry["source_hash"] != call.source_hash:
        return unusable("cache entry is for another key or source")
    if entry["hardware"].get("digest") != call.digest:
        return unusable(f"cache entry was tuned on other hardware (digest {entry['hardware'].get('digest')})")
    world = entry_world(entry)
    # a process tuning alone in a multi-rank job without a group: the group's entry of this job's
    # size (a campaign seeded it) serves it, rather than each rank tuning alone over it (found
    # by a tester, session 28: the seeded entry went to history and strict jobs failed after)
    ungrouped = call.world == 1 and call.job_world is not None and world == call.job_world
    if call.world is not None and world != call.world and not ungrouped:
        return unusable(f"cache entry was measured over {world} rank(s), this call tunes over {call.world} "
                        + (f"({alone_in_job(call.job_world)}; or make key_fn include the world size so that "
                           "each world has its own entry)" if call.job_world else
                           "(make key_fn include the world size so that each world has its own entry)"))
    verdict = Verdict(None, "", path, entry, source=source)
    if ungrouped:  # (the call's own warning says it tunes alone: warn_if_ungrouped)
        log.debug("cache entry %s was measured over this job's %d ranks; a process tuning alone takes it",
                  source, world)
    changed = versions_differ(entry, call.versions)
    if changed:
        message = f"cache entry {source} was tuned with other software versions ({'; '.join(changed)})"
        if version_check:
            verdict.why = message + " and TRITON_DIST_AUTOTUNE_VERSION_CHECK=1"
            return verdict
        verdict.notes.append(message)
    best = entry["best"]["config"]
    if isinstance(best, dict) and _cache.SAME_ON_DISK in best:
        verdict.why = ("the cached best config is written alike another config of config_space "
                       "that differs (values known to the disk by their type alone): re-tuned" + _rules(entry))
        return verdict
    index = _cache.find_config(best, call.space, entry["best"].get("index"))
    if index is None:
        return unusable("the cached best config is no longer in config_space" + (
            _other_function(entry, call) or _rules(entry) or _edited_function(best, call.space)))
    if call.kept is not None and index not in call.kept:
        return unusable(f"prune_fn prunes the cached best config (config_space[{index}]) for this call")
    new = unmeasured(entry, call.space, call.kept)
    if new and cache_only in (False, "off"):
        # issue 6 item 4: the space grew (e.g. a module-level list; the source hash is the same):
        # a tuning caller measures the new configs, reusing this entry's timings (see _reuse)
        verdict.why = f"config_space has {len(new)} config(s) the entry never measured ({new[:10]})"
        shared = _other_function(entry, call)  # re-tuned over another function's entry: said (lookup)
        verdict.why, verdict.shared = verdict.why + shared, bool(shared)
        return verdict
    verdict.index = index
    return verdict


def alone_in_job(job_world: int) -> str:
    """What serves a process tuning alone in a ``job_world``-rank job without a tuning group, on a
    miss of the world: registering the group makes it tune over ``job_world`` ranks, which an entry
    of a third world does not serve either (the miss said "register it" as the fix, and a job
    seeded over 2 ranks and run over 4 with the group registered missed again; a tester)."""
    return (f"no tuning group is registered in this {job_world}-rank job: an entry measured over 1 or "
            f"{job_world} rank(s) serves this process, so seed the cache over {job_world} ranks (a campaign "
            "case of this job's world); register the group as well (triton_dist.dist.init_distributed() or "
            "set_world_group(), or pass autotune_pg=) so that the ranks agree on one config")


def _rules(entry: dict[str, Any]) -> str:
    """An upgrade's (or a rollback's) part in a miss: the entry's configs may be written under
    other rules than this version's (``_store.rules``), e.g. a Triton kernel by its type alone."""
    other = _rules_note(entry)
    return f" (or this triton_dist writes it otherwise: {other})" if other else ""


#: the source digest of a function or Triton kernel a config holds, as ``files.encode_value`` writes it
_SOURCE_DIGEST = re.compile(r" source sha256:[0-9a-f]+")


def _edited_function(best: Any, space: Sequence[Any]) -> str:
    """Where a config of the space is the cached best but for the source digest of a function or
    Triton kernel it holds: that it was edited (a ``pre_hook``). Said as "no longer in config_space"
    alone, preflight sent the operator to a space nobody changed (2026-12-05)."""
    try:
        text = json.dumps(best, sort_keys=True)
        if not _SOURCE_DIGEST.search(text):
            return ""
        bare = _SOURCE_DIGEST.sub("", text)
        index = next((i for i, c in enumerate(space) if _SOURCE_DIGEST.sub("", json.dumps(c, sort_keys=True)) == bare),
                     None)
    except (TypeError, ValueError):
        return ""
    if index is None:
        return ""
    return (f": config_space[{index}] is that config but for a function or Triton kernel it holds (a pre_hook), "
            "edited since (its source digest differs; `python -m triton_dist.cache why` names it)")


def _other_function(entry: dict[str, Any], call: CallId) -> str:
    """Why an entry of this name, source and key does not fit the space, when another function
    wrote it: two modules' functions of one name and source over module-level spaces that differ
    share one entry and re-tune over each other in every process (a tester, 2026-12-04)."""
    theirs = entry.get("qualname")
    if not isinstance(theirs, str) or not theirs or not call.qualname or _same_function(theirs, call.qualname):
        return ""
    return (f" (it was written by {theirs}, a function of the same name and source as {call.qualname}: "
            "the two share one cache entry and replace each other's; give them different names, or "
            "write their config spaces out in the decorators)")


def _same_function(a: str, b: str) -> bool:
    """Whether two module-qualified names name one function: equal, or one of a script run as
    ``__main__`` (a spawned child's ``__mp_main__``) and the other of the module a campaign
    imported it as (``__main__.scale`` and ``pkg.trainmod.scale``)."""
    if a == b:
        return True
    for main in ("__main__.", "__mp_main__."):
        for one, other in ((a, b), (b, a)):
            if one.startswith(main) and (other == one[len(main):] or other.endswith("." + one[len(main):])):
                return True
    return False


def lookup(call: CallId, root: Path, settings: Any, stacklevel: int = 5
           ) -> tuple[int | None, str, dict[str, Any] | None, Path | None]:
    """Inline tuning's question: (index of the cached best config, "", the entry, where it was
    read) or (None, why it is a miss, None, None), warning about a file that is there but unusable
    and about differing software versions (``stacklevel``: of the warnings, so that they name the
    user's call). Where it was read is the loose file or a packed entry's path: a hit that names
    the loose path of a packed entry names a file that does not exist (a tester, 2026-12-04)."""
    verdict = decide(call, root, version_check=settings.version_check, cache_only=settings.cache_only)
    if verdict.unusable:
        message = (f"ignoring cache file {verdict.source or verdict.path}: {verdict.why}. "
                   "It is treated as a miss and re-tuned.")
        warn_user(message, log=log, function=call.qualname, key=call.key)
    elif verdict.shared:  # a grown space: re-tuned silently, the other function's entry replaced
        warn_user(f"{call.qualname}: re-tuning over cache file {verdict.source or verdict.path}: {verdict.why}. "
                  f"If the function moved here from {str((verdict.entry or {}).get('qualname')).rpartition('.')[0]} "
                  "(and its space grew), this is said once.", log=log, function=call.qualname, key=call.key)
    for note in verdict.notes:
        warn_user(note + "; using it (set TRITON_DIST_AUTOTUNE_VERSION_CHECK=1 to re-tune).")
    if not verdict.hit:
        return None, verdict.why, None, None
    return verdict.index, verdict.why, verdict.entry, verdict.source or verdict.path
