"""What a tuning produces: the cache entry its pick (``_measure.pick``) is written as.

Shared by inline tuning (``_tuning``) and Ray campaigns (the driver writes what the gang's
ranks built), so that both produce the same files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_dist._backends import Backend
from triton_dist._distributed import GroupView
from triton_dist._measure.method import method_id
from triton_dist._measure.result import CandidateResult, MeasuredMode, two_placements
from triton_dist._store import background_sync
from triton_dist._store import files as _cache
from triton_dist._store import reuse as _reuse
from triton_dist._store.fingerprint import body_hash, hardware_info, software_versions
from triton_dist._store.reads import reads_of
from triton_dist._store.rules import RULES

if TYPE_CHECKING:
    from triton_dist._target import TuneTarget

__all__ = ["EntryAhead", "build_entry", "entry_head", "graph_mode", "in_rounds", "measured_info", "measurement_info",
           "replays_graphs"]


def graph_mode(target: TuneTarget, backend: Backend) -> bool:
    """Whether a tuning replays device graphs: ``graphs`` as asked; by default (None) graph replay
    on a backend with graphs (CUDA, NPU: eager runs time the launch of kernels shorter than the
    host function, issue 16), the seed's eager schedule elsewhere (the CPU) or with ``do_bench``."""
    if target.graphs is not None:
        return target.graphs
    return backend.graphs and target.do_bench is None


def replays_graphs(target: TuneTarget, backend: Backend) -> bool:
    """Whether a tuning is to time its configs by graph replays: graph mode on a device backend
    with graphs, measuring in rounds (``graphs=True`` is ignored on the CPU and with a custom
    ``do_bench``). A host function that cannot be captured still makes it eager (``MeasuredMode``)."""
    return graph_mode(target, backend) and backend.graphs and in_rounds(target, backend)


def in_rounds(target: TuneTarget, backend: Backend) -> bool:
    """Whether a tuning measures on a device in interleaved rounds (``_measure.rounds``), not one
    config after another (the CPU) nor through a custom ``do_bench``: the first run's checks are
    then deferred and the host waits for the device (``_measure.spare``)."""
    return backend.interleaved and target.do_bench is None


def measurement_info(target: TuneTarget, backend: Backend, world: int = 1) -> dict[str, Any]:
    """How the candidates are to be measured (timings measured otherwise are not reused);
    ``world``: the ranks that measure together. ``graphs`` only where they are replayed
    (:func:`replays_graphs`); what the measurement then did (a host function that cannot be
    captured falls back to eager runs): :func:`measured_info`."""
    graphs = replays_graphs(target, backend)
    placed = graphs and two_placements(alone=world == 1, flush=target.flush_l2, n_repeat=target.n_repeat)
    timer = None if target.do_bench is None else getattr(target.do_bench, "timer", target.do_bench)
    return {"n_warmup": target.n_warmup, "n_repeat": target.n_repeat,
            "timer": "custom" if target.do_bench else backend.kind,
            **({"adaptive": True} if target.adaptive else {}),
            **({"graphs": True} if graphs else {}),
            **({"placements": 2} if placed else {}),
            **({"flush_l2": True} if target.flush_l2 else {}),
            # the measuring code (and a custom timer) that timed them: reuse compares it (_measure.method)
            "method": method_id(None if timer is None else str(_cache.encode_value(timer)))}


def measured_info(planned: dict[str, Any], mode: MeasuredMode | None) -> dict[str, Any]:
    """:func:`measurement_info` as the measurement went (``mode``): graph mode that fell back to
    eager runs records no ``graphs`` (nor ``placements``) and says why in ``graphs_fallback``
    (its timings are eager ones: never reused for graph-timed ones, nor shown as graph-timed);
    two placements only where every candidate had them. ``planned`` itself when it all went as planned."""
    if mode is None or mode.graphs is None or not planned.get("graphs"):
        return planned
    if not mode.graphs:
        actual = {k: v for k, v in planned.items() if k not in ("graphs", "placements")}
        return {**actual, "graphs_fallback": mode.fallback or "no graph was replayed"}
    if planned.get("placements", 1) > mode.placements:
        return {k: v for k, v in planned.items() if k != "placements"}
    return planned


def entry_head(target: TuneTarget, key_text: str, backend: Backend, view: GroupView | None) -> dict[str, Any]:
    """The entry's fields that do not depend on the timings (a tuning builds them while the host
    waits for the device, ``_measure.spare``)."""
    hw = hardware_info(backend)
    return {
        "schema": _cache.SCHEMA_NAME,
        "id": _cache.entry_id(target.source_hash(), hw["digest"], key_text),
        "function": target.name,
        "qualname": target.qualname,
        "key": key_text,
        "source_hash": target.source_hash(),
        "body_hash": body_hash(target.fn),
        "reads": reads_of(target.fn),  # what the source hash counted of module constants (a miss names them)
        "hardware": hw,
        "versions": software_versions(backend),
        "rules": RULES,
        "world_size": view.size if view else 1,
        "measurement": measurement_info(target, backend, view.size if view else 1),
    }


def build_entry(target: TuneTarget, key_text: str, results: Sequence[CandidateResult], best: int,
                margin: float, backend: Backend, view: GroupView | None,
                reuse: _reuse.Reuse | None = None, head: dict[str, Any] | None = None,
                mode: MeasuredMode | None = None) -> dict[str, Any]:
    """The entry of a pick; ``head``: :func:`entry_head` of the same arguments, built earlier;
    ``mode``: how the measurement actually timed the candidates (:func:`measured_info`)."""
    head = head if head is not None else entry_head(target, key_text, backend, view)
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
        **head,
        "measurement": measured_info(head["measurement"], mode),
        "created": _cache.utc_now(),
        "candidates": candidates,
        "best": {"index": best, "config": target.encoded[best],
                 "time_ms": best_result.time_ms},
        "default_time_ms": _cache.json_safe_time(default.time_ms) if default else None,
        "margin": margin if math.isfinite(margin) else None,
        **({"reused": reuse.describe()} if reuse is not None else {}),  # its scale: measured now
    }


class EntryAhead:
    """What a tuning's entry needs besides its timings — its head (:func:`entry_head`) and, for
    the writer, its place (``files.place_entry``) and the fsync thread — made by :meth:`prepare`
    while the host waits for the device (``_measure.spare``). A place that cannot be checked is
    left to the write, whose warning names the problem."""

    def __init__(self, target: TuneTarget, key_text: str, backend: Backend, view: GroupView | None,
                 root: Path | None) -> None:
        self._args = (target, key_text, backend, view)
        self._root = root
        self.head: dict[str, Any] | None = None
        self.known: dict[str, tuple[Any, str]] | None = None
        """the head's fields encoded (``files.dumps_entry``), for the writer"""
        self.place: _cache.EntryPlace | None = None

    def prepare(self) -> None:
        self.head = head = entry_head(*self._args)
        if self._root is None:
            return
        self.known = {name: (value, _cache.field_text(name, value)) for name, value in head.items()}
        background_sync.start()
        try:
            self.place = _cache.place_entry(self._root, head["function"], head["id"])
        except OSError:
            self.place = None
