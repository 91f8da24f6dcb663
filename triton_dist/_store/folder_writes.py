"""Many entries written folder by folder (``cache import``): a key's first entry is created in
place (``_store.create``: an unnamed file, its ``fsync``, then its name) through one open
descriptor of its folder, the folder's packs are looked for once, and its key log
(``_store.keylog``) is appended once, when the writes move to another folder or end. An entry
that replaces one (a loose file there, or one that landed meanwhile), and every entry of a
folder that has packs, goes in through ``files.write_entry`` as before: the locked replacement
that keeps the old entry in history. An import of 10,000 entries opened the folder, listed its
packs twice and appended to its key log once per entry (21.7 s, a tester, 2026-12-05; ``export``
2.8 s); every entry's ``fsync`` before its name appears stays.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import keylog, packfile
from triton_dist._store.create import create_entry_text
from triton_dist._store.paths import ensure_private_dir

__all__ = ["FolderWrites"]


class FolderWrites:
    """Write entries under ``root`` (:meth:`entry`), then :meth:`close` (also after an error or
    a stop: the key log of the entries created so far is appended then)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.folder: Path | None = None
        self.fd: int | None = None
        self.packed = False  # the folder has packs: each entry checked against them (files.write_entry)
        self.logged: list[tuple[str, str | None]] = []  # (id, key) of the entries created in it

    def entry(self, path: Path, text: str, entry: dict[str, Any]) -> None:
        """Put the entry ``entry`` (its file text ``text``) at ``path``, its folder's entry file."""
        if path.parent != self.folder:
            self.close()
            self._open(path.parent)
        if self.packed:
            _cache.write_entry(self.root, entry)
        elif os.path.lexists(path) or not create_entry_text(path, text, fsync=True, folder=self.fd):
            _cache.write_entry_text(self.root, path, text)  # replaces one: the old goes to history
        else:
            self.logged.append((path.stem, entry.get("key")))

    def _open(self, folder: Path) -> None:
        ensure_private_dir(folder, self.root)  # inside the root, made again if it went away
        self.folder, self.logged = folder, []
        self.fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        self.packed = bool(packfile.pack_paths(folder))

    def close(self) -> None:
        """The key log of the folder written last appended, its descriptor closed."""
        if self.folder is not None:
            keylog.note(self.folder, self.logged)
        if self.fd is not None:
            os.close(self.fd)
        self.folder, self.fd, self.logged = None, None, []
