"""Run a campaign: connect to Ray, run every case (:mod:`ray_runner.executor`), seed, report.

The driver's cache root (``--cache-dir`` or its ``TRITON_DIST_AUTOTUNE_DIR``) always receives
every merged entry as soon as its case is done: it is what a re-run skips. ``--seed`` then copies
the campaign's entries (new and already cached) to every node or into a shared directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from . import scheduler as sch
from ._ray import import_ray, ray_session, resolve_device, unknown_resource_note
from ._signals import on_interrupt
from .errors import InfrastructureError
from .fleet import Fleet
from .gang import GangOptions
from .hardware import FleetPlan, plan_fleet
from .progress import Progress
from .report import write_report
from .results import ResultStream, RunLock, entry_paths_by_kind, stream_path
from .resume import cases_left, results_stream
from .resume import entry_serves as entry_serves  # importable here, as before
from .spec import Campaign

__all__ = ["CampaignResult", "RunOptions", "run_campaign"]

log = logging.getLogger(__name__)

SEED_MODES = ("none", "nodes", "shared")


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
    ship_binaries: bool | None = None
    """Ship the Triton binaries of each case's best config with ``--seed nodes`` (nodes whose
    Triton would recompile them skip them; :mod:`ray_runner.binaries`). None: on devices that
    compile (not on the CPU, where the interpreter compiles nothing); True: always."""
    keep_gangs_s: float = 0.0
    """Keep the gangs alive this long (idle) for the next campaign on the cluster to reuse
    (:mod:`ray_runner.pool`); 0: they end with the campaign."""
    report_dir: str | None = None
    """Where the report goes; None: the campaign's ``report_dir``."""


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
    hardware: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """One record per accelerator kind tuned on (:meth:`ray_runner.fleet.Fleet.summary`); empty
    when the cluster has no kinds. ``runs`` then holds each case once per kind."""
    report_paths: dict[str, str] = dataclasses.field(default_factory=dict)
    """Absolute paths of the report files, by kind (json, markdown, plot)."""
    root_source: str = "TRITON_DIST_AUTOTUNE_DIR"
    """Where ``root`` came from: --cache-dir, TRITON_DIST_AUTOTUNE_DIR, or the default."""
    driver_host: str = dataclasses.field(default_factory=socket.gethostname)
    interrupted: bool = False
    """Stopped by Ctrl-C or SIGTERM: the report holds the cases finished by then."""
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    """Cases per final status, those finished by an earlier run (resumed) included."""
    resumed: int = 0
    """Cases an earlier run of the campaign finished (read from its results stream, not run again)."""
    results_path: str | None = None
    """The campaign's results stream (:mod:`ray_runner.results`): one row per finished case."""
    run: int = 1
    """Which run of the campaign this is (1 + the runs it resumed from)."""

    @property
    def failed(self) -> list[sch.CaseRun]:
        return [r for r in self.runs if r.status == sch.FAILED]

    @property
    def unplaceable(self) -> bool:
        """Cases failed, every one because the cluster cannot hold its gang (no node has the
        resource, or not its world size of it; a kind it lacks): the cluster cannot run them."""
        failed = self.failed
        return bool(failed) and all(r.unplaceable for r in failed)

    @property
    def seed_errors(self) -> list[str]:
        return [f"{s.get('address') or s.get('host')}: {e}" for s in self.seeded for e in s.get("errors", [])]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.seed_errors and not self.interrupted


def _check_writable(root: Path, what: str = "cache directory", mode: int = 0o700,
                    fix: str = "the campaign's entries could not be saved. Pass --cache-dir DIR or set "
                               "TRITON_DIST_AUTOTUNE_DIR.") -> None:
    from .seed import probe_writable

    try:
        probe_writable(root, mode)
    except OSError as exc:
        raise InfrastructureError(f"the {what} {root} is not writable ({exc.strerror or exc}); {fix}") from exc


# ---------------------------------------------------------------------- entry point

def run_campaign(campaign: Campaign, options: RunOptions | None = None) -> CampaignResult:
    """Run ``campaign`` on Ray; returns every case's outcome (see :attr:`CampaignResult.ok`).

    An interrupt (Ctrl-C, or SIGTERM under ``python -m ray_runner``) tears the gangs down, writes
    the report of the cases finished so far (``"interrupted": true``) and is then raised again;
    finished entries stay in the cache, so running the campaign again finishes it."""
    options = options or RunOptions()
    root, root_source = _cache_root(options)
    _check_writable(stream_path(campaign, options.report_dir).parent, "report directory", 0o777,
                    "the campaign's results and report could not be written. Pass --report-dir DIR or set "
                    "report_dir: in the campaign file to a directory this user can write.")
    with contextlib.ExitStack() as stack:
        ray, stream = _connect(stack, campaign, options, root)
        run = _Run.prepare(campaign, options, ray, stream, root, root_source)
        result = run.tune()
        if not result.interrupted and options.seed != "none":  # a partial campaign is not seeded: a re-run does it
            run.seed(result)
    _report(result, options, run.total)
    return result


def _connect(stack: contextlib.ExitStack, campaign: Campaign, options: RunOptions, root: Path
             ) -> tuple[Any, ResultStream]:
    """Take the campaign's run lock, connect to Ray (or start an embedded one) and open the
    campaign's results stream, each until ``stack`` closes: (the ``ray`` module, the stream)."""
    # one driver at a time, refused before an embedded Ray starts (seconds)
    run_lock = RunLock(stream_path(campaign, options.report_dir)) if options.write_report else None
    if run_lock is not None:
        stack.callback(run_lock.release)
    resources = _embedded_resources(campaign) if _starts_embedded(options) else None
    ray = stack.enter_context(ray_session(options.address, resources=resources))
    # after connecting: a run that cannot connect left a new stream behind, and the next run
    # moved it over the real one's .prev copy (a tester, 2026-12-05)
    return ray, stack.enter_context(results_stream(campaign, root, options, run_lock))


@dataclasses.dataclass
class _Run:
    """A campaign connected to Ray, its fleet planned: tuned (:meth:`tune`), then seeded."""

    campaign: Campaign
    options: RunOptions
    root: Path
    root_source: str
    stream: ResultStream
    fleet: Fleet
    plan: FleetPlan
    kind: str
    resource: str
    ship: bool
    start_nodes: list[dict[str, Any]]
    """The nodes alive when the campaign started (one gone when seeding is reported lost)."""
    progress: Progress
    total: int
    """The cases left to run (those an earlier run finished are not counted)."""
    start: float = dataclasses.field(default_factory=time.monotonic)
    """When the tuning started (the run is made just before)."""

    @classmethod
    def prepare(cls, campaign: Campaign, options: RunOptions, ray: Any, stream: ResultStream, root: Path,
                root_source: str) -> _Run:
        """The device kind and resource, the fleet and the cases it has left to run (``--seed
        nodes``: every node's cache root checked writable first)."""
        from triton_dist._backends import BACKENDS

        kind = resolve_device(campaign.device, ray.cluster_resources())
        resource = campaign.ray_resource or BACKENDS[kind].ray_resource
        ship = options.seed == "nodes" and (options.ship_binaries or (options.ship_binaries is None and kind != "cpu"))
        opts = _gang_options(campaign, options, kind, resource)
        plan = plan_fleet(campaign.hardware, ray.nodes(), resource)
        start_nodes = [n for n in ray.nodes() if n.get("Alive")]
        if options.seed == "nodes":
            _check_node_roots(root, options)
        todo, resumed, progress, total = cases_left(campaign, stream, plan, options)
        fleet = Fleet(campaign, todo, resumed, stream, opts, root, options.force, plan, progress, ship_binaries=ship)
        progress.event("%d cases (world sizes %s) on %s%s: %s %s per node; cache %s%s", total,
                       sorted({t.world_size for t in campaign.targets}), kind,
                       f" × {len(plan.kinds)} kinds {list(plan.kinds)}" if plan.heterogeneous else "", resource,
                       sorted(fleet.capacity.values(), reverse=True), root,
                       " (forced re-tuning)" if options.force else "")
        return cls(campaign, options, root, root_source, stream, fleet, plan, kind, resource, ship, start_nodes,
                   progress, total)

    def result(self, interrupted: bool) -> CampaignResult:
        """The campaign's outcome as of now."""
        fleet, stream = self.fleet, self.stream
        return CampaignResult(self.campaign, fleet.runs, self.kind, self.resource, str(self.root),
                              time.monotonic() - self.start, fleet.capacity, fleet.stats, hardware=fleet.summary(),
                              root_source=self.root_source, interrupted=interrupted, counts=dict(stream.counts),
                              resumed=len(stream.done), results_path=str(stream.path), run=stream.run)

    def early_report(self) -> None:
        """On SIGTERM, before the teardown (see _signals)."""
        if self.options.write_report:
            write_report(self.result(True), self.options.report_dir)

    def tune(self) -> CampaignResult:
        """Run every case left; the outcome (``interrupted``: Ctrl-C or SIGTERM came meanwhile)."""
        interrupted = False
        try:
            with on_interrupt(self.early_report):
                self.fleet.run()  # every lane's executor tears its gangs down, also on an interrupt
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (_signals): report what finished, then re-raise
            interrupted = True
            self.stream.write_missing(self.fleet.runs)
        finally:
            self.progress.close()
            self.stream.close()
        return self.result(interrupted)

    def seed(self, result: CampaignResult) -> None:
        """Seed the campaign's entries (``result.seeded``; ``result.interrupted`` on an interrupt)."""
        try:  # every case is done: an interrupt now still gets its report (a re-run only seeds)
            with on_interrupt(self.early_report):
                result.seeded = _seed(self.campaign, self.options, self.fleet, self.stream, self.plan, self.root,
                                      self.ship, self.start_nodes)
        except KeyboardInterrupt:
            result.interrupted = True


def _report(result: CampaignResult, options: RunOptions, total: int) -> None:
    """Write the campaign's report; an interrupted campaign's interrupt is raised again then
    (the caller still sees it, after the gangs and the report)."""
    if options.write_report:
        started = time.monotonic()
        result.report_paths = write_report(result, options.report_dir)
        log.info("report of %d cases written in %.2fs", sum(result.counts.values()), time.monotonic() - started)
    if result.interrupted:
        campaign = result.campaign
        log.warning("campaign %s interrupted: %d of %d cases finished (their entries are in %s); report: %s",
                    campaign.name, sum(n for s, n in result.counts.items() if s in ("tuned", "cached", "merged")),
                    result.resumed + total, result.root, result.report_paths.get("json", "not written"))
        raise KeyboardInterrupt(f"campaign {campaign.name} interrupted")


def _cache_root(options: RunOptions) -> tuple[Path, str]:
    """The campaign's cache root (checked writable) and where it came from; the options' checks."""
    from triton_dist.settings import get_settings

    if options.seed not in SEED_MODES:
        raise ValueError(f"seed must be one of {SEED_MODES}, got {options.seed!r}")
    if options.seed == "shared" and not options.cache_dir:
        raise InfrastructureError("--seed shared writes into one directory that every node mounts: "
                                  "pass it as --cache-dir DIR.")
    root = Path(options.cache_dir).expanduser() if options.cache_dir else get_settings().autotune_dir
    root = root.absolute()
    root_source = "--cache-dir" if options.cache_dir else \
        "TRITON_DIST_AUTOTUNE_DIR" if os.environ.get("TRITON_DIST_AUTOTUNE_DIR", "").strip() else "the default"
    _check_writable(root)
    if options.keep_gangs_s > 0 and _starts_embedded(options):
        log.warning("--keep-gangs has no effect here: the campaign starts an embedded Ray, which ends with it "
                    "(pass --address of a running cluster)")
    return root, root_source


def _starts_embedded(options: RunOptions) -> bool:
    """The campaign starts a local Ray of its own (no address, none exported, none running here)."""
    return not (options.address or os.environ.get("RAY_ADDRESS")) and not import_ray().is_initialized()


def _embedded_resources(campaign: Campaign) -> dict[str, float] | None:
    """An embedded Ray has no custom resources unless we declare them: one per core. It declares
    whatever the campaign names, so a name that is no known device resource is warned about (a
    typo runs here and fails every case on a cluster)."""
    if not campaign.ray_resource or campaign.ray_resource in ("CPU", "GPU"):
        return None
    widest = max(t.world_size for t in campaign.targets)
    count = max(os.cpu_count() or 1, widest)
    note = unknown_resource_note(campaign.ray_resource, embedded=count)
    if note:
        log.warning("%s", note)
    return {campaign.ray_resource: float(count)}


def _gang_options(campaign: Campaign, options: RunOptions, kind: str, resource: str) -> GangOptions:
    pool_code = None
    if options.keep_gangs_s > 0:
        from .pool import code_digest

        pool_code = code_digest(path.split(":")[0] for t in campaign.targets for path in (t.function, t.args))
    return GangOptions(kind=kind, resource=resource, placement_timeout_s=campaign.placement_timeout_s,
                       rendezvous_timeout_s=min(campaign.case_timeout_s, 300.0),
                       strategy=campaign.placement_strategy, env=campaign.env_dict(),
                       pool_code=pool_code, pool_idle_s=options.keep_gangs_s)


def _check_node_roots(root: Path, options: RunOptions) -> None:
    """``--seed nodes``: every node's cache root is writable, checked before any case is tuned."""
    from .seed import check_node_roots

    problems = check_node_roots(str(root) if options.cache_dir else None)
    if problems:
        raise InfrastructureError(
            f"{len(problems)} node(s) cannot write their cache root, so --seed nodes could not give them the "
            "campaign's entries: " + "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
            + ". Make the folder writable by the Ray workers' user on those nodes (or point their "
            "TRITON_DIST_AUTOTUNE_DIR, or --cache-dir, at one that is), or run with --seed none")


def _seed(campaign: Campaign, options: RunOptions, fleet: Fleet, stream: ResultStream, plan: FleetPlan, root: Path,
          ship: bool, start_nodes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Seed every node (each with its kind's entries and their binaries) or report the shared root.
    A node alive when the campaign started and gone now is in the summaries as ``lost``."""
    from .binaries import load as load_binaries
    from .seed import mark_lost

    by_kind = entry_paths_by_kind(stream.path, campaign, plan.kinds)
    paths = list(dict.fromkeys(p for kind_paths in by_kind.values() for p in kind_paths))
    if options.seed != "nodes":
        return [{"root": str(root), "written": len(paths), "unchanged": 0, "errors": []}]
    bundles = load_binaries(root, _load_entries(paths)) if ship else None
    # --cache-dir as the driver resolved it (root): a relative one would be each raylet's own
    seeded = fleet.seed(by_kind, root, str(root) if options.cache_dir else None,
                        timeout_s=max(60.0, campaign.placement_timeout_s), binaries=bundles)
    reached = {s.get("node_id") for s in seeded}
    gone = [{"node_id": n["NodeID"], "host": n.get("NodeManagerAddress"), "address": n.get("NodeManagerAddress"),
             "root": None, "written": 0, "unchanged": 0, "errors": []}
            for n in start_nodes or () if n["NodeID"] not in reached]
    mark_lost(gone, set())
    return seeded + gone


def _load_entries(paths: list[str]) -> list[dict[str, Any]]:
    """The entries at ``paths`` (for the binaries to ship with them: GPU and NPU campaigns)."""
    import json

    out = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                out.append(json.load(f))
        except (OSError, ValueError) as exc:
            log.warning("not shipping the binaries of %s: %s", path, exc)
    return out
