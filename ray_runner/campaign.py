"""Run a campaign: gangs on Ray, cases scheduled dynamically, entries merged, written and seeded.

One driver loop (:class:`_Executor`) owns every gang. Gangs start in threads (placement and
rendezvous block, bounded); cases run as ObjectRefs that the loop waits on with ``ray.wait``, so
a free gang takes the next case at once and a case past its time limit is noticed within a
second. Each case goes: rank 0 identifies the entry (key, id) → skipped if the driver's cache has
it (unless ``force``) → every rank tunes → the driver merges and writes the entry.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from triton_dist import _cache

from . import scheduler as sch
from ._ray import cluster_capacity, import_ray, ray_session, resolve_device
from .errors import CaseTimeoutError, InfrastructureError, describe_failure
from .gang import Gang, GangOptions
from .merge import merge_entries
from .progress import Progress
from .spec import Campaign

__all__ = ["CampaignResult", "RunOptions", "run_campaign"]

log = logging.getLogger(__name__)

SEED_MODES = ("none", "nodes", "shared")
CAPACITY_REFRESH_S = 10.0


@dataclasses.dataclass(frozen=True)
class RunOptions:
    address: str | None = None
    """Ray address (``auto``, ``host:port``, ``ray://...``); None: ``RAY_ADDRESS`` or a local Ray."""
    cache_dir: str | None = None
    """Where merged entries go (default: the driver's ``TRITON_DIST_AUTOTUNE_DIR``)."""
    seed: str = "none"
    force: bool = False
    """Re-tune cases whose entry is already in the cache."""
    progress: bool = True
    write_report: bool = True


@dataclasses.dataclass
class CampaignResult:
    campaign: Campaign
    runs: list[sch.CaseRun]
    kind: str
    resource: str
    root: str
    wall_s: float
    capacity: dict[str, int]
    stats: dict[str, Any]
    seeded: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    report_paths: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> list[sch.CaseRun]:
        return [r for r in self.runs if r.status == sch.FAILED]

    @property
    def seed_errors(self) -> list[str]:
        return [f"{s.get('address') or s.get('host')}: {e}" for s in self.seeded for e in s.get("errors", [])]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.seed_errors


def _check_writable(root: Path) -> None:
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".probe-"):
            pass
    except OSError as exc:
        raise InfrastructureError(
            f"the cache directory {root} is not writable ({exc.strerror or exc}); the campaign's "
            "entries could not be saved. Pass --cache-dir DIR or set TRITON_DIST_AUTOTUNE_DIR."
        ) from exc


@dataclasses.dataclass
class _Slot:
    gang: Gang
    started: float
    run: sch.CaseRun | None = None
    phase: str = "idle"  # idle | identify | tune
    refs: list[Any] = dataclasses.field(default_factory=list)
    results: dict[int, Any] = dataclasses.field(default_factory=dict)
    dispatched: float = 0.0
    deadline: float = float("inf")


class _Executor:
    def __init__(self, campaign: Campaign, queue: sch.CaseQueue, opts: GangOptions, root: Path,
                 force: bool, progress: Progress) -> None:
        self.ray = import_ray()
        self.campaign, self.queue, self.opts, self.root = campaign, queue, opts, root
        self.force, self.progress = force, progress
        self.strict = opts.strategy == "STRICT_PACK"
        self.slots: list[_Slot] = []
        self.starting: dict[concurrent.futures.Future, tuple[Gang, sch.CaseRun, float]] = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="gang-start")
        self.capacity = cluster_capacity(opts.resource)
        self._capacity_at = time.monotonic()
        self.stats: dict[str, Any] = {"gangs_started": 0, "gang_start_s": [], "max_devices_held": 0,
                                      "gang_seconds": 0.0, "device_seconds": 0.0}
        from triton_dist.settings import get_settings

        self.version_check = get_settings().version_check

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        try:
            self._fail_infeasible()
            while not self.queue.finished():
                self._refresh_capacity()
                self._assign_idle()
                self._start_gangs()
                self._poll()
        finally:
            self._shutdown()

    def _refresh_capacity(self) -> None:
        now = time.monotonic()
        if now - self._capacity_at >= CAPACITY_REFRESH_S:
            self.capacity = cluster_capacity(self.opts.resource)
            self._capacity_at = now
            self._fail_infeasible()

    def _fail_infeasible(self) -> None:
        biggest = sch.largest_gang(self.capacity, self.strict)
        for w in list(self.queue.pending_by_size()):
            if w > biggest:
                where = "one node" if self.strict else "the cluster"
                message = (f"world_size {w} needs {w} × {self.opts.resource} on {where} "
                           f"({self.opts.strategy}), but the most the cluster has is {biggest} "
                           f"(per node: {sorted(self.capacity.values(), reverse=True) or 'none'}). "
                           f"Add such nodes, or lower world_size.")
                for run in self.queue.fail_size(w, message):
                    self.progress.finished_case("failed", "%s: failed: %s", run.spec.label(), message)

    def _held(self) -> list[tuple[str | None, int]]:
        held: list[tuple[str | None, int]] = [(s.gang.node_ids[0] if s.gang.nodes else None, s.gang.world_size)
                                              for s in self.slots]
        held += [(None, gang.world_size) for gang, _, _ in self.starting.values()]
        return held

    def _assign_idle(self) -> None:
        for slot in list(self.slots):
            if slot.phase != "idle":
                continue
            run = self.queue.take(slot.gang.world_size)
            if run is None:
                self._retire(slot)
            else:
                self._dispatch(slot, run)

    def _start_gangs(self) -> None:
        plan = sch.plan_gangs(self.capacity, self._held(), self.queue.pending_by_size(), self.strict)
        for w in plan:
            run = self.queue.take(w)
            if run is None:
                continue
            gang = Gang(w, self.opts)
            future = self.pool.submit(gang.start)
            self.starting[future] = (gang, run, time.monotonic())
            self.stats["gangs_started"] += 1
        held = sum(w for _, w in self._held())
        self.stats["max_devices_held"] = max(self.stats["max_devices_held"], held)
        if not self.slots and not self.starting and not self.queue.finished():
            # Nothing runs and nothing can start: whatever is pending cannot be placed.
            for w in list(self.queue.pending_by_size()):
                message = f"no gang of world size {w} can be placed on the cluster's {self.opts.resource} ({self.capacity})"
                for run in self.queue.fail_size(w, message):
                    self.progress.finished_case("failed", "%s: failed: %s", run.spec.label(), message)

    def _poll(self) -> None:
        now = time.monotonic()
        busy = [s for s in self.slots if s.phase != "idle"]
        refs = [ref for s in busy for i, ref in enumerate(s.refs) if i not in s.results]
        deadline = min([s.deadline for s in busy] + [now + 1.0])
        timeout = max(0.0, min(deadline - now, 0.2 if self.starting else 1.0))
        if refs:
            ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
            if ready:
                ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            ready_set = set(ready)
            for slot in busy:
                self._collect(slot, ready_set)
        elif self.starting:
            concurrent.futures.wait(list(self.starting), timeout=timeout,
                                    return_when=concurrent.futures.FIRST_COMPLETED)
        for future in [f for f in self.starting if f.done()]:
            self._started(future)
        now = time.monotonic()
        for slot in list(self.slots):
            if slot.phase != "idle" and now > slot.deadline and slot in self.slots:
                error = CaseTimeoutError(f"timed out after case_timeout_s={self.campaign.case_timeout_s:g}s "
                                         f"on gang {slot.gang.id} ({slot.gang.host}); the gang was killed")
                self._attempt_failed(slot, error)

    # ------------------------------------------------------------------ transitions

    def _started(self, future: concurrent.futures.Future) -> None:
        gang, run, t0 = self.starting.pop(future)
        exc = future.exception()
        if exc is not None:
            text, retry = describe_failure(exc)
            self._record_failure(run, text, retry, 0.0)
            return
        now = time.monotonic()
        self.stats["gang_start_s"].append(round(now - t0, 3))
        slot = _Slot(gang, now)
        self.slots.append(slot)
        self.progress.event("gang %d (W=%d) ready on %s in %.1fs", gang.id, gang.world_size, gang.host, now - t0)
        self._dispatch(slot, run)

    def _dispatch(self, slot: _Slot, run: sch.CaseRun) -> None:
        now = time.monotonic()
        slot.run, slot.dispatched, slot.deadline = run, now, now + self.campaign.case_timeout_s
        slot.results = {}
        run.gang, run.host, run.nodes = slot.gang.id, slot.gang.host, slot.gang.node_ids
        spec = run.spec
        if self.force:
            slot.phase, slot.refs = "tune", self._tune_refs(slot, run)
        else:
            slot.phase, slot.refs = "identify", slot.gang.identify(spec.target.function, spec.target.args, spec.case)

    def _tune_refs(self, slot: _Slot, run: sch.CaseRun) -> list[Any]:
        spec = run.spec
        return slot.gang.tune(spec.target.function, spec.target.args, spec.case,
                              known_failures=dict(run.known_failures),
                              check_correctness=self.campaign.check_correctness)

    def _collect(self, slot: _Slot, ready: set[Any]) -> None:
        for i, ref in enumerate(slot.refs):
            if i in slot.results or ref not in ready:
                continue
            try:
                slot.results[i] = self.ray.get(ref, timeout=0)
            except Exception as exc:  # noqa: BLE001 - any failure of a rank fails the attempt
                self._attempt_failed(slot, self._root_cause(slot, exc))
                return
        if len(slot.results) == len(slot.refs):
            try:
                self._phase_done(slot)
            except Exception as exc:  # noqa: BLE001 - disagreeing ranks, unwritable cache, ...
                self._attempt_failed(slot, exc)

    def _phase_done(self, slot: _Slot) -> None:
        run = slot.run
        if run is None:  # a busy slot always has a case; nothing to finish otherwise
            return
        spec = run.spec
        if slot.phase == "identify":
            run.identity = slot.results[0]
            cached = self._cached(run.identity)
            if cached is not None:
                entry, path = cached
                self.queue.succeed(run, sch.CACHED, entry=entry, path=str(path))
                self.progress.finished_case("cached", "%s: already in the cache (%s)", spec.label(), path)
                self._idle(slot)
                return
            slot.phase, slot.results = "tune", {}
            slot.refs = self._tune_refs(slot, run)
            return
        outs = [slot.results[i] for i in range(len(slot.refs))]
        entry = merge_entries([o["entry"] for o in outs], spec.world_size)
        path = _cache.write_entry(self.root, entry)
        lines = [line for o in outs for line in o.get("log", [])]
        if lines:
            with open(path.with_suffix(".log"), "a", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
        seconds = time.monotonic() - slot.dispatched
        self.queue.succeed(run, sch.TUNED, entry=entry, seconds=seconds, path=str(path))
        best = entry["best"]
        self.progress.finished_case("tuned", "%s: best config %d (%.4f ms; default %s) in %.1fs on gang %d",
                                    spec.label(), best["index"], best["time_ms"],
                                    "failed" if entry.get("default_time_ms") is None
                                    else f"{entry['default_time_ms']:.4f} ms", seconds, slot.gang.id)
        self._idle(slot)

    def _cached(self, ident: dict[str, Any]) -> tuple[dict[str, Any], Path] | None:
        """The driver's cache entry for this case if it would be a hit (as ``_tuning._lookup``)."""
        path = _cache.entry_path(self.root, ident["function"], ident["id"])
        if not path.exists():
            return None
        entry = _cache.read_entry(path, self.root)
        if entry is None or entry["key"] != ident["key"] or entry["source_hash"] != ident["source_hash"]:
            return None
        if entry["best"]["config"] not in ident["space"]:
            return None
        if self.version_check:
            old = entry.get("versions", {})
            if any(old.get(k) != v for k, v in ident["versions"].items() if k != "python"):
                return None
        return entry, path

    def _root_cause(self, slot: _Slot, exc: BaseException) -> BaseException:
        """The error that explains a failed gang attempt, looking at every rank.

        When one rank dies or raises, the others fail a moment later with a ``RankFailureError``
        (the core tells them), and they may report first: wait briefly for every rank and prefer
        a candidate that left its device unusable (``DeviceStateError``: remembered, so that the
        retry records it as failed without running it, issue 7 R4), then a dead actor or the
        rank's own error, over the peers' "another rank failed".
        """
        errors = [exc]
        others = [ref for i, ref in enumerate(slot.refs) if i not in slot.results]
        if len(slot.refs) > 1 and others:
            ready, _ = self.ray.wait(others, num_returns=len(others), timeout=5.0)
            for ref in ready:
                try:
                    self.ray.get(ref, timeout=0)
                except Exception as other:  # noqa: BLE001 - only inspected
                    errors.append(other)
        causes = [(getattr(e, "cause", None) or e, e) for e in errors]
        for cause, error in causes:
            details = getattr(cause, "details", None) or {}
            if type(cause).__name__ == "DeviceStateError" and isinstance(details.get("index"), int):
                if slot.run is not None:
                    slot.run.known_failures[details["index"]] = str(details.get("reason") or cause)
                return error
        for cause, error in causes:
            if type(cause).__name__ != "RankFailureError":
                return error
        return exc

    def _idle(self, slot: _Slot) -> None:
        slot.phase, slot.run, slot.refs, slot.results = "idle", None, [], {}
        slot.deadline = float("inf")

    def _attempt_failed(self, slot: _Slot, exc: BaseException) -> None:
        run = slot.run
        seconds = time.monotonic() - slot.dispatched
        self._retire(slot)  # never reuse a gang that failed: a rank may be dead or mid-collective
        if run is not None:
            text, retry = describe_failure(exc)
            self._record_failure(run, text, retry, seconds)

    def _record_failure(self, run: sch.CaseRun, text: str, retry: bool, seconds: float) -> None:
        if self.queue.fail(run, text, retry=retry, seconds=seconds):
            self.progress.retried("%s: attempt %d failed, retrying on a fresh gang: %s",
                                  run.spec.label(), run.attempts, text)
        else:
            self.progress.finished_case("failed", "%s: failed after %d attempt(s): %s",
                                        run.spec.label(), run.attempts, text)

    def _retire(self, slot: _Slot) -> None:
        if slot in self.slots:
            self.slots.remove(slot)
            alive = time.monotonic() - slot.started
            self.stats["gang_seconds"] += alive
            self.stats["device_seconds"] += alive * slot.gang.world_size
        slot.gang.kill()

    def _shutdown(self) -> None:
        for slot in list(self.slots):
            self._retire(slot)
        for gang, run, _ in list(self.starting.values()):
            gang.kill()
            if run.status == sch.RUNNING:
                self.queue.fail(run, "campaign stopped before the case ran", retry=False)
        self.starting.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------- entry point

def run_campaign(campaign: Campaign, options: RunOptions | None = None) -> CampaignResult:
    """Run ``campaign`` on Ray; returns every case's outcome (see :attr:`CampaignResult.ok`)."""
    from triton_dist._backends import BACKENDS
    from triton_dist.settings import get_settings

    from .report import write_report
    from .seed import seed_nodes

    options = options or RunOptions()
    if options.seed not in SEED_MODES:
        raise ValueError(f"seed must be one of {SEED_MODES}, got {options.seed!r}")
    if options.seed == "shared" and not options.cache_dir:
        raise InfrastructureError("--seed shared writes into one directory that every node mounts: "
                                  "pass it as --cache-dir DIR.")
    root = Path(options.cache_dir).expanduser() if options.cache_dir else get_settings().autotune_dir
    _check_writable(root)
    specs = campaign.cases()
    import_ray()

    local_resources = None
    if campaign.ray_resource and campaign.ray_resource not in ("CPU", "GPU"):
        # an embedded Ray has no custom resources unless we declare them: one per core
        widest = max(t.world_size for t in campaign.targets)
        local_resources = {campaign.ray_resource: float(max(os.cpu_count() or 1, widest))}
    with ray_session(options.address, resources=local_resources) as ray:
        kind = resolve_device(campaign.device, ray.cluster_resources())
        resource = campaign.ray_resource or BACKENDS[kind].ray_resource
        opts = GangOptions(kind=kind, resource=resource, placement_timeout_s=campaign.placement_timeout_s,
                           rendezvous_timeout_s=min(campaign.case_timeout_s, 300.0),
                           strategy=campaign.placement_strategy, env=campaign.env_dict())
        queue = sch.CaseQueue(specs, campaign.retries)
        progress = Progress(len(specs), campaign.name, enabled=options.progress)
        executor = _Executor(campaign, queue, opts, root, options.force, progress)
        progress.event("%d cases (world sizes %s) on %s: %s %s per node; cache %s%s", len(specs),
                       queue.world_sizes(), kind, resource, sorted(executor.capacity.values(), reverse=True),
                       root, " (forced re-tuning)" if options.force else "")
        start = time.monotonic()
        try:
            executor.run()
        finally:
            progress.close()
        wall = time.monotonic() - start
        result = CampaignResult(campaign, queue.runs, kind, resource, str(root), wall,
                                dict(executor.capacity), executor.stats)
        entries = [r.entry for r in queue.runs if r.status in (sch.TUNED, sch.CACHED) and r.entry]
        if options.seed == "nodes":
            result.seeded = seed_nodes(entries, options.cache_dir, timeout_s=max(60.0, campaign.placement_timeout_s))
        elif options.seed == "shared":
            result.seeded = [{"root": str(root), "written": len(entries), "unchanged": 0, "errors": []}]
    if options.write_report:
        result.report_paths = write_report(result)
    return result
