"""Which entry ids of one function directory are for which business key, as an append-only log
the writers keep: ``<function>/.keys/index`` (``verify`` passes over it), one line per written
entry::

    <entry id: 32 hex digits> <first 32 hex digits of the SHA-256 of its key text>\\n

A miss that may reuse timings (``_store.keyindex``) reads the new lines since its last look
(one open, and reads of at most :data:`CHUNK_BYTES` each) and then the few entries of its own
key; it no longer lists the whole folder (45 ms at 40,000 files) nor reads every entry in a new
process (2.5 s at 20,000). The log is a hint, checked against the entries it names: a line of an
entry since removed names a missing file, and an entry the log lacks (written by an older
version, copied in by hand, a writer killed before it logged it) is found by the listing a
process makes of a folder now and then (``keyindex.LIST_AGAIN_S``), which adds it to the log.
Lines are appended with one ``write`` under ``O_APPEND`` (whole on a local file system; over
NFS appends of two clients may overwrite each other: the listing finds those entries); a
malformed line is skipped. A reader remembers the log's offset with its identity (device,
inode): a log replaced by another file is read again from its start.

A real ``cache prune`` compacts the log of each function folder it removed entries from
(:func:`compact`): every write appends a line, so without it the log grows for ever (3 million
lines, 198 MB: a new process's first miss took 12.9 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

__all__ = ["CHUNK_BYTES", "DIR_NAME", "LOG_NAME", "compact", "key_hash", "key_of", "note", "note_text", "read_from"]

DIR_NAME = ".keys"
LOG_NAME = "index"
#: the most bytes of the log read at once (a reader's memory stays bounded however long it is)
CHUNK_BYTES = 1 << 20
_LINE_BYTES = 66  # a valid line, its newline included
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


Ident = tuple[int, int]  # (st_dev, st_ino) of the log read


def _open(directory: Path | str) -> tuple[int, os.stat_result] | None:
    try:
        fd = os.open(log_path(directory), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or device at the log's name: no log
        os.close(fd)
        return None
    return fd, st


def _blocks(fd: int, start: int, size: int) -> Iterator[tuple[bytes, int]]:
    """(whole lines, the offset after them) of the file from ``start`` to ``size``, read
    :data:`CHUNK_BYTES` at a time. A line longer than any valid one is kept as a marker that
    makes it malformed, not in full: memory stays bounded even in a file without newlines."""
    tail = b""
    pos = start
    while pos < size:
        block = os.pread(fd, min(CHUNK_BYTES, size - pos), pos)
        if not block:
            break
        at = pos
        pos += len(block)
        cut = block.rfind(b"\n")
        if cut < 0:
            tail += block
            if len(tail) > _LINE_BYTES:
                tail = b"!"  # never a hex digit: the rest of this line stays malformed
            continue
        yield tail + block[:cut + 1], at + cut + 1
        tail = block[cut + 1:]
        if len(tail) > _LINE_BYTES:
            tail = b"!"


def _pairs(lines: bytes) -> Iterator[tuple[str, str, bytes]]:
    """(id, key hash, the line with its newline) of the valid lines of ``lines``."""
    for raw in lines.split(b"\n")[:-1]:
        line = raw.decode("ascii", errors="replace")  # a malformed line is skipped
        if len(line) == 65 and line[32] == " " and _HEX.issuperset(line[:32]) and _HEX.issuperset(line[33:]):
            yield line[:32], line[33:], raw + b"\n"


def read_from(directory: Path | str, offset: int, ident: Ident | None = None,
              add: Callable[[str, str], object] | None = None) -> tuple[list[tuple[str, str]], int, Ident] | None:
    """(id, key hash) of the whole lines of the log from ``offset`` on, the offset after them and
    the log's identity (device, inode); None when the log is missing, shorter than ``offset`` or
    not the file ``ident`` names (replaced: read it again from 0, with no ident). With ``add``,
    each pair is handed to it as it is read and the list is empty: memory stays bounded by
    :data:`CHUNK_BYTES` however long the log."""
    opened = _open(directory)
    if opened is None:
        return None
    fd, st = opened
    found: list[tuple[str, str]] = []
    end = offset
    try:
        if st.st_size < offset or (ident is not None and ident != (st.st_dev, st.st_ino)):
            return None
        for lines, after in _blocks(fd, offset, st.st_size):
            for eid, digest, _ in _pairs(lines):
                if add is None:
                    found.append((eid, digest))
                else:
                    add(eid, digest)
            end = after
    except OSError:
        if end == offset:
            return None
    finally:
        os.close(fd)
    return found, end, (st.st_dev, st.st_ino)


def compact(directory: Path | str, live: Callable[[], Collection[str]]) -> int | None:
    """Rewrite ``directory``'s log keeping one line per entry id ``live()`` returns (the ids of
    the entries it still has: loose files and packed ones), atomically (a temporary file, then
    ``os.replace``); the number of lines dropped, None when it was left as it was (no log, an
    error) and 0 when nothing needed dropping (then it is not rewritten). ``live`` is called
    after the log's size is taken, so every line up to there has its file already (writers
    create the entry, then log it); the bytes writers append meanwhile are copied as they are
    just before the replacement. A line appended in the instant between that copy and the
    replacement is lost: only a hint (the entry is found by a later listing, ``keyindex``).
    Never raises."""
    folder = os.path.join(directory, DIR_NAME)
    if os.path.islink(folder):
        return None
    opened = _open(directory)
    if opened is None:
        return None
    fd, st = opened
    tmp: str | None = None
    try:
        ids = live()
        out_fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{LOG_NAME}.", suffix=".tmp")
        dropped, seen, end = 0, set(), 0
        with os.fdopen(out_fd, "wb") as out:
            for lines, after in _blocks(fd, 0, st.st_size):
                end = after
                kept = []
                for eid, digest, line in _pairs(lines):
                    if eid in ids and (eid, digest) not in seen:
                        seen.add((eid, digest))
                        kept.append(line)
                dropped += lines.count(b"\n") - len(kept)
                out.write(b"".join(kept))
            if not dropped:
                return 0
            os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
            now = os.stat(log_path(directory), follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                return None  # replaced meanwhile (another prune): its log stays
            while True:  # what writers appended since the size was taken (and a last partial line)
                more = os.pread(fd, CHUNK_BYTES, end)
                if not more:
                    break
                out.write(more)
                end += len(more)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, log_path(directory))
        tmp = None
        return dropped
    except OSError:
        return None
    finally:
        os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
