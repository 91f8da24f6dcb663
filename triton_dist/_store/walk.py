"""Walking a cache root: the function folders this user can read (and those it cannot), every
entry they hold, loose and packed, with why it is unusable, and the check of an entry's
consistency (id, file name, folder, hardware digest). For the cache command line (``ls``,
``verify``, ``prune``, ``show``); everything here reads JSON only and never executes code.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import packs as _packs
from triton_dist._store.fingerprint import digest

__all__ = ["HISTORY_RE", "ID_RE", "age_s", "created_at", "entry_problem", "function_dirs", "iter_entries",
           "unreadable_dirs"]

ID_RE = re.compile(r"^[0-9a-f]{32}$")
HISTORY_RE = re.compile(r"^([0-9a-f]{32})\.(\d{8}T\d{12}Z)(?:-\d+)?$")  # -N: same microsecond


# ---------------------------------------------------------------------------- checking entries

def entry_problem(entry: dict[str, Any], path: Path | None = None) -> str | None:
    """Why a schema-valid entry is inconsistent (id, file name, directory, hardware digest)."""
    eid = entry.get("id")
    if not isinstance(eid, str) or not ID_RE.match(eid):
        return f"its id {eid!r:.60} is not 32 hex digits"
    hw = entry["hardware"]
    expected = _cache.entry_id(entry["source_hash"], str(hw.get("digest")), entry["key"])
    if eid != expected:
        return f"its id {eid} does not match its source hash, hardware digest and key ({expected})"
    if hw.get("digest") != digest({k: v for k, v in hw.items() if k != "digest"}):
        return "its hardware digest does not match its hardware fields"
    if path is not None:
        packed = _packs.is_packed(path)
        history = not packed and path.parent.name == "history"
        function_dir = _packs.canonical(path).parent if packed else path.parent.parent if history else path.parent
        match = HISTORY_RE.match(path.stem) if history else None
        if (match.group(1) if match else path.stem) != eid:
            return f"its file name does not match its id {eid}; the tuner looks for {eid}.json"
        if function_dir.name != _cache.safe_name(entry["function"]):
            return (f"it is for function {entry['function']!r} but sits in {function_dir.name!r}; "
                    f"the tuner looks in {_cache.safe_name(entry['function'])!r}")
    return None


def created_at(entry: dict[str, Any]) -> _dt.datetime | None:
    try:
        value = _dt.datetime.fromisoformat(str(entry.get("created")))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)


def age_s(entry: dict[str, Any], now: float | None = None) -> float | None:
    created = created_at(entry)
    return None if created is None else (now or time.time()) - created.timestamp()


# ---------------------------------------------------------------------------- walking

def _candidate_dirs(root: Path, functions: Iterable[str] | None) -> list[Path]:
    if functions:
        return [root / _cache.safe_name(f) for f in functions if (root / _cache.safe_name(f)).is_dir()]
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()
                      and not p.name.startswith("."))
    except OSError:
        return []


def _unreadable(directory: Path) -> str | None:
    """Why this user cannot list ``directory`` or open what is in it (its permissions), or None."""
    try:
        with os.scandir(directory) as listing:
            next(listing, None)
        os.stat(os.path.join(directory, os.curdir))  # search (x) permission: reach its files
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return None


def function_dirs(root: Path, functions: Iterable[str] | None = None) -> list[Path]:
    """The function folders under ``root`` (of ``functions``, or all) that this user can read;
    :func:`unreadable_dirs` lists the others, which every command skips (and reports)."""
    return [d for d in _candidate_dirs(root, functions) if _unreadable(d) is None]


def unreadable_dirs(root: Path, functions: Iterable[str] | None = None) -> list[tuple[Path, str]]:
    """(folder, why) of the function folders (of ``functions``, or all) this user cannot read."""
    return [(d, why) for d in _candidate_dirs(root, functions) if (why := _unreadable(d)) is not None]


def iter_entries(root: Path, functions: Iterable[str] | None = None, history: bool = False
                 ) -> Iterator[tuple[Path, dict[str, Any] | None, str | None]]:
    """(path, entry or None, why unusable) for each ``*.json`` of the function directories, then
    each packed entry they serve (``_store.packs``: its path is ``.../packs/<pack>/<id>.json``)."""
    for directory in function_dirs(root, functions):
        paths = sorted(directory.glob("*.json"))
        if history:
            paths += sorted((directory / "history").glob("*.json"))
        for path in paths:
            entry, why = _cache.load_json(path, root)
            if entry is not None:
                why = entry_problem(entry, path)
            yield path, (entry if why is None else None), why
        yield from _packed(directory, root)


def _packed(directory: Path, root: Path) -> Iterator[tuple[Path, dict[str, Any] | None, str | None]]:
    """(path, entry or None, why unusable) of the packed entries ``directory`` serves, then of
    each pack that cannot be read (its entries are misses)."""
    for path, blob, why in _packs.packed_entries(directory, root):
        entry, why = _judged(path, blob, why)
        yield path, entry, why
    for path, why in _packs.bad_packs(directory):
        yield path, None, f"an unreadable pack: {why}"


def _shadowed_unusable(directory: Path, root: Path) -> Iterator[tuple[Path, str]]:
    """(path, why) of the unusable packed entries whose id a loose file serves. verify reports
    them (a corrupt copy is a problem wherever it lies), and they are what a pack cut short
    leaves behind once the tuner has re-tuned its entries into loose files: unless prune
    --invalid removes them, verify fails for good. Only ids a loose file serves: removing an id
    takes it out of every pack, and a newer pack may be serving it."""
    loose = {p.stem for p in directory.glob("*.json")}
    yield from _packs.settled(lambda strict: list(_shadowed_once(directory, root, loose, strict))) if loose else ()


def _shadowed_once(directory: Path, root: Path, loose: set[str], strict: bool) -> Iterator[tuple[Path, str]]:
    for pack in _packs.usable_packs(directory, root):
        for eid, blob, why in pack.entries(_packs.whole(pack, strict)):  # one replaced since listed: list again
            if eid not in loose:
                continue
            path = Path(pack.path) / f"{eid}.json"
            _, why = _judged(path, blob, why)
            if why is not None:
                yield path, why


def _judged(path: Path, blob: bytes | None, why: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """A packed entry's bytes (None: unreadable, ``why``) as (entry, None) or (None, why unusable)."""
    entry, why = _cache.parse_entry(blob) if blob is not None else (None, why)
    if entry is not None:
        why = entry_problem(entry, path)
    return (entry if why is None else None), why
