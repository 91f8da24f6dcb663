"""Function folders this user cannot read (another user's umask, a ``chmod 000``): each one is
reported in one line naming it and the fix, and skipped, so that one folder with the wrong
permissions does not stop a command for every other function. A command given that FUNCTION by
name could not do what was asked for it: an ``error:`` line and exit 1. See docs/cache.md."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

from triton_dist._store import admin as _cache_admin
from triton_dist.errors import CacheAdminError

__all__ = ["report_unreadable", "require_readable", "unreadable_line"]


def _owner(directory: Path) -> str | None:
    """The folder's owner when that is not this user (None: this user, or not known)."""
    try:
        uid = directory.stat().st_uid
    except OSError:
        return None
    if uid == getattr(os, "geteuid", lambda: None)():
        return None
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def unreadable_line(directory: Path, why: str) -> str:
    """One line: the folder, why it cannot be read, and the fix (its permissions)."""
    owner = _owner(directory)
    fix = f"`chmod u+rwx {directory}`" + (f" as its owner {owner}, or run this as {owner}" if owner else "")
    return f"cannot read the function folder {directory} ({why}); skipped it. Fix its permissions: {fix}"


def report_unreadable(root: Path, functions: Iterable[str] | None = None, *, named: bool = False) -> list[Path]:
    """One line on stderr per function folder (of ``functions``, or all) this user cannot read
    (``error:`` when the command was given them by name, else ``warning:``); returns them."""
    found = _cache_admin.unreadable_dirs(root, functions)
    for directory, why in found:
        sys.stderr.write(f"{'error' if named else 'warning'}: {unreadable_line(directory, why)}\n")
    return [directory for directory, _ in found]


def require_readable(root: Path, functions: Iterable[str]) -> None:
    """Refuse (CacheAdminError: the folder and the fix) when a FUNCTION the command was given by
    name has a folder this user cannot read."""
    for directory, why in _cache_admin.unreadable_dirs(root, functions):
        raise CacheAdminError(unreadable_line(directory, why).replace("; skipped it.", "."))
