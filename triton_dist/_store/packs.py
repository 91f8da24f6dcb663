"""Where an entry is served from: its loose file, else the newest pack that holds it (issue 21).

The one lookup every reader goes through (the hit rule ``_store.decide``, ``_store.scan``,
``_store.admin``, ``_store.archive``, pre-flight): for ``<root>/<function>/<id>.json``

1. the loose file, when there is one (a file or a link, as before packs): inline tuning writes
   loose files, so they are newer than what a campaign seeded; an unusable one is a miss with a
   warning, as it always was;
2. else the packs of ``<root>/<function>/packs/`` newest first (``_store.packfile``): the first
   that holds the id serves it. A pack that cannot be read is skipped with a warning (once per
   process and file); an entry of it that is corrupt is a miss with a warning.

Packs never hold what a loose file shadows by design: seeding writes a pack, takes its ids out
of older packs and moves differing loose files of its ids to history (:func:`install`), so an id
lives in one place; removing packed entries rewrites their pack without them (:func:`remove`).
Both under the function's pack lock (``.locks/packs.lock``), in ``_store.pack_writes`` (both
re-exported here); readers take no lock (packs are replaced, never changed in place). At every
step some pack (or loose file) serves each id: a rewrite writes the new pack before it removes
the old one, and seeding writes its pack before older packs lose its ids.

So a reader can find a pack it listed gone when it opens or reads it: a prune or a seeding
replaced it meanwhile. That is no problem of the cache, and the pack that replaced it holds the
entries: the reader lists the folder again and reads that one (:func:`settled`, at most
:data:`LISTINGS` listings). Only a pack that cannot be read for another reason (corrupt,
foreign, its permissions) is warned about or reported.

A packed entry's *path*, for the tools that list and show entries, is
``<root>/<function>/packs/<pack>/<id>.json`` (no such file exists): :func:`is_packed`,
:func:`canonical` (the loose path it stands for) and :func:`read_path`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from triton_dist._store import files as _cache
from triton_dist._store import packfile
from triton_dist._store.pack_writes import NEVER, _read_plain, install, remove
from triton_dist._store.packfile import DIR_NAME, Pack
from triton_dist._warn import warn_user

__all__ = ["LISTINGS", "NEVER", "Served", "Vanished", "bad_packs", "canonical", "install", "is_packed", "load_entry",
           "packed_entries", "packed_ids", "read_path", "remove", "settled", "usable_packs", "whole"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: how many times a reader lists a function's packs when one it listed is gone when it opens or
#: reads it (a rewrite replaced it): each rewrite under the pack lock takes milliseconds, so a
#: pack vanishes under one reader's listing again and again only while many rewrites follow
#: one another; the last listing is read as it is (a pack gone then is said as before)
LISTINGS = 5


class Vanished(Exception):
    """A pack a reader listed was removed before it was read (a rewrite replaced it): list again."""


def settled(read: Callable[[bool], _T]) -> _T:
    """``read(strict)`` on a new listing of the packs while a pack it listed vanishes before it
    is read (``read`` raises :class:`Vanished`, only when ``strict``), :data:`LISTINGS` times at
    most: the last time not ``strict`` (what it then finds gone is said as a pack that cannot be read)."""
    for _ in range(LISTINGS - 1):
        try:
            return read(True)
        except Vanished:
            continue
    return read(False)


def whole(pack: Pack, strict: bool) -> bytes | None:
    """The whole file of the opened ``pack`` (None: unreadable); :class:`Vanished` when it was
    removed since it was opened and ``strict``."""
    data = packfile.read_all(pack.path)
    if data is None and strict and packfile.vanished(pack.path):
        raise Vanished(pack.path)
    return data


def _opened(directory: Path, strict: bool, root: Path | None = None) -> list[Pack]:
    """The packs of ``directory`` opened, newest first, from one listing (none when ``root`` is
    given and the packs directory leads out of it); :class:`Vanished` when one of them was gone
    when opened and ``strict``."""
    paths = packfile.pack_paths(directory)
    if not paths or (root is not None and not _cache._inside(directory / DIR_NAME, root)):
        return []
    out = [Pack.open(path) for path in paths]
    if strict and any(pack.gone for pack in out):
        raise Vanished(next(pack.path for pack in out if pack.gone))
    return out


_warned: set[tuple[str, tuple[int, int, int]]] = set()


def _warn_pack(pack: Pack) -> None:
    if (pack.path, pack.stamp) in _warned:
        return
    _warned.add((pack.path, pack.stamp))
    message = (f"ignoring cache pack {pack.path}: {pack.problem}. Its entries are misses; run "
               "`python -m triton_dist.cache verify`, then re-seed or `prune --invalid`.")
    warn_user(message, log=log)


def is_packed(path: Path | str) -> bool:
    """Whether ``path`` names a packed entry (``.../packs/<pack>/<id>.json``)."""
    path = Path(path)
    return path.parent.parent.name == DIR_NAME and packfile.NAME_RE.match(path.parent.name) is not None


def canonical(path: Path | str) -> Path:
    """The loose path ``<function>/<id>.json`` a (packed or loose) entry's path stands for."""
    path = Path(path)
    return path.parent.parent.parent / path.name if is_packed(path) else path


def usable_packs(directory: Path, root: Path, outside: bool = False, warn: bool = False) -> list[Pack]:
    """The readable packs of a function directory, newest first; the others are warned about
    (``warn``: the tuner's lookup; the tools report them, :func:`bad_packs`). None of a directory
    that leads out of the root (a link; verify reports it) unless ``outside``."""
    return _readable(settled(lambda strict: _opened(directory, strict, None if outside else root)), warn)


def _readable(opened: list[Pack], warn: bool) -> list[Pack]:
    out = []
    for pack in opened:
        if pack.problem is None:
            out.append(pack)
        elif warn:
            _warn_pack(pack)
    return out


def bad_packs(directory: Path) -> list[tuple[Path, str]]:
    """(path, why) of the packs of the function ``directory`` that cannot be read (not one that
    was replaced since it was listed: the pack that replaced it is looked at instead)."""
    opened = settled(lambda strict: _opened(directory, strict))
    return [(Path(pack.path), pack.problem) for pack in opened if pack.problem is not None]


def load_entry(root: Path | str, function: str, eid: str
               ) -> tuple[dict[str, Any] | None, Path | None, str | None]:
    """(entry, where, why): the entry that ``function``'s id ``eid`` is served from under ``root``,
    where it was read (a loose path or a packed entry's path), and why it is unusable (entry
    None). ``where`` None: no entry anywhere. Reads JSON only; never executes anything."""
    root = Path(root)
    path = _cache.entry_path(root, function, eid)
    try:
        there = path.exists() or path.is_symlink()
    except OSError:  # a root path too long for the file system (ENAMETOOLONG): nothing can be there
        return None, None, None
    if there:
        entry, why = _cache.load_json(path, root)
        if why != "missing":
            return entry, path, why
    return settled(lambda strict: _from_packs(path.parent, eid, strict, root))


def _from_packs(directory: Path, eid: str, strict: bool, root: Path | None = None
                ) -> tuple[dict[str, Any] | None, Path | None, str | None]:
    """(entry, where, why) of ``eid`` in the newest pack of ``directory`` that holds it (the
    tuner's lookup, with ``root``: warned about packs that cannot be read, none read through a
    link out of it); :class:`Vanished` when one was removed since it was listed and ``strict``."""
    for pack in _readable(settled(lambda again: _opened(directory, again)), warn=root is not None):
        found = pack.read(eid)
        if found is None:
            continue
        if strict and found[1] == packfile.GONE:  # replaced since it was opened: read the new one
            raise Vanished(pack.path)
        where = Path(pack.path) / f"{eid}.json"
        if root is not None and not _cache._inside(directory / DIR_NAME, root):  # as for a loose file
            return None, where, "it resolves outside the cache root (symlink); ignored"
        blob, why = found
        if blob is None:
            return None, where, why
        entry, why = _cache.parse_entry(blob)
        if entry is not None and entry.get("id") != eid:
            return None, where, f"the pack's index names {eid} but the entry is {str(entry.get('id'))[:40]}"
        return entry, where, why
    return None, None, None


def read_path(path: Path | str, root: Path | str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(entry, None) or (None, why) for an entry's path as the tools list it (loose or packed).
    A packed entry whose pack was replaced since it was listed (a prune, a seeding) is read from
    the newest pack that holds its id now ("missing" when none does: it was removed)."""
    path = Path(path)
    if not is_packed(path):
        return _cache.load_json(path, None if root is None else Path(root))
    found = Pack.open(path.parent)
    read = found.read(path.stem) if found.problem is None else None
    if found.gone or (read is not None and read[1] == packfile.GONE):
        entry, where, why = settled(lambda strict: _from_packs(path.parent.parent.parent, path.stem, strict))
        return (entry, why) if where is not None else (None, "missing")
    if found.problem is not None:
        return None, f"its pack is unusable: {found.problem}"
    if read is None:
        return None, "missing"
    return _cache.parse_entry(read[0]) if read[0] is not None else (None, read[1])


def packed_ids(directory: Path, root: Path) -> list[tuple[Pack, str]]:
    """(pack, id) of every packed entry the function ``directory`` serves (not shadowed by a
    loose file or a newer pack), by id."""
    try:
        seen = {n[:-5] for n in os.listdir(directory) if n.endswith(".json")}
    except OSError:
        return []
    out = []
    for pack in usable_packs(directory, root):
        for eid in pack.ids():
            if eid not in seen:
                seen.add(eid)
                out.append((pack, eid))
    return sorted(out, key=lambda t: t[1])


def packed_entries(directory: Path, root: Path) -> list[tuple[Path, bytes | None, str | None]]:
    """(path, bytes or None, why) of every packed entry :func:`packed_ids` lists (one read per
    pack; listed again when one was replaced before it was read)."""
    def read(strict: bool) -> list[tuple[Path, bytes | None, str | None]]:
        data: dict[str, bytes | None] = {}
        out = []
        for pack, eid in packed_ids(directory, root):
            if pack.path not in data:
                data[pack.path] = whole(pack, strict)
            blob, why = pack.slice(data[pack.path], eid)
            out.append((Path(pack.path) / f"{eid}.json", blob, why))
        return out

    return settled(read)


class Served:
    """What a function directory serves, read once (pre-flight compares thousands of ids): its
    names, and each pack's bytes and index."""

    def __init__(self, directory: Path, root: Path) -> None:
        self.directory = directory
        try:
            self.loose = set(os.listdir(directory))
        except OSError:
            self.loose = set()
        self.outside = DIR_NAME in self.loose and not _cache._inside(directory / DIR_NAME, root)
        self.packed = settled(lambda strict: self._read_packs(root, strict)) if DIR_NAME in self.loose else {}

    def _read_packs(self, root: Path, strict: bool) -> dict[str, tuple[Pack, bytes | None, tuple[int, int, int]]]:
        packed: dict[str, tuple[Pack, bytes | None, tuple[int, int, int]]] = {}
        for pack in usable_packs(self.directory, root, outside=True):
            data = whole(pack, strict)  # one replaced since it was listed: list again
            for eid, record in zip(pack.ids(), pack.records(), strict=True):
                packed.setdefault(eid, (pack, data, record))  # newest first: the first serves it
        return packed

    def raw(self, eid: str) -> bytes | None:
        """The bytes served for ``eid`` (None: nothing; :data:`NEVER`: not taken as they are)."""
        if f"{eid}.json" in self.loose:
            return _read_plain(self.directory / f"{eid}.json")
        found = self.packed.get(eid)
        if found is None:
            return None
        pack, data, (offset, length, crc) = found
        blob = data[offset: offset + length] if data is not None and not self.outside else b""
        return NEVER if not blob or pack.check(blob, offset, length, crc) else blob

    def digest(self, eid: str) -> bytes | None:
        blob = self.raw(eid)
        return blob if blob is None or blob == NEVER else hashlib.sha256(blob).digest()
