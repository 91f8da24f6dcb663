"""Many entries written folder by folder (``cache import``): a key's first entry is created in
place (``_store.create``: an unnamed file, its ``fsync``, then its name) through one open
descriptor of its folder (a link to a folder inside the root followed, as the tuner's writes
follow it), the folder's packs are looked for once, and its key log
(``_store.keylog``) is appended every :data:`LOG_EVERY` entries and when the writes move to
another folder or end (a SIGKILLed import loses at most that many lines, which the next listing
finds again: a reviewer, 2026-12-05, where it lost a whole folder's, up to 10,000). An entry
that replaces one (a loose file there, or one that landed meanwhile), and every entry of a
folder that has packs, goes in through ``files.write_entry_text``: the locked replacement that
keeps the old entry in history, where the import's rule is asked again about the entry found
there (one another process wrote after the plan: a newer or identical one is left alone). An
import of 10,000 entries opened the folder, listed its packs twice and appended to its key log
once per entry (21.7 s, a tester, 2026-12-05; ``export`` 2.8 s); every entry's ``fsync`` before
its name appears stays.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import keylog, packfile
from triton_dist._store.create import create_entry_text
from triton_dist._store.paths import _inside, ensure_private_dir

__all__ = ["LOG_EVERY", "FolderWrites"]

#: the key log is appended after this many entries created in a folder (and when the folder is left)
LOG_EVERY = 1000


class FolderWrites:
    """Write entries under ``root`` (:meth:`entry`), then :meth:`close` (also after an error or
    a stop: the key log of the entries created so far is appended then)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.folder: Path | None = None
        self.fd: int | None = None
        self.packed = False  # the folder has packs: each entry checked against them (files.write_entry_text)
        self.logged: list[tuple[str, str | None]] = []  # (id, key) of the entries created in it

    def entry(self, path: Path, text: str, entry: dict[str, Any],
              judge: Callable[[dict[str, Any] | None], str | None] | None = None) -> str | None:
        """Put the entry ``entry`` (its file text ``text``) at ``path``, its folder's entry file;
        None when written. ``judge``: the import's rule, asked under the entry's lock about an
        entry that is there when written (another process may have written it since the plan:
        a newer one or the same one is left, and its reason returned; it was replaced)."""
        if path.parent != self.folder:
            self.close()
            self._open(path.parent)
        if not self.packed and not os.path.lexists(path) and create_entry_text(path, text, fsync=True, folder=self.fd):
            self.logged.append((path.stem, entry.get("key")))
            if len(self.logged) >= LOG_EVERY:
                keylog.note(path.parent, self.logged)
                self.logged = []
            return None
        # one there (or landed meanwhile), or a folder with packs: the locked replacement
        return _cache.write_entry_text(self.root, path, text, judge=judge)

    def _open(self, folder: Path) -> None:
        ensure_private_dir(folder, self.root)  # inside the root, made again if it went away
        # a link to a folder inside the root is followed, as the tuner's writes follow it (with
        # O_NOFOLLOW such an import stopped at "Not a directory"); the folder opened is the one
        # checked: a link swapped to lead out of the root meanwhile is refused
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            opened, there = os.fstat(fd), os.stat(folder)
            if (opened.st_dev, opened.st_ino) != (there.st_dev, there.st_ino) or not _inside(folder, self.root):
                raise PermissionError(f"{folder} resolves outside the cache root {self.root} (a symlink?); "
                                      "refusing to write there")
        except BaseException:
            os.close(fd)
            raise
        self.folder, self.logged, self.fd = folder, [], fd
        self.packed = bool(packfile.pack_paths(folder))

    def close(self) -> None:
        """The key log of the folder written last appended, its descriptor closed."""
        if self.folder is not None:
            keylog.note(self.folder, self.logged)
        if self.fd is not None:
            os.close(self.fd)
        self.folder, self.fd, self.logged = None, None, []
