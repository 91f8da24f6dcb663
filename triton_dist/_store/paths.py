"""Where an entry lives: its id (source hash, hardware digest, key), its function's folder
name (:func:`safe_name`), its path, and the cache's private folders, created inside the root
only (:func:`ensure_private_dir`: a symbolic link must not lead writes elsewhere).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

__all__ = ["MAX_NAME_BYTES", "ensure_private_dir", "entry_id", "entry_path", "safe_name"]


def entry_id(source_hash: str, hardware_digest: str, key_text: str) -> str:
    blob = json.dumps([source_hash, hardware_digest, key_text], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


#: a function's folder name, in bytes: a file name may take 255 on most file systems
MAX_NAME_BYTES = 255


def safe_name(name: str) -> str:
    """The folder of ``name``'s entries: letters, digits and ``._-`` (the rest as ``_``); a name
    longer than a file name may be (e.g. a generated kernel's) is cut and ends with a digest of
    the whole, so that two long names still name two folders. ``safe_name(safe_name(n)) ==
    safe_name(n)``."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).strip(".") or "_"
    data = cleaned.encode()
    if len(data) <= MAX_NAME_BYTES:
        return cleaned
    head = data[:MAX_NAME_BYTES - 64].decode(errors="ignore")
    return f"{head}-{hashlib.sha256(name.encode(errors='surrogatepass')).hexdigest()[:32]}"


def entry_path(root: Path, function_name: str, eid: str) -> Path:
    return Path(root) / safe_name(function_name) / f"{eid}.json"


def _inside(path: Path, root: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
    except ValueError:
        return False
    return True


#: directories found inside their root: (path, root) -> (device, inode) of both when checked.
#: A later check is one stat of each: a component replaced by a link elsewhere resolves to
#: another directory, whose inode differs, and is checked in full again
_private: dict[tuple[str, str], tuple[int, int, int, int]] = {}


def ensure_private_dir(path: Path, root: Path) -> None:
    """Create ``path`` (0700 for what we create) and refuse a location outside ``root``."""
    name = (str(path), str(root))
    known = _private.get(name)
    if known is not None:
        try:
            st, rt = os.stat(name[0]), os.stat(name[1])
        except OSError:
            pass
        else:
            if (st.st_dev, st.st_ino, rt.st_dev, rt.st_ino) == known:
                return
    # mkdir(parents=True) gives the parents the umask's mode (often 0755): create each level
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for level in reversed(missing):
        level.mkdir(mode=0o700, exist_ok=True)
    if not _inside(path, root):
        raise PermissionError(f"{path} resolves outside the cache root {root} (a symlink?); refusing to write there")
    with contextlib.suppress(OSError):
        st, rt = os.stat(name[0]), os.stat(name[1])
        if len(_private) >= 4096:
            _private.clear()
        _private[name] = (st.st_dev, st.st_ino, rt.st_dev, rt.st_ino)
