"""Pre-flight on one node: the hit rule for every (case, rank), or a check against a node that ran it.

The driver (:mod:`ray_runner.preflight`) sends the campaign's cases once; a node answers with its
misses (and the hits whose first call would still compile, issue 23) and how many pairs it
checked. There are two ways to answer:

- :func:`reference` runs THE hit rule (``triton_dist._store.decide``) for every (case, rank):
  builds the arguments in a fake world of the case's size, computes the call's identity, reads
  and checks the entry. It also returns what another node needs to reach the same verdicts
  without running the rule again (:func:`expectations`): this node's *fingerprint* (everything
  the rule depends on besides the entry's bytes: hardware digest, software versions, the
  settings the rule reads, the targets' source hashes and spaces, the key functions' and
  argument builders' sources), and for each pair the entry's path under the root, the verdict
  and the SHA-256 of the entry's bytes.
- :func:`check_against` (every other node of the same accelerator kind) computes its own
  fingerprint and, if it equals the reference's and a sample of keys computed here agrees,
  reads each entry file once and compares its digest: a pair whose file is byte-identical to
  the reference's (or absent on both) has the reference's verdict. The bytes compared are those
  the entry is served from, its loose file or its pack (``triton_dist._store.packs``): a seeded
  node's function directory is one read of one pack. Any other pair (a different
  or missing file, a link, an entry the reference could not identify, a miss whose file is
  there) goes through the full rule here, and a node whose fingerprint differs runs the full
  rule on every pair. So nothing is reported that the rule would not say, and the per-node
  cost of a cluster that was seeded byte-identically is one read and hash per entry
  (~0.1-0.2 s for 10,000 entries, issue 21) instead of building every case's arguments.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["check_against", "check_node", "expectations", "reference"]

Case = tuple[str, str, int, dict[str, Any]]

#: an expected digest that no file matches: the file changed while the reference read it, or was
#: not a plain file there
_NEVER = b""


class _Here:
    """This node: its settings, cache root and backend (one per task)."""

    def __init__(self, cache_dir: str | None) -> None:
        self.started, self.cpu = time.perf_counter(), time.process_time()
        from triton_dist._backends import get_backend
        from triton_dist.settings import get_settings

        self.settings = get_settings()
        self.root = Path(cache_dir).expanduser() if cache_dir else self.settings.autotune_dir
        self.backend = get_backend()
        self.device = self.backend.device()
        self.digests = _Digests(self.root)  # of the entries as the rule is about to read them

    def answer(self, rows: list[dict[str, Any]], checked: int, **extra: Any) -> dict[str, Any]:
        """A node's answer: its misses and the hits whose first call compiles, not every pair."""
        import ray

        from triton_dist._store.fingerprint import hardware_info

        node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        return {"host": socket.gethostname(), "node_id": node_id, "root": str(self.root), "device": str(self.device),
                "digest": str(hardware_info(self.backend)["digest"]), "checked": checked,
                "rows": [r for r in rows if not r.get("hit") or r.get("compiles")],
                "seconds": round(time.perf_counter() - self.started, 3),
                "cpu_s": round(time.process_time() - self.cpu, 3), **extra}


def _pairs(cases: Sequence[Case]) -> list[tuple[int, int]]:
    """(case index, rank) for every rank of every case, in the report's order."""
    return [(i, rank) for i, case in enumerate(cases) for rank in range(case[2])]


def _full(here: _Here, cases: Sequence[Case], pairs: Sequence[tuple[int, int]],
          before: dict[str, bytes | None] | None = None) -> list[dict[str, Any]]:
    """THE hit rule for ``pairs``: one row each, in order. The pairs of one (world size, rank)
    share one fake world (as the calls of one training job do). ``before``: record the digest of
    each entry file just before the rule reads it (:func:`reference`)."""
    from .errors import describe_failure
    from .world import fake_world

    rows: list[dict[str, Any] | None] = [None] * len(pairs)
    worlds: dict[tuple[int, int], list[int]] = {}
    for n, (i, rank) in enumerate(pairs):
        worlds.setdefault((cases[i][2], rank), []).append(n)
    for (size, rank), members in worlds.items():
        try:
            with fake_world(size, rank, getattr(here.device, "index", None) or 0) as group:
                for n in members:
                    rows[n] = _check(here, cases[pairs[n][0]], rank, group, before)
        except Exception as exc:  # noqa: BLE001 - the world itself failed: every pair of it misses
            why = describe_failure(exc)[0]
            for n in members:
                rows[n] = rows[n] or {"hit": False, "why": why}
    return [{"function": cases[i][0], "case": cases[i][3], "world_size": cases[i][2], "rank": rank, **row}
            for (i, rank), row in zip(pairs, rows, strict=True) if row is not None]


def _check(here: _Here, case: Case, rank: int, group: Any, before: dict[str, bytes | None] | None) -> dict[str, Any]:
    from triton_dist._prune import kept_for_lookup
    from triton_dist._store import decide as _decide

    from .errors import describe_failure
    from .worker import CaseContext, build_args, load_target

    function, builder, world_size, values = case
    try:
        tuner = load_target(function)
        args, kwargs = build_args(builder, values, CaseContext(rank, world_size, here.device, group))
        key = tuner.key_fn(*args, **kwargs)
        kept = kept_for_lookup(tuner.target, args, kwargs, _decide.stable_key(key))  # as inline tuning asks
        call = _decide.identify(tuner.target, key, world_size, here.backend, kept=kept)
        if before is not None:
            rel = _relative(call.path(here.root), here.root)
            if rel is not None and rel not in before:
                before[rel] = here.digests(rel)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            verdict = _decide.decide(call, here.root, version_check=here.settings.version_check,
                                     cache_only=here.settings.cache_only)
        row = {"key": call.key, "path": str(verdict.path), "hit": verdict.hit, "index": verdict.index,
               "why": verdict.why, "warnings": [str(w.message) for w in caught] + verdict.notes}
        if verdict.hit and here.backend.kind != "cpu":  # will its first call still compile? (issue 23)
            from triton_dist._store import binaries

            row["compiles"] = binaries.check(tuner.target.name, Path(verdict.path).stem)
        return row
    except Exception as exc:  # noqa: BLE001 - reported as a miss with the reason
        return {"hit": False, "why": describe_failure(exc)[0]}


def check_node(cases: Sequence[Case], cache_dir: str | None) -> dict[str, Any]:
    """The hit rule on this node: one row per (case, rank), hit or the reason for the miss."""
    here = _Here(cache_dir)
    from triton_dist._store.fingerprint import hardware_info

    return {"host": socket.gethostname(), "root": str(here.root), "device": str(here.device),
            "rows": _full(here, cases, _pairs(cases)), "digest": str(hardware_info(here.backend)["digest"])}


# ---------------------------------------------------------------------------- files and fingerprints

def _relative(path: Path, root: Path) -> str | None:
    """``<function>/<id>.json`` of an entry's path under ``root``."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


class _Digests:
    """SHA-256 of the bytes each entry is served from (its loose file, else its pack:
    ``triton_dist._store.packs``): None if there is none, :data:`_NEVER` if what is there is not
    taken as it is (a link, a FIFO, a corrupt packed entry). Each function directory is read once
    (its names and its packs), so 10,000 packed entries cost one read of their pack."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders: dict[str, Any] = {}

    def __call__(self, rel: str) -> bytes | None:
        from triton_dist._store import packs

        folder, _, name = rel.partition("/")
        if folder not in self.folders:
            inside = _inside(self.root, folder)
            self.folders[folder] = packs.Served(self.root / folder, self.root) if inside else None
        served = self.folders[folder]
        return _NEVER if served is None else served.digest(name.removesuffix(".json"))


def _inside(root: Path, folder: str) -> bool:
    """The entry directory ``root/folder`` resolves inside the root (the rule reads no entry
    through a link that leads out, ``_store.files.load_json``)."""
    real_root = os.path.realpath(root)
    return os.path.realpath(os.path.join(root, folder)).startswith(real_root.rstrip("/") + "/")


def _fingerprint(here: _Here, cases: Sequence[Case]) -> dict[str, Any]:
    """Everything the hit rule's verdicts here depend on besides the entries' bytes."""
    from triton_dist._store.fingerprint import digest, hardware_info, software_versions, source_hash

    from .worker import load_attr, load_target

    targets: dict[str, Any] = {}
    for function, builder, _size, _values in cases:
        name = f"{function} {builder}"
        if name in targets:
            continue
        try:
            tuner = load_target(function)
            targets[name] = [tuner.target.name, tuner.target.source_hash(), digest(list(tuner.target.encoded)),
                             source_hash(tuner.key_fn), source_hash(load_attr(builder, "args"))]
        except Exception as exc:  # noqa: BLE001 - the rule reports it per pair
            targets[name] = f"{type(exc).__name__}: {exc}"
    return {"backend": here.backend.kind, "hardware": hardware_info(here.backend)["digest"],
            "software": software_versions(here.backend), "version_check": here.settings.version_check,
            "cache_only": here.settings.cache_only, "targets": targets}


def expectations(here: _Here, cases: Sequence[Case], rows: Sequence[dict[str, Any]],
                 before: dict[str, bytes | None]) -> dict[str, Any]:
    """What :func:`check_against` needs from the reference's ``rows``: fingerprint, and per pair
    the entry's path under the root (None: not identified), verdict and digest of the bytes."""
    rels: list[str | None] = []
    for row in rows:
        path = row.get("path")
        rels.append(_relative(Path(path), here.root) if path else None)
    # the bytes the rule read: a file that changed while it ran is checked in full elsewhere
    after = _Digests(here.root)
    digests = {rel: (d if after(rel) == d else _NEVER) for rel, d in before.items()}
    return {"fingerprint": _fingerprint(here, cases), "rels": rels, "hits": [bool(r.get("hit")) for r in rows],
            "keys": {n: r.get("key") for n, r in enumerate(rows) if not r.get("hit")}, "digests": digests}


# ---------------------------------------------------------------------------- the two ways

def reference(cases: Sequence[Case], cache_dir: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The hit rule for every pair here: (this node's answer, :func:`expectations` or None)."""
    here = _Here(cache_dir)
    pairs = _pairs(cases)
    before: dict[str, bytes | None] = {}
    rows = _full(here, cases, pairs, before)
    try:
        expect: dict[str, Any] | None = expectations(here, cases, rows, before)
    except Exception:  # noqa: BLE001 - the other nodes then run the rule themselves
        expect = None
    return here.answer(rows, len(pairs), full_rule=len(pairs)), expect


def check_against(cases: Sequence[Case], cache_dir: str | None, expect: dict[str, Any] | None,
                  source: str) -> dict[str, Any]:
    """This node's answer, reusing the verdicts of the reference node ``source`` (its
    :func:`expectations`) for the pairs whose entry files here are byte-identical to its own;
    the full rule for the others, and for all when the fingerprints differ (module docstring)."""
    here = _Here(cache_dir)
    pairs = _pairs(cases)
    if expect is None:
        return here.answer(_full(here, cases, pairs), len(pairs), full_rule=len(pairs))
    differs = _differs(here, cases, pairs, expect)
    if differs:
        return here.answer(_full(here, cases, pairs), len(pairs), full_rule=len(pairs),
                           reference=source, differs=differs)
    rows, todo = _reuse(here, cases, pairs, expect)
    rows.update(zip(todo, _full(here, cases, [pairs[n] for n in todo]), strict=True))
    return here.answer([rows[n] for n in sorted(rows)], len(pairs), full_rule=len(todo), reference=source)


def _differs(here: _Here, cases: Sequence[Case], pairs: Sequence[tuple[int, int]],
             expect: dict[str, Any]) -> str | None:
    """Why this node cannot reuse the reference's verdicts (None: it can)."""
    mine, theirs = _fingerprint(here, cases), expect["fingerprint"]
    if mine != theirs:
        return "differs from the reference: " + "; ".join(_differences(mine, theirs))
    # a sample of keys computed here (the first pair of each target and world size): a key
    # function that reads the node's environment gives other entries on another node
    sample: dict[tuple[str, str, int], int] = {}
    for n, (i, _rank) in enumerate(pairs):
        if expect["rels"][n] is not None:
            sample.setdefault(tuple(cases[i][:3]), n)
    rows = _full(here, cases, [pairs[n] for n in sample.values()])
    for n, row in zip(sample.values(), rows, strict=True):
        if (_relative(Path(row["path"]), here.root) if row.get("path") else None) != expect["rels"][n]:
            return f"the key of {cases[pairs[n][0]][0]} {cases[pairs[n][0]][3]} differs from the reference's"
    return None


def _differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """What differs between this node's fingerprint and the reference's, in words."""
    out = []
    for field in sorted(set(mine) | set(theirs)):
        here, there = mine.get(field), theirs.get(field)
        if here == there:
            continue
        if isinstance(here, dict) and isinstance(there, dict):
            names = sorted(k for k in set(here) | set(there) if here.get(k) != there.get(k))
            if field == "targets":
                out.append("the code of " + ", ".join(n.replace(" ", " / ") for n in names))
            else:
                out.append(f"{field} " + ", ".join(f"{n} {there.get(n)} there, {here.get(n)} here" for n in names))
        else:
            out.append(f"{field} {there} there, {here} here")
    return out


def _reuse(here: _Here, cases: Sequence[Case], pairs: Sequence[tuple[int, int]],
           expect: dict[str, Any]) -> tuple[dict[int, dict[str, Any]], list[int]]:
    """(the rows to report of the pairs the reference's verdicts decide, by pair index; indices of
    the pairs to check in full here)."""
    rels, hits, digests, keys = expect["rels"], expect["hits"], expect["digests"], expect["keys"]
    names = {t.split(" ")[0]: v[0] for t, v in expect["fingerprint"]["targets"].items() if isinstance(v, list)}
    compiled = here.backend.kind != "cpu"
    same: dict[str, bool] = {}
    rows: dict[int, dict[str, Any]] = {}
    todo: list[int] = []
    for n, (i, rank) in enumerate(pairs):
        rel = rels[n]
        if rel is not None and rel not in same:
            # the bytes the reference's verdict is about (or absent there too), read by the rule as
            # they are here (the entry directory inside the root, no link, an intact packed entry)
            expected = digests.get(rel, _NEVER)
            same[rel] = expected != _NEVER and here.digests(rel) == expected
        if rel is None or not same[rel] or (not hits[n] and digests.get(rel) is not None):
            todo.append(n)  # differs here, or a miss with a file there: its reason names this node's file
            continue
        if hits[n] and not compiled:
            continue  # a hit, and no Triton cache to look at on a CPU node: nothing to report
        row = _reused(here, cases[i], rank, rel, hits[n], keys.get(n), names if compiled else None)
        if row is not None:
            rows[n] = row
    return rows, todo


def _reused(here: _Here, case: Case, rank: int, rel: str, hit: bool, key: str | None,
            names: dict[str, str] | None) -> dict[str, Any] | None:
    """The row to report of a pair that has the reference's verdict (None: a hit, nothing to say)."""
    function, _builder, size, values = case
    row = {"function": function, "case": values, "world_size": size, "rank": rank}
    if hit:
        if names is None:
            return None
        from triton_dist._store import binaries

        why = binaries.check(names[function], Path(rel).stem)  # this node's own Triton cache (issue 23)
        return {**row, "key": None, "path": str(here.root / rel), "hit": True, "compiles": why} if why else None
    return {**row, "key": key, "path": str(here.root / rel), "hit": False, "index": None, "why": "no cache entry",
            "warnings": []}
