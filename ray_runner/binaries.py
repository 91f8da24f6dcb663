"""Compiled winners: the campaign side of ``triton_dist._store.binaries`` (issue 23).

- a rank that tuned a case collects the Triton binaries of the case's best config
  (:func:`collect`, on the worker);
- the driver keeps one bundle per entry next to it, ``<root>/<function>/binaries/<id>.json``
  (:func:`store`), so that a later campaign that finds the case cached still ships it;
- seeding hands each node the bundles of the entries it seeds (:func:`load`) and the node
  installs them into its Triton cache (:func:`install_here`), unless its Triton would recompile
  them anyway (other Triton build or environment: reported, nothing written).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache

__all__ = ["NO_KERNEL", "Shipper", "bundle_path", "collect", "install_here", "load", "store"]

#: a host function without Triton kernels: nothing to ship, nothing to report
NO_KERNEL = "the best config launched no Triton kernel"

log = logging.getLogger(__name__)


def collect(tuner: Any, args: tuple, kwargs: dict, entry: Mapping[str, Any]) -> dict[str, Any]:
    """On the rank that tuned: ``{"bundle": ...}`` of the best config's kernels, or ``{"error": ...}``."""
    from triton_dist._measure.compile import capture_kernels
    from triton_dist._store import binaries

    index = int(entry["best"]["index"])
    try:
        kernels = capture_kernels(lambda: tuner.target.call(index, args, kwargs, False))
        if not kernels:
            return {"error": NO_KERNEL}
        return {"bundle": binaries.bundle(kernels)}
    except Exception as exc:  # noqa: BLE001 - shipping is best effort; the entry is what counts
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def bundle_path(root: Path, function: str, entry_id: str) -> Path:
    return _cache.entry_path(root, function, entry_id).parent / "binaries" / f"{entry_id}.json"


def store(root: Path, entry: Mapping[str, Any], outs: Sequence[Mapping[str, Any]]) -> str | None:
    """Keep the ranks' bundles of ``entry`` (kernels merged) next to it; None or why not."""
    found = [o["binaries"]["bundle"] for o in outs if (o.get("binaries") or {}).get("bundle")]
    if not found:
        errors = {(o.get("binaries") or {}).get("error") for o in outs} - {None}
        if errors == {NO_KERNEL}:
            return None
        return "; ".join(sorted(errors)) or "no rank collected binaries"
    merged = dict(found[0], kernels={k: v for b in found for k, v in b["kernels"].items()})
    merged.update(function=entry["function"], entry_id=entry["id"], config_index=entry["best"]["index"])
    path = bundle_path(root, entry["function"], entry["id"])
    try:
        _cache.ensure_private_dir(path.parent, root)
        _cache.atomic_write_text(path, json.dumps(merged, sort_keys=True) + "\n")
    except OSError as exc:
        return f"could not write {path}: {exc}"
    return None


class Shipper:
    """The executor's hook: when a case is done, keep its ranks' bundles next to its entry
    (a no-op when shipping is off); a case without binaries is a warning, never a failure."""

    def __init__(self, root: Path, progress: Any, enabled: bool) -> None:
        self.root, self.progress, self.enabled = root, progress, enabled

    def store(self, entry: Mapping[str, Any], outs: Sequence[Mapping[str, Any]], label: str) -> None:
        if not self.enabled:
            return
        why = store(self.root, entry, outs)
        if why:
            self.progress.warn("%s: no compiled binaries to ship with its entry: %s", label, why)


def load(root: Path, entries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The stored bundles of ``entries`` by entry id (entries without one are left out)."""
    bundles = {}
    for entry in entries:
        path = bundle_path(root, entry["function"], entry["id"])
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.warning("ignoring the binaries bundle %s: %s", path, exc)
            continue
        if data.get("entry_id") == entry["id"] and data.get("config_index") == entry["best"]["index"]:
            bundles[entry["id"]] = data
    return bundles


def install_here(entries: Sequence[Mapping[str, Any]], bundles: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """On a node: install the bundles of the ``entries`` it seeds into its Triton cache."""
    from triton_dist._store import binaries

    summary: dict[str, Any] = {"dir": "", "installed": 0, "unchanged": 0, "skipped": [], "errors": []}
    try:
        summary["dir"] = str(binaries.triton_cache_dir())
    except Exception as exc:  # noqa: BLE001 - no Triton on this node
        summary["errors"].append(f"Triton's cache directory: {type(exc).__name__}: {exc}")
        return summary
    for entry in entries:
        payload = bundles.get(entry["id"])
        if payload is None:
            continue
        result = binaries.install(payload, entry["function"], entry["id"])
        summary["installed"] += result["installed"]
        summary["unchanged"] += result["unchanged"]
        summary["errors"] += result["errors"]
        if result["skipped"]:
            summary["skipped"].append(f"{entry['function']} {entry['id']}: {result['skipped']}")
    return summary
