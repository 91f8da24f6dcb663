"""The usable entries of one function's directory, parsed once while the files stay the same.

Shared by the miss diagnosis (``_store.diagnose``) and ``cache why``'s guess of the tuner
(``_cli.why``); a leaf of the store, so that none of them imports another for it. One key's
entries: :func:`key_entries` (the key log, ``_store.keyindex``); all of them, one at a time:
:func:`iter_function_dir` (a caller keeps what it needs, not the whole folder: ``cache why`` on
a function of 10,000 entries held them all twice, ~300 MB).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import packs
from triton_dist._store.keyindex import entries_with_key
from triton_dist._store.paths import _inside

__all__ = ["folder_outside", "iter_function_dir", "key_entries", "scan_function_dir"]


#: parsed files by path, valid while (mtime, size, inode) stay the same: a job in cache-only mode
#: that misses many keys scans the same directory once per key (entries are treated as read-only)
_parsed: dict[str, tuple[tuple[int, int, int], dict[str, Any] | None, str | None]] = {}
_PARSED_MAX = 4096


def _load(path: Path, root: Path, remember: bool = True) -> tuple[dict[str, Any] | None, str | None]:
    if not remember:
        return _cache.load_json(path, root)
    try:
        st = path.stat()
    except OSError:
        return _cache.load_json(path, root)
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    name = f"{root}\0{path}"  # whether it lies inside the root is part of the answer
    cached = _parsed.get(name)
    if cached is not None and cached[0] == stamp:
        return cached[1], cached[2]
    entry, why = _cache.load_json(path, root)
    if len(_parsed) >= _PARSED_MAX:
        _parsed.clear()
    _parsed[name] = (stamp, entry, why)
    return entry, why


def scan_function_dir(directory: Path, root: Path) -> tuple[list[tuple[Path, dict[str, Any]]],
                                                            list[tuple[Path, str]]]:
    """(usable entries, unusable files with why) of one function's directory (not history): its
    loose files, then the packed entries they do not shadow (``_store.packs``; a packed entry's
    path is ``.../packs/<pack>/<id>.json``).

    The entries are shared with later scans: read them, never change them."""
    entries: list[tuple[Path, dict[str, Any]]] = []
    skipped: list[tuple[Path, str]] = []
    for path, entry, why in iter_function_dir(directory, root):
        if entry is None:
            skipped.append((path, why))
        else:
            entries.append((path, entry))
    return entries, skipped


def iter_function_dir(directory: Path, root: Path) -> Iterator[tuple[Path, dict[str, Any] | None, str]]:
    """:func:`scan_function_dir`'s files one at a time, as (path, entry, "") or (path, None, why
    it is unusable), in its order (loose files by name, then packed entries, then unreadable
    packs): only the names of the folder are held, never all its entries."""
    try:
        paths = sorted(p for p in directory.iterdir() if p.suffix == ".json")
    except OSError:
        return
    # a folder of more files than are remembered would only push them out of it, and each held
    # entry costs memory (~4 KB): remembered where the next scan can find them there
    remember = len(paths) <= _PARSED_MAX
    for path in paths:
        entry, why = _load(path, root, remember)
        yield path, entry, "" if entry is not None else why or "unusable"
    for path, entry, why in _packed(directory, root):  # the packed entries no loose file shadows
        yield path, entry, "" if entry is not None else why or "unusable"
    for path, why in packs.bad_packs(directory):
        yield path, None, f"an unreadable pack: {why}"


def folder_outside(directory: Path, root: Path) -> bool:
    """Whether the function folder ``directory`` resolves outside ``root`` (a symbolic link out
    of it): nothing in it is read, its key log included."""
    return directory.is_dir() and not _inside(directory, root)


def key_entries(directory: Path, root: Path, key_text: str) -> list[tuple[Path, dict[str, Any]]]:
    """The usable entries of ``directory`` for the business key ``key_text`` (loose, then packed;
    ``_store.keyindex``: the key log and those few files, not every entry of the folder); none
    where the folder resolves outside the root. The folder is listed each time for the entries
    the log lacks (copied in, an older version's, a killed writer's or import's): a process's
    diagnosis within a minute of its last listing named a farther entry (keyindex lists a folder
    once a minute for the reuse of timings). Read them, never change them."""
    if folder_outside(directory, root):
        return []
    return entries_with_key(directory, root, key_text, list_now=True)


#: parsed packed entries by pack path, valid while the pack's (inode, size, mtime) stay the same
_packs_parsed: dict[str, tuple[tuple[int, int, int], dict[str, tuple[dict[str, Any] | None, str | None]]]] = {}


def _packed(directory: Path, root: Path) -> list[tuple[Path, dict[str, Any] | None, str | None]]:
    """The packed entries of ``directory`` (``_store.packs.packed_ids``), each pack parsed once;
    listed again when a pack was replaced (a prune, a seeding) before it was read."""
    return packs.settled(lambda strict: _packed_once(directory, root, strict))


def _packed_once(directory: Path, root: Path, strict: bool) -> list[tuple[Path, dict[str, Any] | None, str | None]]:
    out = []
    for pack, eid in packs.packed_ids(directory, root):
        cached = _packs_parsed.get(pack.path)
        if cached is None or cached[0] != pack.stamp:
            data = packs.whole(pack, strict)
            parsed: dict[str, tuple[dict[str, Any] | None, str | None]] = {}
            for entry_id in pack.ids():
                blob, why = pack.slice(data, entry_id)
                parsed[entry_id] = _cache.parse_entry(blob) if blob is not None else (None, why)
            if len(_packs_parsed) >= 64:
                _packs_parsed.clear()
            cached = _packs_parsed[pack.path] = (pack.stamp, parsed)
        entry, why = cached[1].get(eid, (None, "missing"))
        if entry is not None and entry.get("id") != eid:
            why = f"the pack's index names {eid} but the entry is {str(entry.get('id'))[:40]}"
            entry = None
        out.append((Path(pack.path) / f"{eid}.json", entry, why))
    return out
