"""The disk cache: one JSON file per (source hash, hardware digest, business key).

Layout::

    <root>/<function_name>/<entry_id>.json        the entry
    <root>/<function_name>/<entry_id>.log         detailed log of the tuning that wrote it
    <root>/<function_name>/history/<entry_id>.<utc-stamp>.json   older entries for the same key
    <root>/<function_name>/.locks/<entry_id>.lock

Loading never executes code: entries are JSON, and configs are matched back against the current
``config_space`` by their JSON encoding. Writes are atomic (temporary file, fsync, ``os.replace``)
inside a ``FileLock``. Corrupt, truncated or foreign files are a miss with a warning.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import json
import logging
import math
import os
import queue
import stat
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from triton_dist._store.check import SCHEMA_NAME, check_entry
from triton_dist._store.keytext import MAX_KEY_BYTES, key_repr
from triton_dist.errors import TritonDistWarning

__all__ = [
    "MAX_KEY_BYTES",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "encode_config",
    "encode_value",
    "entry_id",
    "entry_path",
    "find_config",
    "key_repr",
    "read_entry",
    "create_entry_text",
    "write_entry",
    "write_entry_text",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MAX_ENTRY_BYTES = 8 * 2**20
LOCK_TIMEOUT_S = 60.0


# ---------------------------------------------------------------------------- encoding

def encode_value(value: Any) -> Any:
    """A JSON form of a config value that is equal for equal configs across processes."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        items = [encode_value(v) for v in value]
        return items if isinstance(value, list) else {"tuple": items}
    if isinstance(value, dict):
        return {"dict": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    cls = type(value)
    if cls.__name__ == "Config" and hasattr(value, "kwargs") and hasattr(value, "num_warps"):
        # triton.Config (and triton-ascend's): every plain attribute, hooks by name only
        fields = {}
        for name, attr in sorted(vars(value).items()):
            if callable(attr):
                attr = getattr(attr, "__qualname__", type(attr).__name__)
            fields[name] = encode_value(attr)
        return {"triton.Config": fields}
    text = repr(value)
    if " at 0x" in text:  # default object repr: identity, not content
        text = f"{cls.__module__}.{cls.__qualname__}"
    return {"repr": f"{cls.__module__}.{cls.__qualname__}:{text}"}


def encode_config(config: dict[str, Any]) -> dict[str, Any]:
    return {str(k): encode_value(v) for k, v in config.items()}


def find_config(encoded: Any, encoded_space: Sequence[dict[str, Any]]) -> int | None:
    """Index of the config whose encoding (taken at decoration time: ``TuneTarget.encoded``)
    equals ``encoded``."""
    for index, config in enumerate(encoded_space):
        if config == encoded:
            return index
    return None


# ---------------------------------------------------------------------------- paths

def entry_id(source_hash: str, hardware_digest: str, key_text: str) -> str:
    blob = json.dumps([source_hash, hardware_digest, key_text], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).strip(".")
    return cleaned or "_"


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


# ---------------------------------------------------------------------------- reading

def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, TritonDistWarning, stacklevel=4)


def load_json(path: Path, root: Path | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(entry, None) or (None, why it is not a usable entry). Never raises on bad content."""
    try:
        if root is not None and not _inside(path, root):
            return None, "it resolves outside the cache root (symlink); ignored"
        # O_NONBLOCK: a FIFO planted under an entry name must not block the reader forever
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None, "it is not a regular file"
            raw = f.read(MAX_ENTRY_BYTES + 1)
        if len(raw) > MAX_ENTRY_BYTES:
            return None, f"it is larger than {MAX_ENTRY_BYTES} bytes"
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return None, "missing"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"unreadable or not JSON ({type(exc).__name__}: {str(exc)[:200]})"
    why = check_entry(data)
    return (data, None) if why is None else (None, why)


def read_entry(path: Path, root: Path) -> dict[str, Any] | None:
    """The entry at ``path``, or None (with a warning if a file was there but unusable)."""
    data, why = load_json(path, root)
    if data is None and why != "missing":
        _warn(f"ignoring cache file {path}: {why}. It is treated as a miss; delete it or run "
              f"`python -m triton_dist.cache verify` to list such files.")
    return data


# ---------------------------------------------------------------------------- writing

def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def _lock_for(path: Path) -> FileLock:
    lock_dir = path.parent / ".locks"
    ensure_private_dir(lock_dir, path.parent)  # a .locks symlink must not take lock files elsewhere
    lock_path = lock_dir / (path.stem + ".lock")
    if lock_path.is_symlink():  # never ours; filelock < 4 opens it with O_TRUNC, following links
        lock_path.unlink()
    return FileLock(str(lock_path), timeout=LOCK_TIMEOUT_S)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    try:
        with _lock_for(path):
            yield
    except Timeout as exc:
        raise OSError(f"could not lock {path} within {LOCK_TIMEOUT_S}s: {exc}") from exc


def atomic_write_text(path: Path, text: str, durable: bool = True) -> None:
    """Write ``text`` to ``path`` atomically: temp file in the same directory, fsync, replace.

    ``durable=False`` replaces first and fsyncs on a background thread (``_sync_later``): the
    name holds the complete text as soon as this returns, for every process (the page cache), and
    survives this process being killed; only a crash of the machine within the next milliseconds
    could lose it (the entry is then missing or unreadable: a miss, re-tuned, never a wrong
    config). The first call of a tuned function writes its entry that way: an fsync costs 2-4 ms
    on the GPU hosts measured, 5 % of the tuning of 15 configs of a 30 µs kernel (issue 16)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        _sync_later(path)


_sync_queue: queue.SimpleQueue[Path] | None = None
_sync_lock = threading.Lock()


def _sync_later(path: Path) -> None:
    """fsync ``path`` on a background daemon thread (started on first use)."""
    global _sync_queue
    with _sync_lock:
        if _sync_queue is None:
            _sync_queue = queue.SimpleQueue()
            threading.Thread(target=_sync_worker, args=(_sync_queue,), name="triton-dist-fsync",
                             daemon=True).start()
    _sync_queue.put(path)


def _sync_worker(paths: queue.SimpleQueue[Path]) -> None:
    while True:
        path = paths.get()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # replaced or removed meanwhile: whoever did that synced their own
            continue
        try:
            os.fsync(fd)
        except OSError as exc:
            log.warning("could not fsync the cache entry %s: %s", path, exc)
        finally:
            os.close(fd)


#: one value in one line, by the C encoder (``indent`` makes ``json`` fall back to its Python
#: encoder: 0.5 ms of a 15-config entry, a third of the first call's own cost, P2 issue 16)
_encode_line = json.JSONEncoder(sort_keys=True, allow_nan=False, separators=(", ", ": ")).encode


def dumps_entry(entry: dict[str, Any]) -> str:
    """An entry's text: one line per top-level field, one per candidate (readable and diffable),
    keys sorted, NaN/infinity refused (``ValueError``); the same entry always gives the same bytes."""
    lines = []
    for name in sorted(entry):
        value = entry[name]
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            items = ",\n".join(f"    {_encode_line(item)}" for item in value)
            lines.append(f"  {_encode_line(name)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {_encode_line(name)}: {_encode_line(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n" if lines else "{}\n"


def write_entry(root: Path, entry: dict[str, Any], durable: bool = True) -> Path:
    """Write ``entry`` under ``root`` atomically; an existing entry for the key moves to history.

    Raises OSError when the directory is not writable (callers warn and go on). ``durable=False``:
    the fsync runs in the background (see :func:`atomic_write_text`).
    """
    root = Path(root)
    path = entry_path(root, entry["function"], entry["id"])
    text = dumps_entry(entry)
    ensure_private_dir(path.parent, root)
    # a key's first entry (the first call of a tuned function): created in place without the
    # lock, as seeding does (nothing to move to history; a hard link never replaces a file),
    # ~0.4 ms less on the first call; otherwise, or when another writer was faster, the locked
    # replacement that keeps the old entry in history
    if not os.path.lexists(path) and create_entry_text(path, text, fsync=durable):
        if not durable:
            _sync_later(path)
        return path
    write_entry_text(root, path, text, durable)
    return path


def write_entry_text(root: Path, path: Path, text: str, durable: bool = True) -> None:
    """Put an entry file's ``text`` at ``path`` (inside ``root``) atomically, under the entry's
    lock; an existing file there moves to history. Seeding copies entries this way, byte for byte."""
    ensure_private_dir(path.parent, root)
    with locked(path):
        if path.is_symlink():  # never write through a link; the link itself is replaced
            path.unlink()
        elif path.exists():
            history = path.parent / "history"
            ensure_private_dir(history, root)
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
            old = history / f"{path.stem}.{stamp}.json"
            n = 0
            while old.exists() or old.is_symlink():  # same microsecond or a clock step back
                n += 1
                old = history / f"{path.stem}.{stamp}-{n}.json"
            # a hard link, not a move: the final name holds a complete entry at every instant,
            # also when the writer is killed between these two steps
            try:
                os.link(path, old)
            except OSError:  # a file system without hard links: an atomic copy instead
                atomic_write_text(old, path.read_text(encoding="utf-8"))
        atomic_write_text(path, text, durable)


def create_entry_text(path: Path | str, text: str | bytes, fsync: bool = True, folder: int | None = None) -> bool:
    """Create the entry file ``path`` (its directory exists; ``folder``: an open descriptor of
    it, to save opening it per file) with ``text`` if no file is there; False if one is (or the
    file system has no hard links): use :func:`write_entry_text` then.

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


def json_safe_time(value: float) -> float | None:
    return value if math.isfinite(value) else None
