"""The usable entries of one function's directory, parsed once while the files stay the same.

Shared by the miss diagnosis (``_store.diagnose``), timing reuse (``_store.reuse``) and ``cache
why``'s guess of the tuner (``_cli.commands``); a leaf of the store, so that none of them imports
another for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache

__all__ = ["scan_function_dir"]


#: parsed files by path, valid while (mtime, size, inode) stay the same: a job in cache-only mode
#: that misses many keys scans the same directory once per key (entries are treated as read-only)
_parsed: dict[str, tuple[tuple[int, int, int], dict[str, Any] | None, str | None]] = {}
_PARSED_MAX = 4096


def _load(path: Path, root: Path) -> tuple[dict[str, Any] | None, str | None]:
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
    """(usable entries, unusable files with why) of one function's directory (not history).

    The entries are shared with later scans: read them, never change them."""
    entries: list[tuple[Path, dict[str, Any]]] = []
    skipped: list[tuple[Path, str]] = []
    try:
        paths = sorted(p for p in directory.iterdir() if p.suffix == ".json")
    except OSError:
        return entries, skipped
    for path in paths:
        entry, why = _load(path, root)
        if entry is None:
            skipped.append((path, why or "unusable"))
        else:
            entries.append((path, entry))
    return entries, skipped
