"""One tuning's decision before anything is measured (steps 1 and 2 of ``_tuning``):

1. :func:`decide_locally` — hit? this rank's lookup of the disk cache (the hit rule,
   ``_store.decide``), and on a miss the kept configs (``prune_fn``) and the timings it may reuse;
2. :func:`agree_plan` — the group agrees on key, decision, kept configs and reuse (no-op alone);
   a hit becomes its :class:`Outcome` (:func:`cached`).

What they decide is a :class:`Plan`, which ``_tuning``'s later steps (measure, reduce, pick,
write) carry on a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_dist._backends import Backend
from triton_dist._distributed import GroupView, agree, host_id
from triton_dist._logging import TuningLog
from triton_dist._logging import log as _tune_log
from triton_dist._measure.result import describe
from triton_dist._prune import kept_configs, kept_for_lookup
from triton_dist._store import decide as _decide
from triton_dist._store import files as _cache
from triton_dist._store import packs as _packs
from triton_dist._store import reuse as _reuse
from triton_dist._store.entry import measurement_info
from triton_dist._store.fingerprint import body_hash
from triton_dist._target import Outcome, TuneTarget, show_config
from triton_dist.errors import KeyFunctionError, PruneError, RankDisagreementError
from triton_dist.settings import Settings

__all__ = ["Plan", "agree_plan", "cached", "decide_locally"]


@dataclasses.dataclass
class Plan:
    """What this rank decided before the group agrees (step 1), and what the group kept (step 2)."""

    key_text: str = ""
    decision: str = "error"
    """``hit:<index>``, ``cache-only-miss``, ``tune``, or ``error`` (then ``error`` is set)"""
    why: str = ""
    """why it is not a hit (the lookup's reason, or "forced re-tuning")"""
    kept: list[int] = dataclasses.field(default_factory=list)
    path: Path | None = None
    call: _decide.CallId | None = None
    reuse: _reuse.Reuse | None = None
    root: Path | None = None
    """the cache root this rank reads and writes (writers are elected per host and root)"""
    error: BaseException | None = None
    """this rank's own failure (key_fn, prune_fn, the disk): raised after the group has agreed"""
    entry: dict[str, Any] | None = None
    """a hit's entry as read (``AutoTuner.tune(force=False)`` returns it; never exchanged)"""
    source: Path | None = None
    """where a hit's entry was read: ``path``, or a packed entry's ``<function>/packs/<pack>/<id>.json``"""
    function: str = ""
    """the tuned function's qualified name (ranks calling different functions are told which)"""
    logs: list[str] = dataclasses.field(default_factory=list)
    """each group rank's log of this tuning, by name (empty when nothing is written)"""


def decide_locally(target: TuneTarget, key: Any, args: tuple, kwargs: dict, view: GroupView | None,
                    backend: Backend, settings: Settings, root: Path, force: bool) -> Plan:
    """Step 1: this rank's answer to "hit?" (``_store.decide``); on a miss that tunes, the configs
    ``prune_fn`` keeps and an older entry's timings to reuse. A failure is kept for step 2."""
    plan = Plan(root=root, function=target.qualname)
    try:
        plan.call = call = _decide.identify(target, key, view.size if view is not None else 1, backend)
        if view is None:  # alone: in a multi-rank job without a group, its entry may be the group's
            job = _job_world()
            if job > 1:
                plan.call = call = dataclasses.replace(call, job_world=job)
        plan.key_text, plan.path = call.key, call.path(root)
        kept = None
        if not (force or settings.always_tune):
            # a cached best that prune_fn rejects now (an edited prune_fn) is a miss, not a hit
            kept = kept_for_lookup(target, args, kwargs, plan.key_text)
            plan.call = call = dataclasses.replace(call, kept=kept)
        index, plan.why, plan.entry, plan.source = (None, "forced re-tuning", None, None) \
            if force or settings.always_tune else _decide.lookup(call, root, settings, stacklevel=6)
        if index is not None:
            plan.decision = f"hit:{index}"
        elif settings.cache_only != "off" and not force:
            plan.decision = "cache-only-miss"
        else:
            plan.decision = "tune"
            plan.kept = list(kept) if kept is not None else kept_configs(target, args, kwargs, plan.key_text)
            # checking correctness compares every config with config_space[0]'s result, which a
            # reused timing never ran: every kept config is measured then (a wrong cached best was
            # the reference for a grown space, and stayed best; a tester, session 28)
            if not (force or settings.always_tune or target.check_correctness):
                plan.reuse = _reuse.find_reusable(
                    root, target.name, target.encoded, plan.kept, plan.key_text, target.source_hash(),
                    body_hash(target.fn), call.digest, call.versions,
                    measurement_info(target, backend, call.world or 1), world=call.world or 1)
    except (KeyFunctionError, PruneError, OSError) as exc:
        plan.error = exc
    return plan


def _job_world() -> int:
    """The ranks of this process's torch.distributed job (1 when it is not initialised)."""
    dist = sys.modules.get("torch.distributed")  # never imported here for the question
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - a torn-down group: alone
        pass
    return 1


def agree_plan(plan: Plan, decide: Callable[[], Plan], view: GroupView | None, backend: Backend,
           settings: Settings, what: str = "") -> tuple[Plan, list[Any]]:
    """Step 2: the ranks exchange their plans (``agree`` raises on a disagreement or on another
    rank's error); then this rank's own error is raised. Returns the plan and the ranks' hosts.
    When only the cache decision differs, every rank looks up once more first: another group's
    entry may have landed between the ranks' lookups (a node's tensor-parallel groups tuning one
    key at once, sharing the node's cache); a disagreement that remains is the error."""
    if view is None:
        if plan.error is not None:
            raise plan.error
        return plan, [host_id()]
    try:
        rows = agree(view, backend, _fields(plan), settings.agree_timeout_s, what)
    except RankDisagreementError as exc:  # the same on every rank: every rank looks again
        differ = set(exc.details.get("values", {}))
        if "cache" not in differ or not differ <= {"cache", "configs"}:  # a hit keeps no configs
            raise
        plan = decide()
        try:
            rows = agree(view, backend, _fields(plan), settings.agree_timeout_s, what)
        except RankDisagreementError as again:
            together = _fall_back_together(plan, again, view)
            if together is None:
                raise
            rows = together
    if plan.reuse is not None and len({row["reuse"] for row in rows}) > 1:
        # the ranks' caches differ: all of them measure everything (never a disagreement error)
        plan.reuse = None
    if plan.error is not None:
        raise plan.error
    return plan, [row["host"] for row in rows]


def _fall_back_together(plan: Plan, exc: RankDisagreementError, view: GroupView) -> list[dict[str, str]] | None:
    """In cache-only mode, ranks of which some hit and the others have no entry (a cluster seeded
    on some nodes) fall back together, as docs/cache.md promises, rather than raise a
    disagreement (a tester, 2026-12-04): every rank takes the cache-only miss (strict: every rank
    raises ``CacheMissError``; ``=1``: every rank runs config_space[0]). The same on every rank:
    decided from the error's values, which every rank holds. None: not that case."""
    values = exc.details.get("values", {})
    decisions = values.get("cache", [])
    if not set(values) <= {"cache", "configs"} or "cache-only-miss" not in decisions or \
            not all(d == "cache-only-miss" or d.startswith("hit:") for d in decisions):
        return None
    missing = [view.ranks[r] for r, d in enumerate(decisions) if d == "cache-only-miss"]
    if plan.decision.startswith("hit:"):
        plan.why = f"the group falls back together: ranks {missing} of the {view.describe()} have no entry"
    else:
        plan.why += f" (ranks {missing} of the {view.describe()} have none; the others fall back with them)"
    plan.decision, plan.kept = "cache-only-miss", []
    return None if plan.error is not None else [{"host": host_id()}] * view.size


def _fields(plan: Plan) -> dict[str, str]:
    # "source": ranks whose functions differ (a closure over the rank) would name different
    # entries: the group's entry, written under one rank's, would be a miss for the others;
    # "host": one writer per node and cache root (ranks of one node may keep their own caches)
    root = "" if plan.root is None else str(plan.root.resolve())
    # "space": the configs themselves, not their indices (ranks whose spaces hold other configs, or
    # the same in another order, would agree on indices and run different configs)
    return {"function": plan.function, "key": plan.key_text, "cache": plan.decision,
            "configs": ",".join(map(str, plan.kept)),
            "space": _space_text(plan.call.space) if plan.call is not None else "",
            "source": plan.call.source_hash if plan.call is not None else "",
            "error": describe(plan.error) if plan.error else "", "host": f"{host_id()}:{root}",
            "reuse": plan.reuse.signature() if plan.reuse is not None else ""}


def _space_text(space: list[Any]) -> str:
    """The encoded config space, as the agreement compares and shows it (a digest after its start)."""
    text = "[" + ", ".join(_cache.config_text(c) for c in space) + "]"
    if len(text) <= 120:
        return text
    return f"{text[:100]}... ({len(space)} configs, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]})"


def cached(target: TuneTarget, plan: Plan, verbose: bool, rank_prefix: str, fields: dict[str, Any]) -> Outcome:
    """A hit: the entry's best config, and where it was read (a packed entry by its path in the
    pack, as ``ls`` and ``show`` name it: its loose path names no file on a seeded node)."""
    index = int(plan.decision[4:])
    source = plan.source or plan.path
    # issue 18 item 11: a hit says so, and where it came from; a DEBUG record of triton_dist.tune
    # without autotune_verbose too, as the tuning's lines are (README; a tester found it missing)
    if verbose or _tune_log.isEnabledFor(logging.DEBUG):
        packed = " (a packed entry; `triton-dist-cache show` takes this path)" \
            if source is not None and _packs.is_packed(source) else ""
        TuningLog(None, verbose, rank_prefix, fields=fields).info(
            "%s: cache hit for key %s: config %d %s, from %s%s", target.qualname, plan.key_text, index,
            show_config(target.config_space[index]), source, packed)
    return Outcome(index, "cache", entry=plan.entry, path=source)
