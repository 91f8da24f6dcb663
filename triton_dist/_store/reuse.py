"""Reusing per-config timings when the config space grows (issue 6, item 4).

An entry tuned on configs A, B, C and a space that is now A, B, C, D: only D is measured, plus
the entry's best config once more (the fair comparison), and a new entry is written.

When timings may be reused (docs/cache.md, "Reusing timings"): the old entry is for the same
function name, business key and hardware digest, was measured the same way (warm-up and timed
runs, timer), with the same software versions (python aside), and either has the same source hash
or the same *body hash* (``_store.fingerprint.body_hash``): the hash of the function's syntax tree
without its decorators (comments
and formatting do not count) and of the Triton kernels it calls (as in the source hash). The
config space usually lives in the decorator, so growing it changes the source hash but not the
body hash; editing the function body or a kernel changes both, and then everything is measured
again. The old best config must still be in the space and kept by
``prune_fn``: it is re-measured, and the reused times are scaled by (its time now / its time
then), so that drift between the two sessions does not favour either side.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triton_dist._measure.result import CandidateResult
from triton_dist._store import files as _cache
from triton_dist._store.decide import config_key, entry_world, versions_differ
from triton_dist._store.keyindex import entries_with_key

__all__ = ["Reuse", "config_key", "find_reusable"]

@dataclasses.dataclass
class Reuse:
    """Which timings of an older entry are reused, and which config is re-measured."""

    source_id: str
    source_path: Path
    source_created: str
    best: int
    """Index (in the current space) of the old entry's best config: measured again."""
    best_time_ms: float
    """Its time in the old entry."""
    results: dict[int, CandidateResult]
    """Reused results by current index (raw, unscaled); the old best is not among them."""
    scale: float = 1.0

    def to_measure(self, kept: Sequence[int]) -> list[int]:
        return [i for i in kept if i not in self.results]

    def signature(self) -> str:
        """What the ranks of a group compare: the same plan from the same timings."""
        rows = [[i, r.time_ms if r.ok else None, r.sem_ms, r.error]
                for i, r in sorted(self.results.items())]
        return json.dumps([self.source_id, self.source_created, self.best, self.best_time_ms, rows])

    def merge(self, measured: Sequence[CandidateResult], kept: Sequence[int]) -> list[CandidateResult]:
        """Measured results plus the reused ones, in ``kept`` order."""
        by_index = {**{i: dataclasses.replace(r) for i, r in self.results.items()},
                    **{r.index: r for r in measured}}
        return [by_index[i] for i in kept if i in by_index]

    def rescale(self, results: Sequence[CandidateResult]) -> list[CandidateResult]:
        """Scale the reused times by the re-measured best's drift (identical on every rank,
        because it runs on MAX-reduced results of an agreed plan)."""
        now = next((r for r in results if r.index == self.best), None)
        self.scale = now.time_ms / self.best_time_ms if now is not None and now.ok else 1.0
        out = []
        for r in results:
            if r.index in self.results and r.ok:
                r = dataclasses.replace(r, time_ms=r.time_ms * self.scale, sem_ms=r.sem_ms * self.scale)
            out.append(r)
        return out

    def describe(self) -> dict[str, Any]:
        """What a new entry records about the reuse."""
        return {"from": self.source_id, "best_remeasured": self.best,
                "scale": self.scale, "indices": sorted(self.results)}


def _plan(entry: dict[str, Any], path: Path, space: Sequence[dict[str, Any]],
          kept: Sequence[int]) -> Reuse | None:
    index_of: dict[str, int] = {}
    for i, config in enumerate(space):
        if _cache.SAME_ON_DISK not in config:  # its timing could be another config's
            index_of.setdefault(config_key(config), i)
    best = index_of.get(config_key(entry["best"].get("config")))
    best_time = entry["best"].get("time_ms")
    if (best is None or best not in kept or not isinstance(best_time, (int, float))
            or not math.isfinite(best_time) or best_time <= 0):
        return None
    results: dict[int, CandidateResult] = {}
    for cand in entry["candidates"]:
        if not isinstance(cand, dict) or cand.get("pruned"):
            continue
        found = index_of.get(config_key(cand.get("config")))
        if found is None or found == best or found not in kept or found in results:
            continue
        i = found
        time, error = cand.get("time_ms"), cand.get("error")
        if error:
            results[i] = CandidateResult(i, math.inf, error=str(error))
        elif isinstance(time, (int, float)) and math.isfinite(time) and time >= 0:
            sem = cand.get("sem_ms")
            results[i] = CandidateResult(i, float(time), float(sem) if isinstance(sem, (int, float)) else 0.0)
    if not results:
        return None
    return Reuse(str(entry.get("id", path.stem)), path, str(entry.get("created", "")), best,
                 float(best_time), results)


def find_reusable(root: Path, name: str, encoded_space: Sequence[dict[str, Any]], kept: Sequence[int],
                  key_text: str, source_hash: str, body: str | None, hardware_digest: str,
                  versions: dict[str, str], measurement: dict[str, Any], world: int = 1) -> Reuse | None:
    """The newest entry of ``<root>/<name>/`` whose timings may be reused (module docstring);
    only one measured over ``world`` ranks, as the caller tunes."""
    directory = Path(root) / _cache.safe_name(name)
    usable = []
    for path, entry in entries_with_key(directory, Path(root), key_text):  # not every entry of the function
        if entry["key"] != key_text or entry["hardware"].get("digest") != hardware_digest:
            continue
        if entry["source_hash"] != source_hash and (body is None or entry.get("body_hash") != body):
            continue
        if entry.get("measurement") != measurement or versions_differ(entry, versions):
            continue
        if entry_world(entry) != world:
            continue
        usable.append((str(entry.get("created", "")), path, entry))
    for _, path, entry in sorted(usable, key=lambda t: t[0], reverse=True):
        plan = _plan(entry, path, encoded_space, kept)
        if plan is not None:
            return plan
    return None
