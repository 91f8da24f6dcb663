"""Writing merged entries where training jobs will look for them.

- the driver's cache root (always: what a re-run of the campaign skips);
- ``--seed shared``: one directory (``--cache-dir``) that every node mounts; the driver writes it;
- ``--seed nodes``: every alive node's own cache root, one task pinned to each node
  (``NodeAffinitySchedulingStrategy(soft=False)``). A node's root is ``--cache-dir`` when given,
  else that node's ``TRITON_DIST_AUTOTUNE_DIR`` (or ``~/.triton_dist/autotune``) as its Ray
  worker processes see it.

Every write goes through ``triton_dist._store.files.write_entry`` (temporary file + rename, under the
entry's lock); an identical entry already in place is left alone, so seeding again adds no
history.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache

__all__ = ["seed_nodes", "write_entries"]

log = logging.getLogger(__name__)


def write_entries(root: str | Path | None, entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Write ``entries`` under ``root`` (None: this process's settings root); a summary dict."""
    from triton_dist.settings import get_settings

    root = Path(root) if root is not None else get_settings().autotune_dir
    written = unchanged = 0
    errors: list[str] = []
    for entry in entries:
        path = _cache.entry_path(root, entry["function"], entry["id"])
        try:
            existing, _ = _cache.load_json(path, root) if path.exists() else (None, None)
            if existing == entry:
                unchanged += 1
                continue
            _cache.write_entry(root, entry)
            written += 1
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    return {"host": socket.gethostname(), "root": str(root), "written": written,
            "unchanged": unchanged, "errors": errors}


def _seed_here(entries: Sequence[dict[str, Any]], root: str | None,
               binaries: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    import ray

    result = write_entries(root, entries)
    if binaries:  # the compiled winners of these entries, into this node's Triton cache
        from .binaries import install_here

        result["binaries"] = install_here(entries, binaries)
        result["errors"] += result["binaries"]["errors"]
    result["node_id"] = ray.get_runtime_context().get_node_id()
    return result


def seed_nodes(entries: Sequence[dict[str, Any]], cache_dir: str | None, timeout_s: float,
               binaries: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Write ``entries`` into the cache root of every alive node; one summary per node.
    ``binaries`` (entry id -> bundle, :mod:`ray_runner.binaries`) go into each node's Triton cache."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ._ray import alive_nodes, import_ray

    ray = import_ray()
    task = ray.remote(num_cpus=0, max_retries=1)(_seed_here)
    payload = ray.put(list(entries))
    shipped = ray.put(dict(binaries or {}))
    nodes = alive_nodes()
    refs = {}
    for node in nodes:
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        refs[node["NodeID"]] = task.options(scheduling_strategy=strategy).remote(payload, cache_dir, shipped)
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    ready_set = set(ready)
    results = []
    for node in nodes:
        node_id, ref = node["NodeID"], refs[node["NodeID"]]
        try:
            if ref not in ready_set:
                ray.cancel(ref, force=True)
                raise TimeoutError(f"the seed task did not finish within {timeout_s:g}s")
            result = ray.get(ref, timeout=0)
        except Exception as exc:  # noqa: BLE001 - a node that died or timed out is reported, not fatal
            result = {"node_id": node_id, "host": node.get("NodeManagerAddress"), "root": cache_dir,
                      "written": 0, "unchanged": 0, "errors": [f"{type(exc).__name__}: {exc}"[:500]]}
        result["address"] = node.get("NodeManagerAddress")
        results.append(result)
        log.info("seeded node %s (%s): %d written, %d already there, root %s%s", node_id[:12],
                 result["address"], result["written"], result["unchanged"], result["root"],
                 f", {len(result['errors'])} errors" if result["errors"] else "")
    return results
