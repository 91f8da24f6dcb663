"""Which entry ids of one function directory are for which business key, as an append-only log
the writers keep: ``<function>/.keys/index`` (``verify`` passes over it), one line per written
entry::

    <entry id: 32 hex digits> <first 32 hex digits of the SHA-256 of its key text>\\n

A miss that may reuse timings (``_store.keyindex``) reads the new lines since its last look
(one open and one read) and then the few entries of its own key; it no longer lists the whole
folder (45 ms at 40,000 files) nor reads every entry in a new process (2.5 s at 20,000). The log
is a hint, checked against the entries it names: a line of an entry since removed names a
missing file, and an entry the log lacks (written by an older version, copied in by hand) is
found by the one listing each process makes of a folder, which adds it to the log.
Lines are appended with one ``write`` under ``O_APPEND`` (whole on a local file system); a
malformed line is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = ["DIR_NAME", "LOG_NAME", "key_hash", "key_of", "note", "note_text", "read_from"]

DIR_NAME = ".keys"
LOG_NAME = "index"
_HEX = frozenset("0123456789abcdef")
#: the top-level key's line of an entry (``files.dumps_entry`` and the earlier ``indent=2``)
_KEY_LINE = re.compile(rb'\n  "key": ("(?:[^"\\\n]|\\.)*")')


def key_hash(key_text: str) -> str:
    return hashlib.sha256(key_text.encode("utf-8", errors="surrogatepass")).hexdigest()[:32]


def key_of(blob: bytes) -> str | None:
    """The business key text of an entry's bytes, None when they hold no entry's key."""
    found = _KEY_LINE.search(blob)
    if found is not None:
        try:
            value = json.loads(found.group(1))
        except ValueError:
            value = None
        if isinstance(value, str):
            return value
    try:  # another layout (an entry written by hand, or by other software)
        data = json.loads(blob)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    key = data.get("key") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None


def log_path(directory: Path | str) -> str:
    return os.path.join(directory, DIR_NAME, LOG_NAME)


def note(directory: Path | str, pairs: Iterable[tuple[str, str | None]]) -> None:
    """Append (entry id, key text) pairs to ``directory``'s log; a key of None is left out. Never
    raises: a log that cannot be written costs a later miss a listing, never a wrong answer."""
    data = b"".join(f"{eid} {key_hash(key)}\n".encode() for eid, key in pairs if key is not None)
    if not data:
        return
    folder = os.path.join(directory, DIR_NAME)
    try:
        if os.path.islink(folder):  # never ours: a log must not be written through it elsewhere
            return
        os.makedirs(folder, mode=0o700, exist_ok=True)
        # O_NONBLOCK: a FIFO at the log's name (no reader) must not hang the writer (U22)
        fd = os.open(log_path(directory), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                     0o644)
    except OSError:
        return
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def note_text(path: Path, text: str | bytes) -> None:
    """Log the entry file ``path`` written with ``text`` (its key read from the text)."""
    blob = text.encode("utf-8") if isinstance(text, str) else text
    note(path.parent, [(path.stem, key_of(blob))])


def read_from(directory: Path | str, offset: int) -> tuple[list[tuple[str, str]], int] | None:
    """(id, key hash) of the whole lines of the log from ``offset`` on, and the offset after them;
    None when the log is missing or shorter than ``offset`` (replaced: read it again from 0)."""
    try:
        fd = os.open(log_path(directory), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < offset:
            return None
        data = os.pread(fd, size - offset, offset) if size > offset else b""
    except OSError:
        return None
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    text = data[:end].decode("ascii", errors="replace")  # a malformed line is skipped
    return [(line[:32], line[33:]) for line in text.split("\n")
            if len(line) == 65 and line[32] == " " and _HEX.issuperset(line[:32]) and _HEX.issuperset(line[33:])
            ], offset + end
