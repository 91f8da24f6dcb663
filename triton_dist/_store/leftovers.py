"""The temporary archives that killed exports leave beside their ARCHIVE (``.NAME.<pid>.tmp``):
an export holds a lock on its own while writing it, and the next export to the same path removes
those whose process is gone and whose lock nobody holds (``_store.archive.export_archive``)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

try:
    import fcntl
except ImportError:  # not a POSIX system: no locks, a leftover is told by its pid alone
    fcntl = None  # type: ignore[assignment]

__all__ = ["hold", "remove_leftovers"]


def hold(fd: int) -> bool:
    """An exclusive lock on the open file ``fd`` (released when it is closed, or its process ends:
    a SIGKILL included), or False where it cannot be taken (held by another process, no ``fcntl``,
    a file system without locks)."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (another user's too)."""
    if pid == os.getpid():
        return False  # this export's file is not made yet: one of that name is an earlier process's
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists: another user's
        return True
    except (OverflowError, ValueError, OSError):  # not a pid at all
        return False
    return True


def remove_leftovers(archive: Path) -> list[Path]:
    """Remove the temporary archives ``.NAME.<pid>.tmp`` beside ``archive`` that exports to it
    left when they were killed (SIGKILL, an out-of-memory kill, a power cut: SIGTERM and Ctrl-C
    remove their own): those whose process is not running on this host and whose lock no process
    holds (an export holds its file's while writing it; on a shared file system another host's
    export to the same path is live although its pid is not running here). Returns the removed."""
    pattern = re.compile(rf"\.{re.escape(archive.name)}\.([1-9][0-9]{{0,9}})\.tmp")
    removed = []
    try:
        names = sorted(os.listdir(archive.parent))
    except OSError:
        return []
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or _running(int(match.group(1))):
            continue
        path = archive.parent / name
        try:  # not followed if a link, never blocking on a FIFO
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:  # gone meanwhile, a link, not ours to read: left as it is
            continue
        try:
            # a regular file no process holds (another host's live export holds its lock)
            if stat.S_ISREG(os.fstat(fd).st_mode) and (fcntl is None or hold(fd)):
                path.unlink()
                removed.append(path)
        except OSError:  # not ours to remove: left as it is
            pass
        finally:
            os.close(fd)
    return removed
