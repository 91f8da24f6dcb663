"""One campaign over several accelerator kinds: a lane per kind, the lanes side by side.

A lane is one :class:`~ray_runner.executor.Executor` (the driver loop of a one-kind campaign) with
its own queue of every case and its gangs pinned to the lane's kind (``GangOptions.hardware``,
:mod:`ray_runner.hardware`): each case is tuned once per kind, on that kind's nodes only. With
several kinds the lanes run in threads, so the kinds' nodes tune at the same time; a lane's loop
waits on its own gangs only. A kind the campaign asks for but the cluster lacks is a lane whose
cases fail at once with a message naming the kind. With no kinds (a homogeneous cluster) there
is one lane without a constraint: the campaign runs exactly as before kinds existed.

Seeding by kind (:meth:`Fleet.seed`): a node receives the entries of its own kind; a node of no
tuned kind (a CPU-only head, a node that declares no kind) receives every entry, as a shared
directory does.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import scheduler as sch
from .binaries import Shipper
from .executor import Executor
from .gang import GangOptions
from .hardware import FleetPlan, node_kinds
from .progress import Progress
from .results import ResultStream, case_id, read_rows, row_key
from .spec import Campaign, CaseSpec

__all__ = ["Fleet", "Lane", "check_cluster", "check_hardware", "placement_problems", "seed_groups"]

#: how long the stopped lanes together may take to tear their gangs down before the interrupt goes
#: on (within the 25 s bound of ray_runner._signals)
STOP_JOIN_S = 20.0


class _LaneProgress:
    """The campaign's progress, each line prefixed with the lane's kind; one lock for all lanes."""

    _lock = threading.Lock()

    def __init__(self, progress: Progress, hardware: str) -> None:
        self._progress, self._prefix = progress, f"[{hardware}] "
        self._said = time.monotonic()  # this lane's last line: another lane's must not hide a hung case here

    def event(self, message: str, *args: object) -> None:
        with self._lock:
            self._said = time.monotonic()
            self._progress.event(self._prefix + message, *args)

    def finished_case(self, status: str, message: str, *args: object) -> None:
        with self._lock:
            self._said = time.monotonic()
            self._progress.finished_case(status, self._prefix + message, *args)

    def retried(self, message: str, *args: object) -> None:
        with self._lock:
            self._said = time.monotonic()
            self._progress.retried(self._prefix + message, *args)

    def warn(self, message: str, *args: object) -> None:
        with self._lock:
            self._said = time.monotonic()
            self._progress.warn(self._prefix + message, *args)

    def extend(self, more: int) -> None:
        with self._lock:
            self._progress.extend(more)

    def running(self, cases: Sequence[tuple[str, float]], now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            said = self._progress.running([(self._prefix + label, s) for label, s in cases], now, self._said)
            if said:
                self._said = now
            return said


@dataclasses.dataclass
class Lane:
    """The cases of one kind: an executor on that kind's nodes, or none (kind absent)."""

    hardware: str | None
    queue: sch.CaseQueue
    executor: Executor | None = None
    error: BaseException | None = None


class Fleet:
    """Every lane of a campaign: build, run (side by side), and what they did together."""

    def __init__(self, campaign: Campaign, todo: Mapping[str | None, list[CaseSpec]],
                 resumed: Mapping[str | None, list[CaseSpec]], stream: ResultStream, opts: GangOptions, root: Path,
                 force: bool, plan: FleetPlan, progress: Progress, ship_binaries: bool = False) -> None:
        self.plan, self.resource, self.progress, self.stream = plan, opts.resource, progress, stream
        self.campaign = campaign
        self.lanes: list[Lane] = []
        for hardware in (*plan.kinds, *plan.absent):
            lane_progress: Any = progress if hardware is None else _LaneProgress(progress, hardware)
            queue = sch.CaseQueue(todo.get(hardware, []), campaign.retries, hardware=hardware)
            queue.on_done = self._on_done(hardware, queue, list(resumed.get(hardware, [])), lane_progress)
            if hardware in plan.absent:
                message = plan.absent_message(hardware, opts.resource)  # type: ignore[arg-type]
                for size in queue.world_sizes():
                    queue.fail_size(size, message)
                progress.warn("%s", message)
                self.lanes.append(Lane(hardware, queue))
                continue
            executor = Executor(campaign, queue, dataclasses.replace(opts, hardware=hardware), root, force,
                                lane_progress, shipper=Shipper(root, lane_progress, ship_binaries))
            self.lanes.append(Lane(hardware, queue, executor))
        for note in plan.notes(opts.resource):
            progress.warn("%s", note)

    def _on_done(self, hardware: str | None, queue: sch.CaseQueue, resumed: list[CaseSpec],
                 progress: Any) -> Callable[[sch.CaseRun], None]:
        """The lane's writer of the results stream (a row per finished case, tagged with the kind).
        The cases an earlier run finished on this kind are run again if this kind's hardware turns
        out not to be the one they were tuned on (their entries are no hits here)."""
        stream = self.stream

        def on_done(run: sch.CaseRun) -> None:
            row = stream.write(run)
            if run.status == sch.MERGED and run.waited:  # its owner's entry is there now
                progress.finished_case("merged", "%s: merged into case %s, whose entry is written",
                                       run.spec.label(), run.merged_into)
            digest, earlier = row.get("digest"), stream.hardware.get(hardware)
            if resumed and digest and earlier and digest not in earlier:
                progress.warn("this cluster's hardware (%s) is not the one the earlier run tuned on (%s): the %d "
                              "resumed cases are run again", digest, sorted(earlier), len(resumed))
                queue.add(resumed)
                progress.extend(len(resumed))
                for spec in resumed:
                    stream.done.pop(row_key(case_id(spec), hardware), None)
                resumed.clear()

        return on_done

    @staticmethod
    def split(campaign: Campaign, stream: ResultStream, kinds: Sequence[str | None]
              ) -> tuple[dict[str | None, list[CaseSpec]], dict[str | None, list[CaseSpec]]]:
        """(the cases each kind still has to run, those an earlier run finished on it): a case is
        done per kind, so a campaign over two kinds interrupted after one still runs the other."""
        todo: dict[str | None, list[CaseSpec]] = {kind: [] for kind in kinds}
        resumed: dict[str | None, list[CaseSpec]] = {kind: [] for kind in kinds}
        for spec in campaign.cases():
            cid = case_id(spec)
            for kind in kinds:
                (resumed if stream.done and row_key(cid, kind) in stream.done else todo)[kind].append(spec)
        return todo, resumed

    # ------------------------------------------------------------------ running

    def run(self) -> None:
        """Run every lane to its end; with several kinds, side by side in threads. An interrupt
        (Ctrl-C, SIGTERM) stops every lane, which tears its gangs down, and is raised again."""
        running = [lane for lane in self.lanes if lane.executor is not None]
        if len(running) == 1:
            running[0].executor.run()  # type: ignore[union-attr]
        else:
            self._run_side_by_side(running)
        disagree = self.disagreements()
        if disagree:
            self.progress.event("the kinds disagree on the best config of %d case(s) (%s): see the report's "
                                "'Where the kinds disagree'", len(disagree), ", ".join(map(str, disagree)))

    def _run_side_by_side(self, running: list[Lane]) -> None:
        threads = [threading.Thread(target=self._run_lane, args=(lane, running), daemon=True,
                                    name=f"lane-{lane.hardware}") for lane in running]
        for thread in threads:
            thread.start()
        try:
            while any(thread.is_alive() for thread in threads):
                for thread in threads:
                    thread.join(timeout=0.5)
        except BaseException:
            self._stop(running)
            deadline = time.monotonic() + STOP_JOIN_S
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
            raise
        errors = [lane.error for lane in running if lane.error is not None]
        if errors:
            raise errors[0]

    @staticmethod
    def _stop(lanes: Sequence[Lane]) -> None:
        for lane in lanes:
            lane.executor.stopped = True  # type: ignore[union-attr]

    def _run_lane(self, lane: Lane, lanes: Sequence[Lane]) -> None:
        try:
            lane.executor.run()  # type: ignore[union-attr]
        except BaseException as exc:  # noqa: BLE001 - raised again by run() in the main thread
            lane.error = exc
            self._stop(lanes)  # a driver bug in one lane ends the campaign, as with one kind

    # ------------------------------------------------------------------ results

    @property
    def runs(self) -> list[sch.CaseRun]:
        """Every lane's case runs, lane by lane (a case appears once per kind)."""
        return [run for lane in self.lanes for run in lane.queue.runs]

    @property
    def capacity(self) -> dict[str, int]:
        """Devices per node over every lane (the kinds' nodes are disjoint)."""
        out: dict[str, int] = {}
        for lane in self.lanes:
            if lane.executor is not None:
                out.update(lane.executor.capacity)
        return out

    @property
    def stats(self) -> dict[str, Any]:
        """The lanes' executor statistics added up (lists joined)."""
        out: dict[str, Any] = {}
        for lane in self.lanes:
            for name, value in (lane.executor.stats if lane.executor is not None else {}).items():
                if isinstance(value, list):
                    out.setdefault(name, []).extend(value)
                else:
                    out[name] = out.get(name, 0) + value
        return out

    def disagreements(self) -> list[int]:
        """The numbers of the cases whose best config differs between kinds (read back from the
        results stream: the driver keeps no entries)."""
        if not self.plan.heterogeneous:
            return []
        rows, _ = read_rows(self.stream.path, run=self.stream.run)
        best: dict[str, set[Any]] = collections.defaultdict(set)
        numbers: dict[str, int] = {}
        for row in rows.values():
            if row.get("status") in (sch.TUNED, sch.CACHED) and row.get("best_index") is not None:
                best[row["case_id"]].add(row["best_index"])
        del rows
        for spec in self.campaign.cases():
            numbers[case_id(spec)] = spec.number
        return sorted(numbers[cid] for cid, indices in best.items() if len(indices) > 1 and cid in numbers)

    def summary(self) -> list[dict[str, Any]]:
        """One record per kind for the report: its nodes and devices (how its cases ended and its
        entries' digests come from the results stream, :func:`ray_runner.report.build_report`)."""
        if not self.plan.heterogeneous:
            return []
        return [{"hardware": lane.hardware or "", "present": lane.executor is not None,
                 "nodes": list(self.plan.nodes.get(lane.hardware or "", ())),
                 "devices": self.plan.devices.get(lane.hardware or "", 0)} for lane in self.lanes]

    def seed(self, paths: Mapping[str | None, Sequence[str]], root: Path, cache_dir: str | None, timeout_s: float,
             binaries: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """``--seed nodes`` by kind: each node receives its own kind's entry files ``paths`` (by
        kind, :func:`ray_runner.results.entry_paths_by_kind`) and their compiled binaries (issue
        23); a node of no tuned kind (a CPU-only head, a node that declares no kind) receives
        every entry. One summary per node, naming the kind it was seeded as (``hardware``; None:
        every entry)."""
        from ._ray import alive_nodes
        from .seed import seed_nodes

        every = list(dict.fromkeys(p for kind_paths in paths.values() for p in kind_paths))
        if not self.plan.heterogeneous:
            return seed_nodes(every, root, cache_dir, timeout_s, binaries=binaries)
        results = []
        for kind, nodes, chosen in seed_groups(paths, alive_nodes()):
            for result in seed_nodes(chosen, root, cache_dir, timeout_s, binaries=binaries, nodes=nodes):
                results.append({**result, "hardware": kind})
        return results


def seed_groups(paths: Mapping[str | None, Sequence[str]], nodes: Sequence[Mapping[str, Any]]
                ) -> list[tuple[str | None, list[Mapping[str, Any]], list[str]]]:
    """The nodes grouped by the entry files they receive: ``(kind, nodes, paths)``; ``kind`` None
    for the nodes of no tuned kind, which receive every kind's files. A node that declares
    several tuned kinds receives each of theirs."""
    groups: dict[str | None, tuple[list[Mapping[str, Any]], list[str]]] = {}
    for node in nodes:
        kinds = [kind for kind in node_kinds(node) if kind in paths]
        name = "+".join(kinds) or None
        if name not in groups:
            chosen = [p for kind in (kinds or list(paths)) for p in paths[kind]]
            groups[name] = ([], list(dict.fromkeys(chosen)))
        groups[name][0].append(node)
    return [(name, nodes_, chosen) for name, (nodes_, chosen) in groups.items()]


def check_hardware(campaign: Campaign, address: str | None) -> tuple[FleetPlan, str]:
    """The campaign's kinds against a running cluster (``validate --address``): (plan, resource)."""
    plan, resource, _ = check_cluster(campaign, address)
    return plan, resource


def check_cluster(campaign: Campaign, address: str | None) -> tuple[FleetPlan, str, list[str]]:
    """:func:`check_hardware` and :func:`placement_problems` on one connection: (plan, resource,
    one line per world size that no node of a present kind can hold)."""
    from triton_dist._backends import BACKENDS

    from ._ray import ray_session, resolve_device
    from .hardware import plan_fleet

    with ray_session(address) as ray:
        kind = resolve_device(campaign.device, ray.cluster_resources())
        resource = campaign.ray_resource or BACKENDS[kind].ray_resource
        nodes = ray.nodes()
        plan = plan_fleet(campaign.hardware, nodes, resource)
        return plan, resource, placement_problems(campaign, plan, nodes, resource)


def placement_problems(campaign: Campaign, plan: FleetPlan, nodes: Sequence[Mapping[str, Any]],
                       resource: str) -> list[str]:
    """What ``run`` would fail at once, said before it (``validate --address`` passed a campaign
    whose resource no node has, or whose world_size exceeds every node; a tester): one line per
    kind and world size that no alive node (of the kind) can hold, naming the resource, the
    largest node's count and the cases' world sizes. Absent kinds are the plan's own errors."""
    import difflib

    from .hardware import kind_resource

    sizes = collections.Counter(spec.world_size for spec in campaign.cases())
    widths = ", ".join(f"{w} ({n} case(s))" for w, n in sorted(sizes.items()))
    out = []
    for hardware in plan.kinds:
        capacity: dict[str, int] = {}
        for i, node in enumerate(nodes):
            have = node.get("Resources") or {}
            if node.get("Alive") and (hardware is None or have.get(kind_resource(hardware), 0) > 0) \
                    and int(have.get(resource, 0)) > 0:
                capacity[str(node.get("NodeID") or i)] = int(have[resource])
        biggest = sch.largest_gang(capacity, campaign.placement_strategy == "STRICT_PACK")
        devices = resource if hardware is None else f"{resource} of kind {hardware}"
        for w in sorted(w for w in sizes if w > biggest):
            line = f"placement: {sizes[w]} case(s) cannot be placed: " + sch.unplaceable_message(
                w, capacity, campaign.placement_strategy, devices)
            out.append(f"{line} The cases' world sizes: {widths}.")
        if not capacity and sizes:
            declared = sorted({name for node in nodes if node.get("Alive") for name in (node.get("Resources") or {})
                               if not name.startswith(("node:", "accelerator_type:")) and "memory" not in name})
            close = difflib.get_close_matches(resource, declared, n=1, cutoff=0.6)
            out.append(f"placement: the alive nodes declare {', '.join(declared) or 'no resources'}, not "
                       f"{resource!r}" + (f": did you mean {close[0]!r}?" if close else "."))
    return out
