"""A gang: a placement group of G device bundles, G actors on it, one torch.distributed group.

The gang serves cases of every world size w <= G of the campaign: its ranks are cut into
blocks of w consecutive ranks (``blocks``), and each block runs its cases in a world of its own
(:mod:`ray_runner.world`: the ranks' default group holds exactly the block), formed when the
driver first dispatches a case of that size to it; so a gang of 2 GPUs tunes two single-GPU cases
side by side or one two-GPU case, with the same processes. Start-up (worker processes, imports,
device contexts) is paid once per gang; forming a block's world costs a store and a collective.

:meth:`Gang.start` blocks (the scheduler runs it in a thread) and is bounded at every step: the
placement group must be ready within ``placement_timeout_s`` (else an error naming the missing
resource and what the cluster has), the actors must answer, and the rendezvous must complete.
Whatever was created is torn down on every failure; :meth:`Gang.kill` is idempotent.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from . import pool
from ._ray import actor_resources, bundle, import_ray
from .errors import GangStartError, describe_failure
from .hardware import KIND_SHARE, kind_resource
from .worker import CaseWorker

__all__ = ["Gang", "GangOptions"]

log = logging.getLogger(__name__)

_ids = itertools.count()
_remote_lock = threading.Lock()
_remote_cls: Any = None

#: floor of the bound on actor start-up (worker process + imports of torch/triton on a cold node)
ACTOR_START_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class GangOptions:
    kind: str
    """Device kind the actors tune on (sets ``TRITON_DIST_DEVICE`` in their environment)."""
    resource: str
    """Ray resource of one device (a bundle and an actor each hold one unit)."""
    placement_timeout_s: float
    rendezvous_timeout_s: float
    strategy: str = "STRICT_PACK"
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    pool_code: str | None = None
    """Keep gangs for later campaigns (:mod:`ray_runner.pool`): the code digest of the campaign;
    None: gangs end with the campaign."""
    pool_idle_s: float = 0.0
    """How long a kept gang waits, idle, for another campaign before it ends itself."""
    hardware: str | None = None
    """Accelerator kind every rank must run on (:mod:`ray_runner.hardware`); None: any node with
    the resource."""

    def bundle(self) -> dict[str, float]:
        """One rank's bundle: a unit of the device resource, on a node of the gang's kind."""
        out = bundle(self.resource)
        if self.hardware is not None:
            out[kind_resource(self.hardware)] = KIND_SHARE
        return out

    def describe(self) -> str:
        """The devices a gang takes, for messages (``GPU``, ``GPU of kind H100``)."""
        return self.resource if self.hardware is None else f"{self.resource} of kind {self.hardware}"

    def runtime_env(self) -> dict[str, Any]:
        return {"env_vars": {**self.env, "TRITON_DIST_DEVICE": self.kind}}


def _worker_class() -> Any:
    global _remote_cls
    with _remote_lock:
        if _remote_cls is None:
            ray = import_ray()
            # No restarts and no task retries: a dead actor is a failed attempt, retried by the
            # scheduler on a fresh gang (a restarted rank would have left the process group).
            _remote_cls = ray.remote(max_restarts=0, max_task_retries=0)(CaseWorker)
        return _remote_cls


def _missing_resource_message(opts: GangOptions, world_size: int, ray: Any) -> str:
    per_node = []
    for node in ray.nodes():
        kinds = node.get("Resources", {})
        if node.get("Alive") and (opts.hardware is None or kinds.get(kind_resource(opts.hardware), 0) > 0):
            per_node.append(f"{node.get('NodeManagerAddress')}: {node.get('Resources', {}).get(opts.resource, 0):g}")
    available = ray.available_resources().get(opts.resource, 0)
    where = "on one node" if opts.strategy == "STRICT_PACK" else f"({opts.strategy})"
    return (
        f"a gang of {world_size} × {opts.bundle()!r} {where} was not placed within "
        f"{opts.placement_timeout_s:g}s (placement_timeout_s). The cluster has {opts.describe()} per "
        f"node [{', '.join(per_node) or 'no alive node'}], {available:g} available now.{_kept_gangs_note(ray)} "
        f"Free the devices, add nodes with {world_size} {opts.describe()}, lower world_size, or raise "
        "placement_timeout_s."
    )


#: the pooled placement groups this driver created or claimed (not "kept by an earlier run")
_OURS: set[str] = set()


def _kept_gangs_note(ray: Any) -> str:
    """The gangs kept by an earlier ``--keep-gangs`` run, which hold their devices while idle: a
    later campaign of another shape (or run without ``--keep-gangs``) does not use them, and its
    placement failed with a message that never named them (a tester)."""
    try:
        kept = pool.list_pooled(ray)
    except Exception as exc:  # noqa: BLE001 - the note is a hint; the message stands without it
        log.debug("listing the kept gangs: %s", exc)
        return ""
    # placed and not this driver's own (a pooled gang of this run still PENDING, or started by it,
    # was named as "kept by an earlier run": a reviewer, 2026-12-04)
    kept = [row for row in kept if row.get("state") == "CREATED" and row.get("name") not in _OURS]
    if not kept:
        return ""
    devices = sum(int(row.get("bundles") or 0) for row in kept)
    named = ", ".join(f"{row.get('bundles')} in {row.get('name')}" for row in kept[:5])
    named += ", ..." if len(kept) > 5 else ""
    return (f" {len(kept)} gang(s) kept by an earlier `run --keep-gangs` hold {devices} device(s) "
            f"({named}): only a campaign run with --keep-gangs and the same code, "
            "device, environment and gang shape reuses them; they end after their --keep-gangs idle seconds, "
            "or now with `python -m ray_runner pool stop --address ...`.")


class Gang:
    """G actors that tune cases together: one case of size G or several smaller ones."""

    def __init__(self, world_size: int, opts: GangOptions, sizes: list[int] | None = None) -> None:
        self.id = next(_ids)
        self.world_size = world_size
        self.sizes = sorted({s for s in (sizes or [world_size]) if s <= world_size})
        self.opts = opts
        self.pg: Any = None
        self.actors: list[Any] = []
        self.nodes: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._killed = False
        self.token = uuid.uuid4().hex  # this gang's claim on a pooled gang
        self.pooled = False  # its actors outlive the campaign (named, detached)
        self.reused = False  # claimed from the pool instead of started
        #: rank -> (world id, the gang ranks of that world): the world each actor is in
        self.formed: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._fids = itertools.count(1)

    def __repr__(self) -> str:
        return f"<Gang {self.id} W={self.world_size}>"

    @property
    def node_ids(self) -> list[str]:
        return [n["node_id"] for n in self.nodes]

    @property
    def host(self) -> str:
        return ",".join(sorted({n["host"] for n in self.nodes}))

    def start(self) -> Gang:
        """Place, start and connect the gang (blocking, bounded); on failure nothing is left."""
        try:
            self._start()
        except BaseException as exc:
            self.kill()
            if isinstance(exc, GangStartError):
                raise
            text, retry = describe_failure(exc)
            raise GangStartError(f"gang of {self.world_size} could not start: {text}", retry=retry) from exc
        return self

    def _start(self) -> None:
        ray = import_ray()
        from ray.util.placement_group import placement_group

        W, opts = self.world_size, self.opts
        key, slot = "", -1
        if opts.pool_code is None:
            self._place(ray, placement_group, {})
        else:
            kind = opts.kind if opts.hardware is None else f"{opts.kind}/{opts.hardware}"
            key = pool.gang_key(opts.pool_code, kind, opts.resource, opts.strategy, dict(opts.env), W, self.sizes)
            for _ in range(pool.MAX_SLOTS):
                pg, actors, slot = pool.claim(ray, key, W, self.token, first_slot=slot + 1)
                if actors is not None:
                    with self._lock:
                        if self._killed:
                            raise GangStartError("gang was cancelled before it started")
                        self.pg, self.actors, self.pooled, self.reused = pg, actors, True, True
                        _OURS.add(pool.pg_name(key, slot))
                    self.nodes = ray.get([a.node.remote() for a in self.actors], timeout=ACTOR_START_TIMEOUT_S)
                    log.debug("gang %d (W=%d) reuses pooled gang %s", self.id, W, pool.pg_name(key, slot))
                    return
                if slot < 0:  # every slot taken: an ordinary gang
                    self._place(ray, placement_group, {})
                    break
                try:
                    self._place(ray, placement_group, {"name": pool.pg_name(key, slot), "lifetime": "detached"})
                    break
                except Exception as exc:
                    if "already exists" not in str(exc):
                        raise
                    self.pg = None  # another driver created this slot's gang just now: the next one
                finally:
                    pool.formed(key, slot)
            else:
                raise GangStartError(f"no free pool slot for a gang of {W} (see `python -m ray_runner pool ls`)")
        self._spawn(ray, key, slot)

    def _place(self, ray: Any, placement_group: Any, pg_options: dict[str, Any]) -> None:
        W, opts = self.world_size, self.opts
        with self._lock:
            if self._killed:
                raise GangStartError("gang was cancelled before it started")
            if "name" in pg_options:
                _OURS.add(pg_options["name"])
            self.pg = placement_group([opts.bundle()] * W, strategy=opts.strategy, **pg_options)
            self.pooled = bool(pg_options)
        try:
            ray.get(self.pg.ready(), timeout=opts.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise GangStartError(_missing_resource_message(opts, W, ray)) from None

    def _spawn(self, ray: Any, key: str, slot: int) -> None:
        """Start the actors on the placed group and form the gang's process groups."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        W, opts = self.world_size, self.opts
        pg_options = {"name": pool.pg_name(key, slot)} if self.pooled else {}
        worker = _worker_class()
        with self._lock:
            if self._killed:
                raise GangStartError("gang was cancelled while starting")
            for rank in range(W):
                strategy = PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=rank)
                named = ({"name": pool.actor_name(key, slot, rank), "namespace": pool.NAMESPACE,
                          "lifetime": "detached"} if self.pooled else {})
                self.actors.append(worker.options(
                    scheduling_strategy=strategy, runtime_env=opts.runtime_env(), **actor_resources(opts.resource),
                    **named,
                ).remote(rank, W, opts.resource))
        start_timeout = max(ACTOR_START_TIMEOUT_S, opts.placement_timeout_s)
        self.nodes = ray.get([a.node.remote() for a in self.actors], timeout=start_timeout)
        if self.pooled:  # rank 0 holds the claim and ends the gang once idle for pool_idle_s
            ray.get(self.actors[0].pool_setup.remote(pg_options["name"], opts.pool_idle_s, self.token),
                    timeout=start_timeout)
        # the whole gang's world now (the usual case: cases of the gang's size), bounded
        ranks = tuple(range(W))
        port = ray.get(self.port(ranks), timeout=start_timeout)
        ray.get(self.form(ranks, port), timeout=start_timeout + opts.rendezvous_timeout_s)
        log.debug("gang %d (W=%d) formed its world on %s", self.id, W, self.host)

    # ---------------------------------------------------------------- worlds (non-blocking)

    def world_of(self, ranks: tuple[int, ...]) -> int | None:
        """The id of the world that is exactly ``ranks``, if they are in it; else None."""
        worlds = {self.formed.get(r) for r in ranks}
        if len(worlds) != 1:
            return None
        world = worlds.pop()
        return world[0] if world is not None and world[1] == tuple(ranks) else None

    def _addr(self, ranks: tuple[int, ...]) -> str:
        # One node: loopback (works in sandboxes whose host name does not resolve); else the IP
        # of the node of the block's first rank, which hosts the store on a port it picks.
        same_node = len({self.nodes[r]["node_id"] for r in ranks}) == 1
        return "127.0.0.1" if same_node else self.nodes[ranks[0]]["ip"]

    def port(self, ranks: tuple[int, ...]) -> Any:
        """The port of the store the first of ``ranks`` hosts for their next world (an ObjectRef)."""
        return self.actors[ranks[0]].host_store.remote(self._addr(ranks), self.opts.rendezvous_timeout_s)

    def form(self, ranks: tuple[int, ...], port: int) -> list[Any]:
        """Every rank of ``ranks`` leaves its world and joins a new one of exactly ``ranks``
        (one ObjectRef per rank; the ranks' cases name the new world's id)."""
        fid, addr = next(self._fids), self._addr(ranks)
        for r in ranks:
            self.formed[r] = (fid, tuple(ranks))
        return [self.actors[r].form.remote(fid, addr, port, len(ranks), i, self.opts.rendezvous_timeout_s)
                for i, r in enumerate(ranks)]

    # ---------------------------------------------------------------- work (non-blocking)

    def identify(self, ranks: tuple[int, ...], function: str, builder: str, case: dict[str, Any]) -> list[Any]:
        """The block's ranks build the case's arguments and say where its entry lives (in the
        block's world: :meth:`world_of` must name it)."""
        fid = self.world_of(ranks)
        return [self.actors[r].identify.remote(function, builder, case, len(ranks), fid) for r in ranks]

    def tune(self, ranks: tuple[int, ...], function: str, builder: str, case: dict[str, Any], *,
             known_failures: dict[int, str] | None = None, check_correctness: bool = True,
             ship_binaries: bool = False) -> list[Any]:
        """The block's ranks tune the case in the block's world (one ObjectRef per rank)."""
        fid = self.world_of(ranks)
        return [self.actors[r].tune.remote(function, builder, case, len(ranks), fid, known_failures=known_failures,
                                           check_correctness=check_correctness, ship_binaries=ship_binaries)
                for r in ranks]

    def kill_ranks(self, ranks: tuple[int, ...]) -> None:
        """Kill some actors now (hung past the case's time limit); the rest finish their cases."""
        ray = import_ray()
        for r in ranks:
            if r < len(self.actors):
                try:
                    ray.kill(self.actors[r], no_restart=True)
                except Exception as exc:  # noqa: BLE001 - already dead
                    log.debug("killing rank %d of gang %d: %s", r, self.id, exc)

    # ---------------------------------------------------------------- teardown

    def release(self) -> None:
        """The campaign is done with the gang: a pooled gang stays for the next campaign (its
        claim is dropped); any other gang is killed."""
        if not self.pooled:
            self.kill()
            return
        with self._lock:
            if self._killed:
                return
            self._killed = True  # for this campaign; the actors live on
            actors = list(self.actors)
        try:
            actors[0].release.remote(self.token)
        except Exception as exc:  # noqa: BLE001 - already dead: the pool's next claim cleans up
            log.debug("releasing pooled gang %d: %s", self.id, exc)

    def kill(self) -> None:
        """Kill the actors and remove the placement group (idempotent, never raises)."""
        with self._lock:
            if self._killed:
                return
            self._killed = True
            actors, pg = list(self.actors), self.pg
        try:
            ray = import_ray()
        except ImportError:
            return
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as exc:  # noqa: BLE001 - already dead or disconnected: nothing to free
                log.debug("killing an actor of gang %d: %s", self.id, exc)
        if pg is not None:
            try:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(pg)
            except Exception as exc:  # noqa: BLE001
                log.debug("removing the placement group of gang %d: %s", self.id, exc)
