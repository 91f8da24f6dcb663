"""Creating an entry file where none is: an unnamed file linked in place under its name.

A hard link never replaces a file, so no lock is needed and nothing goes to history: a key's
first entry (the first call of a tuned function, ``files.write_entry``) is written this way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

__all__ = ["create_entry_text"]


def create_entry_text(path: Path | str, text: str | bytes, fsync: bool = True, folder: int | None = None) -> bool:
    """Create the entry file ``path`` (its directory exists; ``folder``: an open descriptor of
    it, to save opening it per file) with ``text`` if no file is there; False if one is (or the
    file system has no hard links): use ``files.write_entry_text`` then.

    No lock is needed: a hard link never replaces a file, so a concurrent writer's entry is never
    lost and nothing needs to go to history, and the name appears with its complete text. Seeding
    a node creates thousands of entries this way (a lock per entry cost ~10 ms each on a busy
    machine), with ``fsync=False`` and one flush of the file system at the end."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    path = os.fspath(path)
    if _unnamed["ok"]:
        dir_fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY) if folder is None else folder
        try:
            created = _create_unnamed(dir_fd, os.path.basename(path), data, fsync)
        except OSError as exc:  # the unnamed file is opened as "." of the folder: name the folder
            if exc.filename != ".":
                raise
            raise type(exc)(exc.errno, exc.strerror, os.path.dirname(path) or ".") from None
        finally:
            if folder is None:
                os.close(dir_fd)
        if created is not None:
            return created
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)
        except OSError:  # FileExistsError, or no hard links here
            return False
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


#: Linux's unnamed files (``O_TMPFILE``) and their ``/proc/self/fd`` links, while they work here
_unnamed = {"ok": hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")}


def _create_unnamed(folder: int, name: str, data: bytes, fsync: bool) -> bool | None:
    """:func:`create_entry_text` with an unnamed file (``O_TMPFILE``) linked in place as ``name``
    in the directory ``folder``: one change to the directory per file, where a named temporary
    file costs three (create, link, unlink), which was most of the time of seeding 10,000 entries
    (issue 21). None where the file system or the platform cannot (then a named one is used)."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o644, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            _unnamed["ok"] = False
            return None
        raise
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, 0o644)
        if fsync:
            os.fsync(fd)
        try:  # linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N: the one way to name an unnamed file
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=folder, follow_symlinks=True)
        except FileExistsError:
            return False
        except OSError as exc:  # /proc not mounted, or links refused: a named temporary file
            if exc.errno in (errno.ENOENT, errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP):
                _unnamed["ok"] = False
                return None
            raise
        return True
    finally:
        os.close(fd)
