"""Function folders and cache files this user cannot read (another user's umask or 0600 file in
a shared root, a ``chmod 000``): each one is reported in one line naming it and the fix, and
skipped (a file: kept, never pruned as corrupt), so that wrong permissions do not stop a command
for every other function nor lose another user's data. A command given that FUNCTION (or that
entry) by name could not do what was asked for it: an ``error:`` line and exit 1. See
docs/cache.md."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

from triton_dist._store import admin as _cache_admin
from triton_dist._store import packs as _packs
from triton_dist._store.denied import DENIED, MODE
from triton_dist.errors import CacheAdminError

__all__ = ["denied_line", "report_denied", "report_unreadable", "require_readable", "unreadable_line"]


def _owner(directory: Path) -> str | None:
    """The folder's (or file's) owner when that is not this user (None: this user, or not known)."""
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


def denied_line(path: Path, why: str, done: str | None = None) -> str:
    """One line: the cache file this user may not read (``_store.denied``), why, what the command
    did (``done``: "kept it"), and the fix: the mode the cache writes, set by its owner."""
    if _packs.is_packed(path):  # a packed entry: the file is its pack
        path = path.parent
    what = ("pack" if path.suffix == ".pack" else "history file" if path.parent.name == "history"
            else "entry file")
    why = why[why.find(DENIED):] if DENIED in why else why  # not "an unreadable pack: " first
    owner = _owner(path)
    fix = f"`chmod {MODE} {path}`" + (f" as its owner {owner}, or run this as {owner}" if owner else "")
    return f"the {what} {path}: {why}{'; ' + done if done else ''}. Fix its permissions: {fix}"


def report_denied(files: Iterable[tuple[str, str]], done: str, *, named: bool = False) -> list[str]:
    """One line on stderr per (path, why) of a cache file this user may not read (``error:``
    when the command was given its function or entry by name, else ``warning:``); their paths."""
    paths = []
    for path, why in files:
        sys.stderr.write(f"{'error' if named else 'warning'}: {denied_line(Path(path), why, done)}\n")
        paths.append(path)
    return paths
