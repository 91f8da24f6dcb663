"""The entries of one function's directory that are for one business key, without parsing the
others: what a miss that tunes looks for when it may reuse timings (``_store.reuse``).

A full scan parsed every entry of the function on every miss (issue 16); a per-process map of
the loose files' keys still listed the whole folder on every miss (45 ms at 40,000 files) and
read every entry on a process's first miss (2.5 s at 20,000, a tester). Now the writers log
each entry's id under the hash of its key (``_store.keylog``): a miss reads the log's new lines
(one open, reads of bounded size) and the few entries of its own key. A process lists a folder
on its first miss there, and again on a miss once its last listing is :data:`LIST_AGAIN_S` old,
to find the entries the log lacks (older versions', copied in by hand, a writer killed before it
logged, appends lost over NFS): their keys are read once and added to the log. The misses in
between list nothing. A log replaced by another file (its device and inode changed: ``cache
prune`` compacted it, another root's was copied over it) is read again from its start, and the
folder listed again. A pack's keys are read once per pack and process; a pack replaced (a
prune, a seeding) between its listing and its reading: the packs are listed again
(``_store.packs.settled``). Loose files shadow packed ones and newer packs older ones, as in
``_store.packs.load_entry``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import keylog, packfile, packs
from triton_dist._store.keylog import key_hash, key_of

__all__ = ["LIST_AGAIN_S", "entries_with_key", "key_of"]

#: a miss lists the function folder again (entries the log lacks) once its last listing is this old
LIST_AGAIN_S = 60.0
_clock = time.monotonic


class _Directory:
    """What this process knows of one function directory's keys."""

    def __init__(self) -> None:
        self.listed_at: float | None = None  # when this process last listed the folder (_clock)
        self.offset = 0  # of the log, read up to there
        self.ident: keylog.Ident | None = None  # of the log read (a replaced one is read from 0)
        self.by_hash: dict[str, set[str]] = {}  # key hash -> ids
        self.packs: dict[str, tuple[tuple[int, int, int], dict[str, list[str]]]] = {}  # path -> (stamp, key -> ids)


_known: dict[str, _Directory] = {}
_lock = threading.Lock()
_MAX_DIRECTORIES = 256


def _read_log(directory: Path, known: _Directory, list_now: bool = False) -> None:
    """The log's new lines into ``known`` (from the start, and the folder listed again, when the
    log is gone or was replaced), and the folder listed when never listed, :data:`LIST_AGAIN_S`
    ago, or ``list_now``."""
    def add(eid: str, digest: str) -> None:
        known.by_hash.setdefault(digest, set()).add(eid)

    read = keylog.read_from(directory, known.offset, known.ident, add)
    if read is None and (known.offset or known.ident is not None):
        known.listed_at, known.offset, known.ident, known.by_hash = None, 0, None, {}
        read = keylog.read_from(directory, 0, None, add)
    if read is not None:
        _, known.offset, known.ident = read
    if list_now or known.listed_at is None or _clock() - known.listed_at >= LIST_AGAIN_S:
        _list(directory, known)


def _list(directory: Path, known: _Directory) -> None:
    """The loose entries the log lacks: their keys read (once per process) and added to the log."""
    try:
        names = {n[:-5] for n in os.listdir(directory) if n.endswith(".json") and len(n) > 5}
    except OSError:
        return
    known.listed_at = _clock()
    logged = set().union(*known.by_hash.values()) if known.by_hash else set()
    found: list[tuple[str, str | None]] = []
    for eid in sorted(names - logged):
        try:
            with open(os.open(directory / f"{eid}.json", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW), "rb") as f:
                blob = f.read(_cache.MAX_ENTRY_BYTES + 1)
        except OSError:
            continue  # gone, a link, unreadable: the full scan (diagnose, verify) reports it
        key = key_of(blob)
        if key is not None:
            known.by_hash.setdefault(key_hash(key), set()).add(eid)
            found.append((eid, key))
    keylog.note(directory, found)  # read again by this process later: ids it knows already


def _pack_keys(pack: Any, known: _Directory, strict: bool) -> dict[str, list[str]]:
    cached = known.packs.get(pack.path)
    if cached is not None and cached[0] == pack.stamp:
        return cached[1]
    by_key: dict[str, list[str]] = {}
    data = packs.whole(pack, strict)
    if data is not None:
        for eid in pack.ids():
            blob, _ = pack.slice(data, eid)
            key = key_of(blob) if blob is not None else None
            if key is not None:
                by_key.setdefault(key, []).append(eid)
    known.packs[pack.path] = (pack.stamp, by_key)
    return by_key


def entries_with_key(directory: Path, root: Path, key_text: str,
                     list_now: bool = False) -> list[tuple[Path, dict[str, Any]]]:
    """(path, entry) of the usable entries of ``directory`` (loose, then packed ones no loose file
    or newer pack shadows) whose business key is ``key_text``. The entries are shared with later
    calls: read them, never change them. ``list_now``: the folder listed now for the entries the
    log lacks, whenever it was last (a miss diagnosis, which must see every entry of its key)."""
    if not os.path.isdir(directory):
        return []
    with _lock:
        known = _known.get(str(directory))
        if known is None:
            if len(_known) >= _MAX_DIRECTORIES:
                _known.clear()
            known = _known[str(directory)] = _Directory()
        _read_log(directory, known, list_now)
        loose = sorted(known.by_hash.get(key_hash(key_text), ()))
    out: list[tuple[Path, dict[str, Any]]] = []
    for eid in loose:
        path = directory / f"{eid}.json"
        entry, _ = _cache.load_json(path, root)
        if entry is not None and entry.get("key") == key_text:
            out.append((path, entry))
    return out + packs.settled(lambda strict: _packed_with_key(directory, root, key_text, known, strict))


def _packed_with_key(directory: Path, root: Path, key_text: str, known: _Directory,
                     strict: bool) -> list[tuple[Path, dict[str, Any]]]:
    """The packed part of :func:`entries_with_key` (``packs.Vanished``: a pack was replaced
    since it was listed, when ``strict``)."""
    with _lock:
        usable = packs.usable_packs(directory, root)  # newest first
        packed = [(pack, _pack_keys(pack, known, strict).get(key_text, ())) for pack in usable]
        current = {pack.path for pack in usable}
        for gone in [pack_path for pack_path in known.packs if pack_path not in current]:
            del known.packs[gone]
    out: list[tuple[Path, dict[str, Any]]] = []
    seen: set[str] = set()
    for pack, ids in packed:
        for eid in ids:
            if eid in seen or os.path.lexists(directory / f"{eid}.json"):  # a loose file shadows it
                continue
            seen.add(eid)
            found = pack.read(eid)
            if strict and found is not None and found[1] == packfile.GONE:
                raise packs.Vanished(pack.path)
            if found is None or found[0] is None:
                continue
            entry, _ = _cache.parse_entry(found[0])
            if entry is not None and entry.get("id") == eid:
                out.append((Path(pack.path) / f"{eid}.json", entry))
    return out
