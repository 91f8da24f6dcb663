"""The W ranks' entries of one case → one checked cache entry (pure).

Every rank of a gang ran ``_tuning.resolve`` on MAX-reduced timings, so their entries must agree
on what names the file (function, key, source, hardware, id), on the chosen config and on every
candidate's reduced time. The merged entry is rank 0's, the one an inline multi-rank tuning
writes (its lowest rank on the node); only a candidate that failed on another rank gets that
rank's reason instead of the one that names the rank ("failed on rank R of the group ...").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from triton_dist.errors import RankDisagreementError

__all__ = ["merge_entries"]

_SAME = ("schema", "id", "function", "qualname", "key", "source_hash")
_GENERIC_ERROR = "failed on another rank of the group"  # what a rank said before it named the rank
_ELSEWHERE = ("failed on rank ", "failed on ranks ")  # _failure_notes.failed_elsewhere: no reason of its own


def _elsewhere(error: Any) -> bool:
    """Whether a rank's error only says that the config failed on other ranks."""
    return isinstance(error, str) and (error == _GENERIC_ERROR or error.startswith(_ELSEWHERE))


def _times(entry: dict[str, Any]) -> list[Any]:
    return [c.get("time_ms") for c in entry.get("candidates", [])]


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)


def merge_entries(entries: Sequence[dict[str, Any]], world_size: int) -> dict[str, Any]:
    """One entry from the ranks' entries (in rank order); RankDisagreementError if they differ."""
    if len(entries) != world_size:
        raise RankDisagreementError(f"expected {world_size} rank results, got {len(entries)}")
    first = entries[0]
    problems: list[str] = []
    for field in _SAME:
        values = [e.get(field) for e in entries]
        if any(v != values[0] for v in values):
            problems.append(f"{field}: {values}")
    digests = [e.get("hardware", {}).get("digest") for e in entries]
    if any(d != digests[0] for d in digests):
        problems.append(f"hardware digest: {digests} (a gang must be one kind of device)")
    best = [e.get("best", {}).get("index") for e in entries]
    if any(b != best[0] for b in best):
        problems.append(f"best index: {best}")
    sizes = [e.get("world_size") for e in entries]
    if any(s != world_size for s in sizes):
        problems.append(f"world_size recorded {sizes}, gang has {world_size}")
    reference = _times(first)
    for rank, entry in enumerate(entries[1:], start=1):
        times = _times(entry)
        if len(times) != len(reference) or not all(_close(a, b) for a, b in zip(times, reference, strict=True)):
            problems.append(f"reduced times of rank {rank} {times} != rank 0 {reference}")
    if problems:
        raise RankDisagreementError(
            "the ranks of a gang returned entries that do not agree (they must, after the MAX "
            "reduction):\n  " + "\n  ".join(problems), disagreement=problems,
        )
    # The ranks' entries are the driver's own copies (deserialized results): only the candidates
    # whose error is rewritten are copied (a deep copy of every entry cost ~0.5 ms per case).
    merged = dict(first)
    merged["candidates"] = candidates = list(first.get("candidates", []))
    for index, candidate in enumerate(candidates):
        if not _elsewhere(candidate.get("error")):
            continue
        candidates[index] = candidate = dict(candidate)
        for rank, entry in enumerate(entries[1:], start=1):
            other = entry["candidates"][index].get("error")
            if other and not _elsewhere(other):
                candidate["error"] = f"rank {rank}: {other}"
                break
    return merged
