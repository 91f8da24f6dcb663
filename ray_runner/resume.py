"""Resuming a campaign: the results stream a run appends to (:mod:`ray_runner.results`), opened
for resuming; the check of an earlier run's entries against their targets as the driver imports
them now (:func:`entry_serves`); and the cases each kind has left to run.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .fleet import Fleet
from .hardware import FleetPlan
from .progress import Progress
from .results import UNCHECKED, ResultStream, RunLock, campaign_digest, digest_parts, stream_path
from .spec import Campaign

if TYPE_CHECKING:
    from .campaign import RunOptions

__all__ = ["cases_left", "entry_serves", "results_stream"]

#: the driver's logger, as before resuming had a module of its own
log = logging.getLogger("ray_runner.campaign")


@contextlib.contextmanager
def results_stream(campaign: Campaign, root: Path, options: RunOptions,
                    run_lock: RunLock | None = None) -> Iterator[ResultStream]:
    """The campaign's results stream (next to its report); in a temporary directory when no
    report is written (nothing to resume from then)."""
    if options.write_report:
        parts = digest_parts(campaign, root)
        stream = ResultStream(stream_path(campaign, options.report_dir), campaign_digest(campaign, root, parts),
                              resume=not options.force, serves=entry_serves(campaign), parts=parts,
                              run_lock=run_lock)
        try:
            yield stream
        finally:
            stream.close()
        return
    with tempfile.TemporaryDirectory(prefix="ray-runner-results-") as tmp:
        stream = ResultStream(Path(tmp) / f"{campaign.name}.results.jsonl", "-", resume=False)
        try:
            yield stream
        finally:
            stream.close()


def entry_serves(campaign: Campaign) -> Callable[[dict[str, Any], dict[str, Any]], str | None]:
    """``ResultStream``'s check of an earlier run's entry against its target as the driver imports
    it now: the hit rule's source hash and config space (a space imported from another module, or
    grown in place, leaves the campaign's digest as it was: a resumed run said the cases were
    finished, and the job then tuned at its first call; a tester, session 28). The targets are
    imported at the first row checked. One the driver cannot import (importable on the actors
    only: the campaign's ``env`` PYTHONPATH, a worker image) answers :data:`UNCHECKED`: its cases
    are dispatched again and the actors skip, as ``cached``, each that a job would still hit. On
    the digest alone, which holds no file of a module the driver cannot find, an edited target
    (or a constant it reads) resumed as finished, and the strict job missed every such key."""
    from triton_dist._store import decide as _decide
    from triton_dist._store import files as _files

    from .worker import load_target

    current: dict[str, tuple[str, list[Any]] | None] = {}

    def target(function: str) -> tuple[str, list[Any]] | None:
        if function not in current:
            try:
                tuner = load_target(function)
                current[function] = (tuner.target.source_hash(), list(tuner.target.encoded))
            except Exception as exc:  # noqa: BLE001 - the workers say why, if they ever run it
                log.info("resumed cases of %s cannot be checked against its code here (%s: %s): they are "
                         "dispatched again, and the actors skip each whose entry a job would still hit",
                         function, type(exc).__name__, str(exc)[:200])
                current[function] = None
        return current[function]

    def serves(row: dict[str, Any], entry: dict[str, Any]) -> str | None:
        now = target(str(row.get("function")))
        if now is None:
            return UNCHECKED
        source, space = now
        if entry.get("source_hash") != source:
            return "the function's source changed since"
        best = entry.get("best") or {}
        if _files.find_config(best.get("config"), space, best.get("index")) is None:
            return "its best config is no longer in config_space"
        new = _decide.unmeasured(entry, space)
        return f"config_space has {len(new)} config(s) the entry never measured" if new else None

    return serves


def cases_left(campaign: Campaign, stream: ResultStream, plan: FleetPlan, options: RunOptions
           ) -> tuple[dict[str | None, list[Any]], dict[str | None, list[Any]], Progress, int]:
    """The cases each kind has left to run (those an earlier run finished on that kind are
    skipped), those it finished, their progress bar, and how many cases are left."""
    started = time.monotonic()
    todo, resumed = Fleet.split(campaign, stream, (*plan.kinds, *plan.absent))
    total = sum(len(specs) for specs in todo.values())
    progress = Progress(total, campaign.name, enabled=options.progress)
    done = sum(len(specs) for specs in resumed.values())
    if done:
        progress.event("run %d resumes from %s: %d of %d cases were finished by an earlier run (decided in %.2fs)",
                       stream.run, stream.path, done, done + total, time.monotonic() - started)
    return todo, resumed, progress, total
