"""Pre-flight: will every rank of every node hit the cache for every case of a campaign?

One task per node that has the campaign's device resource, pinned to it and holding one device
(the hardware digest is the device's); the cases are put into the object store once (each node
pulls them once) and a node answers with its misses only, so the driver's share stays flat in
the node count. For each case and each rank ``r`` of its world size W it
enters a W-rank world as rank ``r`` (:func:`ray_runner.world.fake_world`: ``get_world_size()``,
``get_rank()``, the default and registered groups and ``RANK``/``WORLD_SIZE`` answer as in the
training job; collectives do nothing), builds the arguments, computes the call's identity as
``triton_dist._tuning.resolve`` does (``_decide.identify``) and asks the hit rule
(``_decide.decide``) whether it hits in the node's cache root (``--cache-dir``, else the node's
``TRITON_DIST_AUTOTUNE_DIR`` or the default), with the node's settings (a grown config space is a
miss unless ``TRITON_DIST_AUTOTUNE_CACHE_ONLY`` is set there). Any miss, or a node that cannot
answer, fails the check.

On a fleet of several accelerator kinds (:mod:`ray_runner.hardware`) every node is checked
against its own hardware digest, and the summary counts hits and misses per kind; a kind whose
nodes have different digests (one Ray kind, two devices: their entries cannot be shared) and a
kind the campaign asks for but the cluster lacks fail the check.
"""

from __future__ import annotations

import logging
import socket
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .spec import Campaign, case_text

__all__ = ["check_node", "preflight"]

log = logging.getLogger(__name__)


def check_node(cases: Sequence[tuple[str, str, int, dict[str, Any]]], cache_dir: str | None) -> dict[str, Any]:
    """On one node: one row per (case, rank): hit or the reason for the miss."""
    from triton_dist._backends import get_backend
    from triton_dist.settings import get_settings

    settings = get_settings()
    root = Path(cache_dir).expanduser() if cache_dir else settings.autotune_dir
    backend = get_backend()
    rows = []
    for function, builder, world_size, case in cases:
        for rank in range(world_size):
            row: dict[str, Any] = {"function": function, "case": case, "world_size": world_size, "rank": rank}
            row.update(_check(function, builder, world_size, rank, case, root, settings, backend))
            rows.append(row)
    return {"host": socket.gethostname(), "root": str(root), "device": str(backend.device()), "rows": rows,
            "digest": _digest(backend)}


def _check(function: str, builder: str, world_size: int, rank: int, case: dict[str, Any], root: Path,
           settings: Any, backend: Any) -> dict[str, Any]:
    from triton_dist._store import decide as _decide

    from .errors import describe_failure
    from .worker import CaseContext, build_args, load_target
    from .world import fake_world

    try:
        tuner = load_target(function)
        with fake_world(world_size, rank) as group:
            args, kwargs = build_args(builder, case, CaseContext(rank, world_size, backend.device(), group))
            call = _decide.identify(tuner.target, tuner.key_fn(*args, **kwargs), world_size, backend)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            verdict = _decide.decide(call, root, version_check=settings.version_check,
                                     cache_only=settings.cache_only)
        row = {"key": call.key, "path": str(verdict.path), "hit": verdict.hit, "index": verdict.index,
               "why": verdict.why, "warnings": [str(w.message) for w in caught] + verdict.notes}
        if verdict.hit and backend.kind != "cpu":  # will its first call still compile? (issue 23)
            from triton_dist._store import binaries

            row["compiles"] = binaries.check(tuner.target.name, Path(verdict.path).stem)
        return row
    except Exception as exc:  # noqa: BLE001 - reported as a miss with the reason
        return {"hit": False, "why": describe_failure(exc)[0]}


def _check_node_brief(cases: Sequence[tuple[str, str, int, dict[str, Any]]], cache_dir: str | None) -> dict[str, Any]:
    """:func:`check_node`, answering with the misses only (and how many pairs were checked): a
    node's answer stays small however many cases hit."""
    started = time.perf_counter()
    result = check_node(cases, cache_dir)
    result["seconds"] = round(time.perf_counter() - started, 3)
    rows = result.pop("rows")
    result["checked"] = len(rows)
    result["rows"] = [row for row in rows if not row.get("hit")]
    return result


def preflight(campaign: Campaign, *, address: str | None = None, cache_dir: str | None = None,
              timeout_s: float = 600.0) -> list[dict[str, Any]]:
    """Run :func:`check_node` on every node with the campaign's device; one result per node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from triton_dist._backends import BACKENDS

    from ._ray import actor_resources, ray_session, resolve_device
    from .hardware import node_kinds, plan_fleet

    cases = [(c.target.function, c.target.args, c.world_size, c.case) for c in campaign.cases()]
    with ray_session(address) as ray:
        kind = resolve_device(campaign.device, ray.cluster_resources())
        resource = campaign.ray_resource or BACKENDS[kind].ray_resource
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(resource, 0) >= 1]
        plan = plan_fleet(campaign.hardware, ray.nodes(), resource)
        absent = [{"host": "-", "hardware": missing, "error": plan.absent_message(missing, resource), "rows": []}
                  for missing in plan.absent]
        if not nodes:
            return [{"host": "-", "error": f"no alive node has the {resource!r} resource", "rows": []}, *absent]
        task = ray.remote(max_retries=0)(_check_node_brief)
        env = {"env_vars": {**campaign.env_dict(), "TRITON_DIST_DEVICE": kind}}
        payload = ray.put(cases)  # once: each node's task pulls the same object
        del cases
        refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
                             runtime_env=env, **actor_resources(resource)).remote(payload, cache_dir)
                for n in nodes]
        del payload
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        ready_set = set(ready)
        results = []
        for node, ref in zip(nodes, refs, strict=True):
            try:
                if ref not in ready_set:
                    ray.cancel(ref, force=True)
                    raise TimeoutError(f"the check did not finish within {timeout_s:g}s")
                result = ray.get(ref, timeout=0)
            except Exception as exc:  # noqa: BLE001 - reported per node
                result = {"host": node.get("NodeManagerAddress"), "error": f"{type(exc).__name__}: {exc}"[:500],
                          "rows": []}
            result["address"] = node.get("NodeManagerAddress")
            if plan.heterogeneous or campaign.hardware is not None:
                result["hardware"] = "+".join(node_kinds(node)) or None
            results.append(result)
    return results + absent


def by_kind(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per accelerator kind: nodes, (case, rank) hits and misses, the nodes' hardware digests."""
    kinds: dict[str, dict[str, Any]] = {}
    for node in results:
        if "hardware" not in node:
            continue
        kind = kinds.setdefault(node["hardware"] or "(no kind)",
                                {"nodes": 0, "hits": 0, "misses": 0, "errors": 0, "digests": []})
        if node.get("error"):
            kind["errors"] += 1
            continue
        kind["nodes"] += 1
        # a node answers with its misses only (and how many (case, rank) pairs it checked)
        misses = sum(1 for r in node["rows"] if not r.get("hit"))
        kind["hits"] += node.get("checked", len(node["rows"])) - misses
        kind["misses"] += misses
        if node.get("digest") and node["digest"] not in kind["digests"]:
            kind["digests"].append(node["digest"])
    return kinds


def _kind_lines(results: Sequence[dict[str, Any]]) -> tuple[bool, list[str]]:
    ok, lines = True, []
    for name, kind in sorted(by_kind(results).items()):
        line = (f"kind {name}: {kind['nodes']} node(s), {kind['hits']} hit(s), {kind['misses']} miss(es)"
                + (f", {kind['errors']} node(s) not checked" if kind["errors"] else "")
                + (f", hardware digest(s) {', '.join(kind['digests'])}" if kind["digests"] else ""))
        ok = ok and not kind["misses"] and not kind["errors"]
        if len(kind["digests"]) > 1:
            ok = False
            line += (" -- DIFFERENT hardware under one kind: an entry tuned on one of these nodes misses on "
                     "the others; declare a finer kind on them (accelerator_type:<KIND> resource)")
        lines.append(line)
    return ok, lines


def summarize(results: Sequence[dict[str, Any]]) -> tuple[bool, list[str]]:
    """(every rank of every node hits, human-readable lines; per kind on a fleet of kinds)."""
    ok, lines = _kind_lines(results)
    for node in results:
        name = node.get("address") or node.get("host")
        if node.get("error"):
            ok = False
            lines.append(f"{name}: ERROR {node['error']}")
            continue
        misses = [r for r in node["rows"] if not r.get("hit")]
        checked = node.get("checked", len(node["rows"]))
        ok = ok and not misses
        kind = f"kind {node['hardware'] or '(none)'}, " if "hardware" in node else ""
        lines.append(f"{name} ({kind}{node.get('device')}, root {node.get('root')}): "
                     f"{checked - len(misses)}/{checked} (case, rank) pairs hit")
        for r in misses:
            lines.append(f"  MISS {r['function']} {case_text(r['case'])} rank {r['rank']}/{r['world_size']}: "
                         f"{r.get('why')}" + (f" ({r['path']})" if r.get("path") else ""))
        for r in node["rows"]:  # a hit whose first call still compiles: reported, not a failure
            if r.get("hit") and r.get("compiles"):
                lines.append(f"  COMPILES {r['function']} {case_text(r['case'])} rank {r['rank']}/"
                             f"{r['world_size']}: {r['compiles']}")
    return ok, lines


def _digest(backend: Any) -> str:
    """This node's hardware digest (what its entries are keyed by): summed up per kind."""
    from triton_dist._store.fingerprint import hardware_info

    return str(hardware_info(backend)["digest"])
