"""The entries of one function's directory that are for one business key, without parsing the
others: what a miss that tunes looks for when it may reuse timings (``_store.reuse``).

A full scan parsed every entry of the function on every miss: a node seeded with 10,000 entries
of a function took ~1.2 s for its first call of a new shape, and a job tuning 2,000 new shapes in
a row spent ~13 ms per miss re-reading its own growing directory (issue 16, P2 beyond one key).
Here each entry's key text is read once per process (from its bytes: both entry layouts put the
top-level ``"key"`` on a line of its own, two spaces in; any other layout is parsed in full) and
kept per directory; a miss then lists the directory's loose names (parsing only new ones),
checks each pack's stamp, and reads the few entries of its own key. Loose files shadow packed
ones and newer packs older ones, as in ``_store.packs.load_entry``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import packfile, packs

__all__ = ["entries_with_key"]

#: the top-level key's line of an entry (``files.dumps_entry`` and the earlier ``indent=2``)
_KEY_LINE = re.compile(rb'\n  "key": ("(?:[^"\\\n]|\\.)*")')


def key_of(blob: bytes) -> str | None:
    """The business key text of an entry's bytes, None when they hold no entry's key."""
    found = _KEY_LINE.search(blob)
    if found is not None:
        try:
            value = json.loads(found.group(1))
        except ValueError:
            value = None
        if isinstance(value, str):
            return value
    try:  # another layout (an entry written by hand, or by other software)
        data = json.loads(blob)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    key = data.get("key") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None


class _Directory:
    """What this process knows of one function directory's keys."""

    def __init__(self) -> None:
        self.loose: dict[str, str | None] = {}  # id -> key text of the loose file of that name
        self.packs: dict[str, tuple[tuple[int, int, int], dict[str, list[str]]]] = {}  # path -> (stamp, key -> ids)


_known: dict[str, _Directory] = {}
_lock = threading.Lock()
_MAX_DIRECTORIES = 256


def _loose_keys(directory: Path, known: _Directory, names: set[str]) -> None:
    for eid in list(known.loose):
        if eid not in names:
            del known.loose[eid]
    for eid in names - known.loose.keys():
        try:
            with open(os.open(directory / f"{eid}.json", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW), "rb") as f:
                blob = f.read(_cache.MAX_ENTRY_BYTES + 1)
        except OSError:
            continue  # gone, a link, unreadable: the full scan (diagnose, verify) reports it
        known.loose[eid] = key_of(blob)


def _pack_keys(pack: Any, known: _Directory) -> dict[str, list[str]]:
    cached = known.packs.get(pack.path)
    if cached is not None and cached[0] == pack.stamp:
        return cached[1]
    by_key: dict[str, list[str]] = {}
    data = packfile.read_all(pack.path)
    if data is not None:
        for eid in pack.ids():
            blob, _ = pack.slice(data, eid)
            key = key_of(blob) if blob is not None else None
            if key is not None:
                by_key.setdefault(key, []).append(eid)
    known.packs[pack.path] = (pack.stamp, by_key)
    return by_key


def entries_with_key(directory: Path, root: Path, key_text: str) -> list[tuple[Path, dict[str, Any]]]:
    """(path, entry) of the usable entries of ``directory`` (loose, then packed ones no loose file
    or newer pack shadows) whose business key is ``key_text``. The entries are shared with later
    calls: read them, never change them."""
    try:
        names = {n[:-5] for n in os.listdir(directory) if n.endswith(".json") and len(n) > 5}
    except OSError:
        return []
    with _lock:
        known = _known.get(str(directory))
        if known is None:
            if len(_known) >= _MAX_DIRECTORIES:
                _known.clear()
            known = _known[str(directory)] = _Directory()
        _loose_keys(directory, known, names)
        usable = packs.usable_packs(directory, root)  # newest first
        packed = [(pack, _pack_keys(pack, known).get(key_text, ())) for pack in usable]
        loose = sorted(eid for eid, key in known.loose.items() if key == key_text)
        current = {pack.path for pack in usable}
        for gone in [pack_path for pack_path in known.packs if pack_path not in current]:
            del known.packs[gone]
    out: list[tuple[Path, dict[str, Any]]] = []
    for eid in loose:
        path = directory / f"{eid}.json"
        entry, _ = _cache.load_json(path, root)
        if entry is not None:
            out.append((path, entry))
    seen = set(names)
    for pack, ids in packed:
        for eid in ids:
            if eid in seen:
                continue
            seen.add(eid)
            found = pack.read(eid)
            if found is None or found[0] is None:
                continue
            entry, _ = _cache.parse_entry(found[0])
            if entry is not None and entry.get("id") == eid:
                out.append((Path(pack.path) / f"{eid}.json", entry))
    return out
