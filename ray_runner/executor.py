"""The driver loop of a campaign: gangs started in threads, cases dispatched to their blocks.

One loop owns every gang. Gangs start in threads (placement and rendezvous block, bounded);
cases run as ObjectRefs that the loop waits on with ``ray.wait``, so free ranks take the next
case at once and a case past its time limit is noticed within a second. Each case goes: its
block's ranks build the arguments and identify the entry → skipped if the driver's cache has it
(unless ``force``) → the ranks tune in the block's group → the driver merges and writes the
entry. The policy (which case, which gangs) is :mod:`ray_runner.scheduler`'s.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from pathlib import Path
from typing import Any

from triton_dist._store import decide as _decide
from triton_dist._store import files as _cache
from triton_dist.settings import get_settings

from . import scheduler as sch
from ._ray import cluster_capacity, import_ray
from ._signals import deferred
from .binaries import Shipper
from .claims import Claims
from .errors import CampaignError, CaseTimeoutError, describe_failure, root_cause
from .gang import Gang, GangOptions
from .merge import merge_entries
from .progress import Progress
from .spec import Campaign

__all__ = ["Executor"]

#: how often the cluster's device count is read again (nodes may join or die)
CAPACITY_REFRESH_S = 10.0


@dataclasses.dataclass
class _Work:
    """One attempt of one case on some ranks (a block) of a gang."""

    run: sch.CaseRun
    ranks: tuple[int, ...]
    dispatched: float
    deadline: float
    phase: str = "identify"  # port | form | identify | tune
    refs: list[Any] = dataclasses.field(default_factory=list)
    results: dict[int, Any] = dataclasses.field(default_factory=dict)
    actor_s: float = 0.0
    """Time the ranks were busy with it (the slowest rank per phase, as the ranks report it)."""


@dataclasses.dataclass
class _Live:
    """A started gang and the cases running on it."""

    gang: Gang
    started: float
    works: list[_Work] = dataclasses.field(default_factory=list)
    draining: bool = False
    """A case failed on it: it takes no more cases and is torn down when the others finish."""

    @property
    def busy(self) -> set[int]:
        return {r for w in self.works for r in w.ranks}

    @property
    def node(self) -> str | None:
        return self.gang.node_ids[0] if self.gang.nodes else None


class Executor:
    def __init__(self, campaign: Campaign, queue: sch.CaseQueue, opts: GangOptions, root: Path,
                 force: bool, progress: Progress, shipper: Shipper | None = None) -> None:
        self.ray = import_ray()
        self.campaign, self.queue, self.opts, self.root = campaign, queue, opts, root
        self.force, self.progress, self.shipper = force, progress, shipper or Shipper(root, progress, False)
        self.strict, self.sizes = opts.strategy == "STRICT_PACK", queue.world_sizes()
        self.live: list[_Live] = []
        self.starting: dict[concurrent.futures.Future, tuple[Gang, float]] = {}
        self.start_failures, self.pool = 0, concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="gang-start")
        self.stopped = False  # set by ray_runner.fleet's main thread (an interrupt): stop, tear down
        self.capacity = cluster_capacity(opts.resource, opts.hardware)
        self._capacity_at = time.monotonic()
        self.stats: dict[str, Any] = {"gangs_started": 0, "gang_sizes": [], "gang_start_s": [], "max_devices_held": 0,
                                      "gang_start_device_s": 0.0, "gang_seconds": 0.0, "device_seconds": 0.0}
        self.version_check = get_settings().version_check
        self.claims = Claims()

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        try:
            self._fail_infeasible()
            while not self.queue.finished() and not self.stopped:
                self._refresh_capacity()
                self._assign()
                self._retire_idle()
                self._start_gangs()
                self._poll()
        finally:
            self._shutdown()

    def _refresh_capacity(self) -> None:
        now = time.monotonic()
        if now - self._capacity_at >= CAPACITY_REFRESH_S:
            self.capacity = cluster_capacity(self.opts.resource, self.opts.hardware)
            self._capacity_at = now
            self._fail_infeasible()

    def _fail_pending(self, sizes: list[int], message: str, unplaceable: bool = True) -> None:
        for w in sizes:
            for run in self.queue.fail_size(w, message, unplaceable=unplaceable):
                self.progress.finished_case("failed", "%s: failed: %s", run.spec.label(), message)

    def _fail_infeasible(self) -> None:
        """Fail the pending cases whose gang no node (or, unpacked, the cluster) can hold, each with
        its own world size (they were all told the widest one's)."""
        biggest = sch.largest_gang(self.capacity, self.strict)
        for w in sorted(w for w in self.queue.pending_by_size() if w > biggest):
            self._fail_pending([w], sch.unplaceable_message(w, self.capacity, self.opts.strategy,
                                                            self.opts.describe()))

    def _assign(self) -> None:
        for live in self.live:
            if live.draining:
                continue
            for size, ranks in sch.assign(live.gang.world_size, live.busy, self.queue.pending_by_size()):
                run = self.queue.take(size)
                if run is not None:
                    self._dispatch(live, run, ranks)

    def _retire_idle(self) -> None:
        pending = self.queue.pending_by_size()
        for live in list(self.live):
            if not live.works and (live.draining or not any(s <= live.gang.world_size for s in pending)):
                self._retire(live)

    def _start_gangs(self) -> None:
        held = [(lv.node, lv.gang.world_size) for lv in self.live if not lv.draining]
        held += [(None, gang.world_size) for gang, _ in self.starting.values()]
        draining = [(lv.node, lv.gang.world_size) for lv in self.live if lv.draining]
        plan = sch.plan_gangs(self.capacity, held, self.queue.pending_by_size(), self.strict, occupied=draining)
        for size in plan:
            gang = Gang(size, self.opts, self.sizes)
            self.starting[self.pool.submit(gang.start)] = (gang, time.monotonic())
            self.stats["gangs_started"] += 1
            self.stats["gang_sizes"].append(size)
        in_use = sum(lv.gang.world_size for lv in self.live) + sum(g.world_size for g, _ in self.starting.values())
        self.stats["max_devices_held"] = max(self.stats["max_devices_held"], in_use)
        if not self.live and not self.starting and not self.queue.finished():
            # nothing runs and nothing can start: what is pending cannot be placed
            self._fail_pending(list(self.queue.pending_by_size()), (
                f"no gang for these cases can be placed on the cluster's {self.opts.describe()} "
                f"(free per node: {self.capacity})"))

    def _poll(self) -> None:
        now = time.monotonic()
        works = [(live, w) for live in self.live for w in live.works]
        refs = [ref for _, w in works for i, ref in enumerate(w.refs) if i not in w.results]
        deadline = min([w.deadline for _, w in works] + [now + 1.0])
        timeout = max(0.0, min(deadline - now, 0.2 if self.starting else 1.0))
        if refs:
            ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
            if ready:
                ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            ready_set = set(ready)
            for live, work in works:
                if work in live.works:
                    self._collect(live, work, ready_set)
        elif self.starting:
            concurrent.futures.wait(list(self.starting), timeout=timeout,
                                    return_when=concurrent.futures.FIRST_COMPLETED)
        for future in [f for f in self.starting if f.done()]:
            self._started(future)
        now = time.monotonic()
        self.progress.running([(f"{w.run.spec.label()} on gang {lv.gang.id} ({w.phase})", now - w.dispatched)
                               for lv in self.live for w in lv.works], now)
        for live in list(self.live):
            for work in list(live.works):
                if now > work.deadline:
                    self._work_failed(live, work, CaseTimeoutError(
                        f"timed out after case_timeout_s={self.campaign.case_timeout_s:g}s on gang "
                        f"{live.gang.id} ranks {list(work.ranks)} ({live.gang.host}); those actors were killed"))

    # ------------------------------------------------------------------ transitions

    def _started(self, future: concurrent.futures.Future) -> None:
        gang, t0 = self.starting.pop(future)
        exc = future.exception()
        if exc is not None:
            self.start_failures += 1
            text, retry = describe_failure(exc)
            self.progress.warn("a gang of %d did not start (%d in a row): %s", gang.world_size,
                               self.start_failures, text)
            serving = max([lv.gang.world_size for lv in self.live if not lv.draining], default=0)
            if not retry or self.start_failures > self.campaign.retries:
                self._fail_pending([w for w in self.queue.pending_by_size() if w > serving],
                                   f"no gang could be started: {text}", unplaceable=False)
            return
        self.start_failures = 0
        now = time.monotonic()
        self.stats["gang_start_s"].append(round(now - t0, 3))
        self.stats["gang_start_device_s"] += (now - t0) * gang.world_size
        self.live.append(_Live(gang, now))
        if gang.reused:
            self.stats["gangs_reused"] = self.stats.get("gangs_reused", 0) + 1
        self.progress.event("gang %d (%d ranks) %s on %s in %.1fs", gang.id, gang.world_size,
                            "taken from the pool" if gang.reused else "ready", gang.host, now - t0)

    def _dispatch(self, live: _Live, run: sch.CaseRun, ranks: tuple[int, ...]) -> None:
        now = time.monotonic()
        work = _Work(run, ranks, now, now + self.campaign.case_timeout_s)
        run.gang, run.host = live.gang.id, live.gang.host
        run.nodes = [live.gang.node_ids[r] for r in ranks]
        run.ranks = ranks
        spec = run.spec
        if live.gang.world_of(ranks) is None:  # the ranks are not in the case's world: form it
            work.phase, work.refs = "port", [live.gang.port(ranks)]
        else:
            work.refs = live.gang.identify(ranks, spec.target.function, spec.target.args, spec.case)
        live.works.append(work)

    def _tune_refs(self, live: _Live, work: _Work) -> list[Any]:
        spec = work.run.spec
        return live.gang.tune(work.ranks, spec.target.function, spec.target.args, spec.case,
                              known_failures=dict(work.run.known_failures),
                              check_correctness=self.campaign.check_correctness, ship_binaries=self.shipper.enabled)

    def _collect(self, live: _Live, work: _Work, ready: set[Any]) -> None:
        for i, ref in enumerate(work.refs):
            if i in work.results or ref not in ready:
                continue
            try:
                work.results[i] = self.ray.get(ref, timeout=0)
            except Exception as exc:  # noqa: BLE001 - any failure of a rank fails the attempt
                self._work_failed(live, work, self._root_cause(work, exc))
                return
        if len(work.results) == len(work.refs):
            try:
                self._phase_done(live, work)
            except Exception as exc:  # noqa: BLE001 - disagreeing ranks, unwritable cache, ...
                self._work_failed(live, work, exc)

    def _phase_done(self, live: _Live, work: _Work) -> None:
        spec = work.run.spec
        if work.phase in ("port", "form"):
            if work.phase == "port":
                work.phase, work.refs = "form", live.gang.form(work.ranks, int(work.results[0]))
            else:
                work.phase = "identify"
                work.refs = live.gang.identify(work.ranks, spec.target.function, spec.target.args, spec.case)
            work.results = {}
            return
        if work.phase == "identify":
            self._identified(live, work)
            return
        outs = [work.results[i] for i in range(len(work.refs))]
        seconds = time.monotonic() - work.dispatched
        work.actor_s += max(float(o.get("busy_s") or 0.0) for o in outs)
        entry = merge_entries([o["entry"] for o in outs], spec.world_size)
        # The ranks are done: hand them their next case before the driver's own bookkeeping (the
        # entry's fsync'ed write, its log), which then overlaps the next case instead of delaying it.
        live.works.remove(work)
        self._assign()
        # the entry and the row that says so go together: an interrupt between the two would leave
        # an entry that the report calls "not run" (deferred hands the signal on afterwards)
        with deferred():
            self._record_tuned(live, work, entry, outs, seconds)

    def _record_tuned(self, live: _Live, work: _Work, entry: dict[str, Any], outs: list[Any], seconds: float) -> None:
        """Write the case's merged entry (and its ranks' log lines), then record the case as tuned."""
        run, spec = work.run, work.run.spec
        try:
            path = _cache.write_entry(self.root, entry, durable=False)  # fsync in the background, off the loop
            lines = [line for o in outs for line in o.get("log", [])]
            if lines:
                with open(path.with_suffix(".log"), "a", encoding="utf-8") as f:
                    f.write("\n".join(lines) + "\n")
        except OSError as exc:
            # the driver's disk, not the ranks: they stay (and already run their next case)
            text, retry = describe_failure(exc)
            if self.queue.fail(run, f"writing the entry: {text}", retry=retry, seconds=seconds):
                self.progress.retried("%s: attempt %d failed, retrying: %s", spec.label(), run.attempts, text)
            else:
                self.progress.finished_case("failed", "%s: failed after %d attempt(s): %s",
                                            spec.label(), run.attempts, text)
            return
        self.shipper.store(entry, outs, spec.label())  # the winner's compiled binaries (issue 23)
        run.overhead_s = max(0.0, seconds - work.actor_s)
        self.queue.succeed(run, sch.TUNED, entry=entry, seconds=seconds, path=str(path))
        best, default = entry["best"], entry.get("default_time_ms")
        self.progress.finished_case("tuned", "%s: best config %d (%.4f ms; default %s) in %.1fs on gang %d ranks %s",
                                    spec.label(), best["index"], best["time_ms"],
                                    "failed" if default is None else f"{default:.4f} ms", seconds, live.gang.id,
                                    list(work.ranks))

    def _identified(self, live: _Live, work: _Work) -> None:
        """The case's key is known (in its world): merge it, skip it (cached) or tune it."""
        run, spec = work.run, work.run.spec
        identities = [work.results[i] for i in range(len(work.refs))]
        if len({(x["id"], x["key"]) for x in identities}) > 1:
            raise CampaignError(
                f"args: the ranks of {spec.label()} built arguments with different keys "
                f"({sorted({x['key'] for x in identities})}); key_fn must give every rank the same key")
        work.actor_s += max(float(x.get("busy_s") or 0.0) for x in identities)
        run.identity = identities[0]
        clash = self.claims.claim(run, run.identity)
        if clash is not None:
            live.works.remove(work)
            if clash.kind == "merged":
                if self.queue.merge(run, clash.owner):
                    self.progress.finished_case("merged", "%s: %s", spec.label(), clash.message)
                else:  # reported merged when its owner's entry is there; tuned itself if the owner fails
                    self.progress.event("%s: %s (once that case is done)", spec.label(), clash.message)
            else:
                self.queue.fail(run, clash.message, retry=False)
                self.progress.finished_case("failed", "%s: failed: %s", spec.label(), clash.message)
            return
        cached = None if self.force else self._cached(run.identity)
        if cached is not None:
            entry, path = cached
            live.works.remove(work)
            self.queue.succeed(run, sch.CACHED, entry=entry, path=str(path))
            self.progress.finished_case("cached", "%s: already in the cache (%s)", spec.label(), path)
            return
        work.phase, work.results = "tune", {}
        work.refs = self._tune_refs(live, work)

    def _cached(self, ident: dict[str, Any]) -> tuple[dict[str, Any], Path] | None:
        """The driver's cache entry for this case if a tuning job of the case's world would hit
        it (the hit rule, ``triton_dist._store.decide``; a grown config space is re-tuned)."""
        verdict = _decide.decide(_decide.CallId.from_dict(ident), self.root,
                                 version_check=self.version_check, cache_only="off")
        return (verdict.entry, verdict.path) if verdict.hit and verdict.entry is not None else None

    def _root_cause(self, work: _Work, exc: BaseException) -> BaseException:
        """The error that explains a failed attempt (:func:`~ray_runner.errors.root_cause`),
        looking at every rank of its block: when one rank dies or raises, the others fail a moment
        later with a ``RankFailureError`` (the core tells them) and may report first, so the
        others get a brief wait."""
        errors = [exc]
        others = [ref for i, ref in enumerate(work.refs) if i not in work.results]
        if len(work.refs) > 1 and others:
            ready, _ = self.ray.wait(others, num_returns=len(others), timeout=5.0)
            for ref in ready:
                try:
                    self.ray.get(ref, timeout=0)
                except Exception as other:  # noqa: BLE001 - only inspected
                    errors.append(other)
        return root_cause(errors, work.run.known_failures)

    def _work_failed(self, live: _Live, work: _Work, exc: BaseException) -> None:
        """A failed attempt: its ranks are killed at once (dead, hung or in an unknown state);
        the gang takes no more cases and goes once its other cases are done; the case is
        retried elsewhere, on other processes."""
        if work in live.works:
            live.works.remove(work)
        live.draining = True
        live.gang.kill_ranks(work.ranks)
        text, retry = describe_failure(exc)
        seconds = time.monotonic() - work.dispatched
        run = work.run
        if self.queue.fail(run, text, retry=retry, seconds=seconds):
            self.progress.retried("%s: attempt %d failed, retrying on other processes: %s",
                                  run.spec.label(), run.attempts, text)
        else:
            self.progress.finished_case("failed", "%s: failed after %d attempt(s): %s",
                                        run.spec.label(), run.attempts, text)
        if not live.works:
            self._retire(live)

    def _retire(self, live: _Live) -> None:
        if live in self.live:
            self.live.remove(live)
            alive = time.monotonic() - live.started
            self.stats["gang_seconds"] += alive
            self.stats["device_seconds"] += alive * live.gang.world_size
        if live.draining:  # a case failed on it: never hand such processes to another campaign
            live.gang.kill()
        else:
            live.gang.release()

    def _shutdown(self) -> None:
        for live in list(self.live):
            for work in live.works:
                if work.run.status == sch.RUNNING:
                    self.queue.interrupt(work.run, "interrupted: the campaign stopped before the case finished "
                                                   "(running the campaign again runs it)")
            self._retire(live)
        for gang, _ in list(self.starting.values()):
            gang.kill()
        self.starting.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)
