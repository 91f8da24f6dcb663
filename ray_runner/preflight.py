"""Pre-flight: will every rank of every node hit the cache for every case of a campaign?

One task per node that has the campaign's device resource, pinned to it and holding one device
(the hardware digest is the device's); the cases are put into the object store once (each node
pulls them once) and a node answers with its misses only, so the driver's share stays flat in
the node count. For each case and each rank ``r`` of its world size W the hit rule runs as in
the training job (:mod:`ray_runner.preflight_node`): in a W-rank world entered as rank ``r``
(:func:`ray_runner.world.fake_world`: ``get_world_size()``, ``get_rank()``, the default and
registered groups and ``RANK``/``WORLD_SIZE`` answer as in the training job; collectives do
nothing) it builds the arguments, computes the call's identity as ``triton_dist._tuning.resolve``
does (``_decide.identify``) and asks the hit rule (``_decide.decide``) whether it hits in the
node's cache root (``--cache-dir``, else the node's ``TRITON_DIST_AUTOTUNE_DIR`` or the default),
with the node's settings (a grown config space is a miss unless
``TRITON_DIST_AUTOTUNE_CACHE_ONLY`` is set there). Any miss, or a node that cannot answer, fails
the check.

Flat in the node count (issue 21): the rule runs in full on one node per accelerator kind (the
*reference*); every other node of the kind gets the reference's verdicts and digests of the
entries' bytes (one object, pulled once per node) and checks that its own fingerprint (hardware,
software, settings, targets' code) is the reference's and that each entry file is byte-identical
to the reference's; any pair where that fails is checked with the full rule on that node, and a
node whose fingerprint differs runs it on every pair (``preflight_node`` says why that reports
exactly what the rule would). Each node's answer says how many pairs the rule ran on there.

On a fleet of several accelerator kinds (:mod:`ray_runner.hardware`) every node is checked
against its own hardware digest, and the summary counts hits and misses per kind; a kind whose
nodes have different digests (one Ray kind, two devices: their entries cannot be shared) and a
kind the campaign asks for but the cluster lacks fail the check.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .preflight_node import check_node
from .spec import Campaign, case_text

__all__ = ["check_node", "preflight"]

log = logging.getLogger(__name__)


def preflight(campaign: Campaign, *, address: str | None = None, cache_dir: str | None = None,
              timeout_s: float = 600.0) -> list[dict[str, Any]]:
    """Check every node with the campaign's device (the hit rule in full on one node per kind,
    the others against it: module docstring); one result per node, in ``ray.nodes()`` order.
    ``timeout_s`` bounds the whole check (a kind's other nodes start when its reference is done)."""
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
        env = {"env_vars": {**campaign.env_dict(), "TRITON_DIST_DEVICE": kind}}
        for node in nodes:
            if _no_free_device(node, resource):
                log.warning("node %s: every %r is in use now: its check waits for one (up to --timeout %gs). %s",
                            node.get("NodeManagerAddress"), resource, timeout_s, _busy_advice(resource))
        payload = ray.put(cases)  # once: each node's task pulls the same object
        del cases
        refs = _dispatch(ray, nodes, payload, cache_dir, timeout_s,
                         lambda n: {"scheduling_strategy": NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
                                    "runtime_env": env, **actor_resources(resource)})
        del payload
        results = []
        for node, (ref, deadline) in zip(nodes, refs, strict=True):
            result = _answer(ray, ref, deadline, node, timeout_s, resource)
            result["address"] = node.get("NodeManagerAddress")
            if plan.heterogeneous or campaign.hardware is not None:
                result["hardware"] = "+".join(node_kinds(node)) or None
            results.append(result)
    return results + absent


def _dispatch(ray: Any, nodes: Sequence[Mapping[str, Any]], payload: Any, cache_dir: str | None, timeout_s: float,
              options: Any) -> list[tuple[Any, float]]:
    """Start the check on every node: the full rule on the first node of each accelerator kind
    (the reference), then, as each reference answers, every other node of its kind against it
    (its verdicts travel node to node as an object; the driver never holds them). One
    (reference to the node's answer, deadline) per node."""
    from .hardware import node_kinds
    from .preflight_node import check_against, reference

    full = ray.remote(max_retries=0, num_returns=2)(reference)
    against = ray.remote(max_retries=0)(check_against)
    deadline = time.monotonic() + timeout_s
    kinds: dict[tuple[str, ...], list[int]] = {}
    for i, node in enumerate(nodes):
        kinds.setdefault(tuple(node_kinds(node)), []).append(i)
    refs: list[Any] = [None] * len(nodes)
    waiting: dict[Any, tuple[list[int], Any]] = {}
    for members in kinds.values():
        head = members[0]
        refs[head], expect = full.options(**options(nodes[head])).remote(payload, cache_dir)
        waiting[refs[head]] = (members, expect)
    while waiting:
        ready, _ = ray.wait(list(waiting), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        members, expect = waiting.pop(ready[0])
        answered = not _answer(ray, ready[0], deadline, nodes[members[0]]).get("error")
        source = str(nodes[members[0]].get("NodeManagerAddress"))
        for m in members[1:]:  # a reference that failed: its kind's nodes run the full rule
            refs[m] = against.options(**options(nodes[m])).remote(payload, cache_dir, expect if answered else None,
                                                                source)
    return [(ref, deadline) for ref in refs]


def _no_free_device(node: Mapping[str, Any], resource: str) -> bool:
    """Whether ``node`` has no free ``resource`` now (False when Ray cannot say)."""
    try:
        from ray._private.state import available_resources_per_node  # Ray's DeveloperAPI

        return float(available_resources_per_node().get(node["NodeID"], {}).get(resource, 0.0)) < 1.0
    except Exception as exc:  # noqa: BLE001 - a hint only
        log.debug("free devices of %s: %s", node.get("NodeManagerAddress"), exc)
        return False


def _busy_advice(resource: str) -> str:
    return (f"preflight runs on one {resource!r} per node, so that it never builds arguments on a device a job is "
            "using: gangs kept by `run --keep-gangs` hold theirs while idle (`python -m ray_runner pool ls`; "
            "`pool stop` frees them), a running job holds its own; run preflight when one is free")


def _answer(ray: Any, ref: Any, deadline: float, node: Mapping[str, Any], bound_s: float = 0.0,
            resource: str | None = None) -> dict[str, Any]:
    """A node's answer, or an error naming why there is none (``bound_s``: the check's bound, said)."""
    try:
        if ref is None:
            raise TimeoutError("not checked: the reference node of its kind did not answer in time")
        ready, _ = ray.wait([ref], timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            ray.cancel(ref, force=True)
            if resource is not None and _no_free_device(node, resource):  # it waited for a device, not a hang
                raise TimeoutError(f"not checked: no {resource!r} of this node was free within {bound_s:g}s "
                                   f"(preflight --timeout). {_busy_advice(resource)}")
            raise TimeoutError(f"the check did not finish within {bound_s:g}s (preflight --timeout): does an "
                               "argument builder or key_fn hang? `run` names the case whose attempt times out "
                               "(case_timeout_s); a larger campaign may need a larger --timeout")
        return dict(ray.get(ref, timeout=0))
    except Exception as exc:  # noqa: BLE001 - reported per node
        return {"host": node.get("NodeManagerAddress"), "error": f"{type(exc).__name__}: {exc}"[:500], "rows": []}


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
                     f"{checked - len(misses)}/{checked} (case, rank) pairs hit" + _how(node))
        for r in misses:
            lines.append(f"  MISS {r['function']} {case_text(r['case'])} rank {r['rank']}/{r['world_size']}: "
                         f"{r.get('why')}" + (f" ({r['path']})" if r.get("path") else ""))
        for r in node["rows"]:  # a hit whose first call still compiles: reported, not a failure
            if r.get("hit") and r.get("compiles"):
                lines.append(f"  COMPILES {r['function']} {case_text(r['case'])} rank {r['rank']}/"
                             f"{r['world_size']}: {r['compiles']}")
    if any(not r.get("hit") for node in results for r in node.get("rows", ())):
        first = next(((node, r) for node in results for r in node.get("rows", ())
                      if not r.get("hit") and r.get("key")), None)
        if first is not None:  # "no cache entry" names no cause: `why` compares with the nearest entry
            node, r = first
            lines.append("to see what changed since a miss's entry was tuned: python -m triton_dist.cache why "
                         f"{shlex.quote(r['function'])} {shlex.quote(r['key'])} --world-size {r['world_size']}"
                         + (f" --dir {shlex.quote(str(node['root']))}" if node.get("root") else "")
                         + f" (on {node.get('address') or node.get('host')}, in the job's environment)")
        lines.append("to fill the misses: run the campaign again with --seed nodes (it resumes, tunes only the "
                     "cases the driver's cache lacks, and seeds every alive node)")
    return ok, lines


def _how(node: Mapping[str, Any]) -> str:
    """How a node checked its pairs: the hit rule on all, or the reference's verdicts where its
    entry files are byte-identical (``preflight_node``)."""
    if not node.get("reference"):
        return ""
    if node.get("differs"):
        return f"; hit rule run here on every pair ({node['differs']})"
    return (f"; the verdicts of {node['reference']} where the entry is byte-identical to its own, the hit "
            f"rule run here on {node.get('full_rule', 0)} pair(s)")
