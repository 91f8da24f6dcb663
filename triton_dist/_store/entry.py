"""What a tuning produces: the deterministic pick and the cache entry it is written as.

Shared by inline tuning (``_tuning``) and Ray campaigns (the driver writes what the gang's
ranks built), so that both produce the same files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from triton_dist._backends import Backend
from triton_dist._distributed import GroupView
from triton_dist._measure.bench import CandidateResult
from triton_dist._store import files as _cache
from triton_dist._store import reuse as _reuse
from triton_dist._store.fingerprint import body_hash, hardware_info, software_versions

if TYPE_CHECKING:
    from triton_dist._target import TuneTarget

__all__ = ["MAX_TIE_TOLERANCE", "build_entry", "graph_mode", "measurement_info", "pick_best", "pick_note"]

#: a later candidate must beat an earlier one by more than this (relative) to win a near tie
MAX_TIE_TOLERANCE = 0.02


def pick_best(results: Sequence[CandidateResult]) -> tuple[int, float]:
    """(index, margin): lowest mean; within measured noise (capped at 2%) the earlier wins.

    Every rank applies this to the same reduced vectors, so every rank picks the same config.
    """
    finite = [r for r in results if math.isfinite(r.time_ms)]
    best = min(finite, key=lambda r: (r.time_ms, r.index))
    tied = [r for r in finite
            if r.time_ms - best.time_ms <= min(2.0 * math.hypot(r.sem_ms, best.sem_ms),
                                               MAX_TIE_TOLERANCE * best.time_ms)] or [best]  # NaN sem
    chosen = min(tied, key=lambda r: r.index)
    others = [r.time_ms for r in finite if r.index != chosen.index]
    margin = (min(others) - chosen.time_ms) / chosen.time_ms if others and chosen.time_ms > 0 else math.inf
    return chosen.index, margin


def pick_note(results: Sequence[CandidateResult], best: int) -> str:
    """Why :func:`pick_best` chose ``best`` although it is not the lowest mean ("" if it is)."""
    fastest = min((r for r in results if math.isfinite(r.time_ms)), key=lambda r: (r.time_ms, r.index))
    if fastest.index == best:
        return ""
    return (f"; config {fastest.index} measured {fastest.time_ms:.4f} ms, but the difference is within "
            f"noise of the fastest (2 x the combined standard error, at most "
            f"{MAX_TIE_TOLERANCE:.0%}), so the earliest in config_space wins")


def graph_mode(target: TuneTarget, backend: Backend) -> bool:
    """Whether a tuning replays device graphs: ``graphs`` as asked; by default (None) graph replay
    on a backend with graphs (CUDA, NPU: eager runs time the launch of kernels shorter than the
    host function, issue 16), the seed's eager schedule elsewhere (the CPU) or with ``do_bench``."""
    if target.graphs is not None:
        return target.graphs
    return backend.graphs and target.do_bench is None


def measurement_info(target: TuneTarget, backend: Backend) -> dict[str, Any]:
    """How the candidates were measured (timings measured otherwise are not reused)."""
    return {"n_warmup": target.n_warmup, "n_repeat": target.n_repeat,
            "timer": "custom" if target.do_bench else backend.kind,
            **({"adaptive": True} if target.adaptive else {}),
            **({"graphs": True} if graph_mode(target, backend) else {}),
            **({"flush_l2": True} if target.flush_l2 else {})}


def build_entry(target: TuneTarget, key_text: str, results: Sequence[CandidateResult], best: int,
                margin: float, backend: Backend, view: GroupView | None,
                reuse: _reuse.Reuse | None = None) -> dict[str, Any]:
    hw = hardware_info(backend)
    measured = {r.index: r for r in results}
    candidates = []
    for index, config in enumerate(target.encoded):  # as decorated, not as the function left it
        r = measured.get(index)
        candidates.append({
            "index": index,
            "config": config,
            "pruned": r is None,
            "time_ms": _cache.json_safe_time(r.time_ms) if r else None,
            "sem_ms": r.sem_ms if r else None,
            "error": r.error if r else None,
            "runs": r.runs if r else None,
            **({"runs_per_sample": r.runs_per_sample} if r and r.runs_per_sample > 1 else {}),
        })
    best_result = measured[best]
    default = measured.get(0)
    return {
        "schema": _cache.SCHEMA_NAME,
        "id": _cache.entry_id(target.source_hash(), hw["digest"], key_text),
        "function": target.name,
        "qualname": target.qualname,
        "key": key_text,
        "source_hash": target.source_hash(),
        "body_hash": body_hash(target.fn),
        "hardware": hw,
        "versions": software_versions(backend),
        "created": _cache.utc_now(),
        "world_size": view.size if view else 1,
        "measurement": measurement_info(target, backend),
        "candidates": candidates,
        "best": {"index": best, "config": target.encoded[best],
                 "time_ms": best_result.time_ms},
        "default_time_ms": _cache.json_safe_time(default.time_ms) if default else None,
        "margin": margin if math.isfinite(margin) else None,
        **({"reused": reuse.describe()} if reuse is not None else {}),
    }
