"""The disk cache: one JSON file per (source hash, hardware digest, business key).

Layout::

    <root>/<function_name>/<entry_id>.json        the entry
    <root>/<function_name>/<entry_id>.log         detailed log of the tuning that wrote it
    <root>/<function_name>/history/<entry_id>.<utc-stamp>.json   older entries for the same key
    <root>/<function_name>/.locks/<entry_id>.lock
    <root>/<function_name>/packs/<seq>-<digest16>.pack   entries seeded as one file (``_store.packs``)

Loading never executes code: entries are JSON, and configs are matched back against the current
``config_space`` by their JSON encoding. Writes are atomic (temporary file, fsync, ``os.replace``)
inside a ``FileLock``. Corrupt, truncated or foreign files are a miss with a warning. Which of a
loose file and the packs serves an id: ``_store.packs.load_entry``. How a config is written:
``_store.encoding``; an entry's id, folder and path: ``_store.paths`` (their names importable here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import errno
import hashlib
import json
import logging
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from triton_dist._store import keylog, packfile
from triton_dist._store.background_sync import sync_later
from triton_dist._store.check import SCHEMA_NAME, check_entry
from triton_dist._store.create import create_entry_text
from triton_dist._store.denied import why_denied
from triton_dist._store.encoding import SAME_ON_DISK, config_text, encode_config, encode_value, find_config
from triton_dist._store.encoding import told_by_content as told_by_content  # importable here, as before
from triton_dist._store.keytext import MAX_KEY_BYTES, key_repr
from triton_dist._store.paths import _inside, ensure_private_dir, entry_id, entry_path
from triton_dist._store.paths import safe_name as safe_name  # importable here, as before
from triton_dist._warn import warn_user

__all__ = [
    "MAX_KEY_BYTES",
    "SAME_ON_DISK",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "config_text",
    "dangling_link",
    "encode_config",
    "encode_value",
    "entry_id",
    "entry_path",
    "find_config",
    "key_repr",
    "parse_entry",
    "read_entry",
    "write_entry",
    "write_entry_text",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MAX_ENTRY_BYTES = 8 * 2**20
LOCK_TIMEOUT_S = 60.0
#: a wait for an entry's lock longer than this is said (a writer takes milliseconds): the lock file
#: named, so that a stopped or hung process holding it (Ctrl-Z, SIGSTOP, a debugger) can be found
LOCK_SAY_AFTER_S = 5.0


# ---------------------------------------------------------------------------- reading

def dangling_link(root: Path) -> str | None:
    """Why ``root`` cannot be made, where it (or a folder above it) is a symbolic link whose
    target does not exist (a volume not mounted yet): creating it fails with "File exists"."""
    for path in (root, *root.parents):
        try:
            dangling = path.is_symlink() and not path.exists()
            target = os.readlink(path) if dangling else ""
        except OSError:  # a name too long for the file system (a tester): not a link's fault
            continue
        if dangling:
            try:
                os.stat(path)
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # links that lead back to themselves: nothing to create (a tester)
                    return (f"{path} is a symbolic link that leads back to itself through {target} (a loop): "
                            "point it, or the cache, at a real folder")
            return (f"{path} is a symbolic link to {target}, which does not exist: create "
                    "that folder (or mount its volume), or point the cache elsewhere")
    return None


def _warn(message: str, stacklevel: int = 4) -> None:
    warn_user(message, log=log)


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
    except FileNotFoundError:
        return None, "missing"
    except PermissionError as exc:  # its mode or owner, not its bytes: never pruned as corrupt
        return None, why_denied(exc)
    except OSError as exc:
        return None, f"unreadable or not JSON ({type(exc).__name__}: {str(exc)[:200]})"
    return parse_entry(raw)


def parse_entry(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(entry, None) or (None, why): an entry file's bytes, parsed and checked (``check_entry``);
    the bytes of a loose file and of a packed entry (``_store.packs``) alike."""
    if len(raw) > MAX_ENTRY_BYTES:
        return None, f"it is larger than {MAX_ENTRY_BYTES} bytes"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"unreadable or not JSON ({type(exc).__name__}: {str(exc)[:200]})"
    why = check_entry(data)
    return (data, None) if why is None else (None, why)


def read_entry(path: Path, root: Path) -> dict[str, Any] | None:
    """The entry at ``path``, or None (with a warning if a file was there but unusable)."""
    data, why = load_json(path, root)
    if data is None and why != "missing":
        warn_unusable(path, str(why))
    return data


def warn_unusable(path: Path, why: str) -> None:
    _warn(f"ignoring cache file {path}: {why}. It is treated as a miss; delete it or run "
          f"`python -m triton_dist.cache verify` to list such files.", stacklevel=5)


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
def locked(path: Path, drop: bool = False) -> Iterator[None]:
    """``path``'s entry lock held inside; a wait over ``LOCK_SAY_AFTER_S`` is said (the lock file
    named), one over ``LOCK_TIMEOUT_S`` raises ``OSError`` naming it and how to find its holder.

    ``drop``: the lock file is removed while still held, when the body ends without an exception
    (a pruned entry's: one lock file was left behind per removed entry, a tester). Safe because
    it is held: no one else holds it then, and a process that opened that file before it went and
    wins its lock afterwards finds it unlinked (filelock checks ``st_nlink`` after ``flock``) and
    locks a new file of that name instead, as every later process does."""
    lock = _lock_for(path)
    try:
        lock.acquire(timeout=min(LOCK_SAY_AFTER_S, LOCK_TIMEOUT_S))
    except Timeout:
        _warn(f"waiting for the lock {lock.lock_file} of cache entry {path} ({LOCK_SAY_AFTER_S:g}s so far; a "
              f"write takes milliseconds): another process holds it. If that process is stopped or hung "
              f"(Ctrl-Z, SIGSTOP, a debugger), `fuser -v {lock.lock_file}` names it; waiting up to "
              f"{LOCK_TIMEOUT_S:g}s in all.", stacklevel=5)
        try:
            lock.acquire(timeout=max(0.0, LOCK_TIMEOUT_S - LOCK_SAY_AFTER_S))
        except Timeout as exc:
            raise OSError(f"could not lock cache entry {path} within {LOCK_TIMEOUT_S:g}s: another process "
                          f"holds {lock.lock_file} (`fuser -v {lock.lock_file}` names it: resume or end "
                          f"it; the lock goes with its holder)") from exc
    try:
        yield
        if drop:
            with contextlib.suppress(OSError):
                os.unlink(lock.lock_file)
    finally:
        lock.release()


def drop_free_lock(path: Path) -> bool:
    """Remove the lock file of the entry ``path`` if no one holds it (taken without waiting,
    removed while held: :func:`locked`); whether it was removed."""
    lock = _lock_for(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return False
    try:
        os.unlink(lock.lock_file)
        return True
    except OSError:
        return False
    finally:
        lock.release()


def atomic_write_text(path: Path, text: str, durable: bool = True) -> None:
    """Write ``text`` to ``path`` atomically: temp file in the same directory, fsync, replace.

    ``durable=False`` replaces first and fsyncs on a background thread (``background_sync``): the
    name holds the complete text as soon as this returns, for every process (the page cache), and
    survives this process being killed; only a crash of the machine within the next milliseconds
    could lose it (the entry is then missing or unreadable: a miss, re-tuned, never a wrong
    config). The first call of a tuned function writes its entry that way: an fsync costs 2-4 ms
    on the GPU hosts measured, 5 % of the tuning of 15 configs of a 30 µs kernel (issue 16)."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def atomic_write_bytes(path: Path, data: bytes, durable: bool = True, verify: bool = False) -> None:
    """``atomic_write_text`` for bytes; ``verify`` reads the temporary file back and compares it
    before it takes the name (a shipped kernel binary: a short write must never be installed)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if verify and hashlib.sha256(Path(tmp).read_bytes()).digest() != hashlib.sha256(data).digest():
            raise OSError(f"{tmp} does not read back what was written")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        sync_later(path)


#: one value in one line, by the C encoder (``indent`` makes ``json`` fall back to its Python
#: encoder: 0.5 ms of a 15-config entry, a third of the first call's own cost, P2 issue 16)
_encode_line = json.JSONEncoder(sort_keys=True, allow_nan=False, separators=(", ", ": ")).encode


def field_text(name: str, value: Any) -> str:
    """One top-level field of an entry's text (:func:`dumps_entry`)."""
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        items = ",\n".join(f"    {_encode_line(item)}" for item in value)
        return f"  {_encode_line(name)}: [\n{items}\n  ]"
    return f"  {_encode_line(name)}: {_encode_line(value)}"


def dumps_entry(entry: dict[str, Any], known: dict[str, tuple[Any, str]] | None = None) -> str:
    """An entry's text: one line per top-level field, one per candidate (readable and diffable),
    keys sorted, NaN/infinity refused (``ValueError``); the same entry always gives the same bytes.
    ``known``: name -> (value, :func:`field_text`) of fields encoded earlier, used where the
    entry holds that very value (a tuning encodes its entry's head while it waits for the device)."""
    lines = []
    for name in sorted(entry):
        value = entry[name]
        done = known.get(name) if known is not None else None
        lines.append(done[1] if done is not None and done[0] is value else field_text(name, value))
    return "{\n" + ",\n".join(lines) + "\n}\n" if lines else "{}\n"


@dataclasses.dataclass(frozen=True)
class EntryPlace:
    """Where an entry is about to be written, checked ahead (:func:`place_entry`)."""

    path: Path
    fresh: bool
    """no loose or packed entry was there when checked (a hint: the create never replaces)"""


def place_entry(root: Path, function_name: str, eid: str) -> EntryPlace:
    """Check ahead of :func:`write_entry` where an entry goes: its directory made and checked,
    and whether it is the key's first entry (a tuning does this while the host waits for the
    device, ``_measure.spare``: the write after the last sample is then the file alone)."""
    path = entry_path(root, function_name, eid)
    ensure_private_dir(path.parent, root)
    return EntryPlace(path, not os.path.lexists(path) and _packed_bytes(path) is None)


def write_entry(root: Path, entry: dict[str, Any], durable: bool = True, place: EntryPlace | None = None,
                known: dict[str, tuple[Any, str]] | None = None) -> Path:
    """Write ``entry`` under ``root`` atomically; an existing entry for the key moves to history.

    Raises OSError when the directory is not writable (callers warn and go on). ``durable=False``:
    the fsync runs in the background (see :func:`atomic_write_text`). ``place``: the checks of
    :func:`place_entry`, done earlier for this entry; ``known``: fields encoded earlier
    (:func:`dumps_entry`).
    """
    root = Path(root)
    path = entry_path(root, entry["function"], entry["id"])
    text = dumps_entry(entry, known)
    if place is None or place.path != path:
        place = None
        ensure_private_dir(path.parent, root)
    # a key's first entry (the first call of a tuned function): created in place without the
    # lock (nothing to move to history; a hard link never replaces a file), ~0.4 ms less on the
    # first call; otherwise (a loose or packed entry is there, or another writer was faster)
    # the locked replacement, which keeps the old entry in history
    fresh = place.fresh if place is not None else not os.path.lexists(path) and _packed_bytes(path) is None
    try:
        created = fresh and create_entry_text(path, text, fsync=durable)
    except FileNotFoundError:  # the directory went away since it was placed: made again below
        if place is None:
            raise
        created = False
    if created:
        if not durable:
            sync_later(path)
        keylog.note(path.parent, [(path.stem, entry.get("key"))])  # what a miss reads, not the folder
        return path
    write_entry_text(root, path, text, durable)
    return path


def write_entry_text(root: Path, path: Path, text: str, durable: bool = True,
                     judge: Callable[[dict[str, Any] | None], str | None] | None = None) -> str | None:
    """Put an entry file's ``text`` at ``path`` (inside ``root``) atomically, under the entry's
    lock; an existing file there moves to history. Seeding copies entries this way, byte for byte.

    ``judge``: called under the lock with the entry there now (loose, else packed; None if none
    or unusable); a reason it returns leaves that entry as it is and is returned (``cache import``
    plans before it writes: an entry another process wrote meanwhile is judged when it is seen)."""
    ensure_private_dir(path.parent, root)
    with locked(path):
        if judge is not None:
            verdict = judge(None if path.is_symlink() else _current_entry(path, root))
            if verdict is not None:
                return verdict
        if path.is_symlink():  # never write through a link; the link itself is replaced
            path.unlink()
        elif path.exists():
            old = history_path(path, root)
            # a hard link, not a move: the final name holds a complete entry at every instant,
            # also when the writer is killed between these two steps
            try:
                os.link(path, old)
            except OSError:  # a file system without hard links: an atomic copy instead
                atomic_write_text(old, path.read_text(encoding="utf-8"))
        else:  # the entry it replaces may be packed (a seeded node): the loose file wins, the
            packed = _packed_bytes(path)  # packed one becomes history, as a replaced file does
            if packed is not None and packed != text.encode("utf-8"):
                atomic_write_text(history_path(path, root), packed.decode("utf-8", errors="replace"), durable)
        atomic_write_text(path, text, durable)
    keylog.note_text(path, text)
    return None


def _current_entry(path: Path, root: Path) -> dict[str, Any] | None:
    """The usable entry at ``path`` now: its loose file, else the packs' (None if neither)."""
    if os.path.lexists(path):
        return load_json(path, root)[0]
    packed = _packed_bytes(path)
    return parse_entry(packed)[0] if packed is not None else None


def history_path(path: Path, root: Path) -> Path:
    """A free name in history for the entry file ``path`` replaced now (its directory made)."""
    history = path.parent / "history"
    ensure_private_dir(history, root)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    old = history / f"{path.stem}.{stamp}.json"
    n = 0
    while old.exists() or old.is_symlink():  # same microsecond or a clock step back
        n += 1
        old = history / f"{path.stem}.{stamp}-{n}.json"
    return old


def _packed_bytes(path: Path) -> bytes | None:
    """The bytes the packs of ``path``'s directory hold for its id (the newest pack's), if any."""
    for pack_path in packfile.pack_paths(path.parent):
        found = packfile.Pack.open(pack_path).read(path.stem)
        if found is not None:
            return found[0]
    return None


def json_safe_time(value: float) -> float | None:
    return value if math.isfinite(value) else None
