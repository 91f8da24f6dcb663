"""The packed entry file: many entries of one function in one file (issue 21).

Seeding a node writes the campaign's entries of a function as one *pack* instead of one file per
entry (creating 10,000 files cost a node >= 0.15 s of CPU; one file costs milliseconds)::

    <root>/<function>/packs/<seq:8 digits>-<digest16>.pack

``seq`` orders the packs of a directory (a higher one is newer); ``digest16`` is the first 16
hex digits of the SHA-256 of the file's bytes. A pack is written once and never changed in place:
a new one is linked or renamed into place complete, and a pack without some entries is written
as a new file (its same ``seq``) before the old one is removed.

Format (little-endian)::

    header   8s magic b"TDAPACK\\n", u32 version (1), u32 count
    index    count records of 32 bytes, sorted by id: 16 bytes id (the 32 hex digits of
             ``files.entry_id`` as bytes), u64 offset, u32 length, u32 CRC-32 of the bytes
    data     each entry's bytes, byte-identical to the ``<entry_id>.json`` file it stands for

A lookup reads the header and the index once per process (while the file stays the same: its
inode, size and mtime) and bisects it: microseconds. An entry's bytes are read with one
``pread`` and checked against the CRC before they are parsed (then checked as any entry is,
``_store.check``); a foreign, truncated or corrupt pack, or entry, is a miss with a warning,
never a crash and never another entry's config. Reads never map the file (a pack truncated by
hand under a reader would kill a mapped reader with SIGBUS).

A pack a reader listed can be gone when it opens or reads it: a rewrite replaced it meanwhile
(:attr:`Pack.gone`, :data:`GONE`). That is no problem of the pack: the reader lists the folder
again and reads the pack that replaced it (``_store.packs.settled``).

This module knows the format and the order of packs only; which of a loose file and the packs
serves an id, and writing or rewriting packs, is :mod:`triton_dist._store.packs`.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from triton_dist._store.check import OTHER_VERSION
from triton_dist._store.denied import why_denied

__all__ = ["DIR_NAME", "GONE", "MAGIC", "NAME_RE", "Pack", "build", "order", "pack_name", "pack_paths", "read_all",
           "vanished"]

MAGIC = b"TDAPACK\n"
VERSION = 1
DIR_NAME = "packs"
NAME_RE = re.compile(r"^(\d{8})-([0-9a-f]{16})\.pack$")
_HEADER = struct.Struct("<8sII")
_RECORD = struct.Struct("<16sQII")
#: the most entries one pack may hold (an index of 32 MiB)
MAX_COUNT = 2**20
#: why :meth:`Pack.read` read nothing when the pack was removed after it was opened (a rewrite
#: replaced it: ``cache prune``, seeding); the caller lists the folder again
GONE = "gone: the pack was removed after it was listed (a prune or a seeding replaced it)"


def build(items: Iterable[tuple[str, bytes]]) -> bytes:
    """The bytes of a pack of ``items`` (entry id, entry file bytes); ids must be distinct."""
    entries = sorted(items)
    ids = [eid.encode("ascii") for eid, _ in entries]
    if any(len(i) != 16 * 2 or not re.fullmatch(rb"[0-9a-f]{32}", i) for i in ids) or len(set(ids)) != len(ids):
        raise ValueError("a pack holds distinct entry ids of 32 hex digits")
    offset = _HEADER.size + _RECORD.size * len(entries)
    index, data = [], []
    for raw_id, (_eid, blob) in zip(ids, entries, strict=True):
        index.append(_RECORD.pack(bytes.fromhex(raw_id.decode()), offset, len(blob), zlib.crc32(blob)))
        data.append(blob)
        offset += len(blob)
    return b"".join([_HEADER.pack(MAGIC, VERSION, len(entries)), *index, *data])


def pack_name(seq: int, data: bytes) -> str:
    return f"{seq:08d}-{hashlib.sha256(data).hexdigest()[:16]}.pack"


def order(names: Iterable[str]) -> list[str]:
    """Pack file names of one directory, newest (highest ``seq``) first; others left out."""
    return sorted((n for n in names if NAME_RE.match(n)), reverse=True)


def pack_paths(function_dir: Path | str) -> list[str]:
    """The packs of a function directory, newest first ([] without a ``packs`` directory)."""
    folder = os.path.join(function_dir, DIR_NAME)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in order(names)]


class Pack:
    """One pack's index (``problem``: why it cannot be read; then it holds nothing; ``gone``: the
    problem is that no file has its name any more, as when a rewrite replaced it since it was listed)."""

    def __init__(self, path: str, stamp: tuple[int, int, int], index: bytes, count: int, problem: str | None,
                 gone: bool = False):
        self.path, self.stamp, self.index, self.count, self.problem = path, stamp, index, count, problem
        self.size, self.gone = stamp[1], gone

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Pack:
        """The pack at ``path`` (cached per process while its inode, size and mtime stay)."""
        path = os.fspath(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except PermissionError as exc:  # its mode or owner, not its bytes
            return cls(path, (0, 0, 0), b"", 0, why_denied(exc))
        except FileNotFoundError as exc:  # replaced since it was listed (or the listing was made up)
            return cls(path, (0, 0, 0), b"", 0, f"cannot open it ({exc.strerror or exc}; a link is never read)",
                       gone=True)
        except OSError as exc:
            return cls(path, (0, 0, 0), b"", 0, f"cannot open it ({exc.strerror or exc}; a link is never read)")
        try:
            info = os.fstat(fd)
            stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
            cached = _opened.get(path)
            if cached is not None and cached.stamp == stamp:
                return cached
            pack = cls._read(lambda n, at: os.pread(fd, n, at), path, stamp, stat.S_ISREG(info.st_mode))
        finally:
            os.close(fd)
        if len(_opened) >= 256:
            _opened.clear()
        _opened[path] = pack
        return pack

    @classmethod
    def from_bytes(cls, data: bytes, path: str = "") -> Pack:
        """The pack whose whole file is ``data``."""
        return cls._read(lambda n, at: data[at: at + n], path, (0, len(data), 0), True)

    @classmethod
    def _read(cls, pread: Callable[[int, int], bytes], path: str, stamp: tuple[int, int, int],
              regular: bool) -> Pack:
        if not regular:
            return cls(path, stamp, b"", 0, "not a regular file")
        try:
            head = pread(_HEADER.size, 0)
            if len(head) < _HEADER.size or head[:8] != MAGIC:
                return cls(path, stamp, b"", 0, "not a triton_dist pack (foreign or truncated header)")
            _, version, count = _HEADER.unpack(head)
            if version != VERSION:
                return cls(path, stamp, b"", 0, f"pack version {version}, this reader knows {VERSION}: "
                                                f"{OTHER_VERSION}")
            if count > MAX_COUNT or _HEADER.size + count * _RECORD.size > stamp[1]:
                return cls(path, stamp, b"", 0, f"truncated: its index of {count} entries is not all there")
            index = pread(count * _RECORD.size, _HEADER.size)
        except OSError as exc:
            return cls(path, stamp, b"", 0, f"unreadable ({exc.strerror or exc})")
        if len(index) != count * _RECORD.size:
            return cls(path, stamp, b"", 0, "truncated while it was read")
        return cls(path, stamp, index, count, None)

    # ------------------------------------------------------------------ reading

    def _record(self, n: int) -> tuple[bytes, int, int, int]:
        return _RECORD.unpack_from(self.index, n * _RECORD.size)

    def find(self, eid: str) -> tuple[int, int, int] | None:
        """(offset, length, CRC) of ``eid``, or None: a bisection of the sorted index."""
        try:
            want = bytes.fromhex(eid)
        except ValueError:
            return None
        lo, hi, size = 0, self.count, _RECORD.size
        while lo < hi:
            mid = (lo + hi) // 2
            key = self.index[mid * size: mid * size + 16]
            if key < want:
                lo = mid + 1
            elif key > want:
                hi = mid
            else:
                return self._record(mid)[1:]
        return None

    def records(self) -> list[tuple[int, int, int]]:
        """(offset, length, CRC) of every entry, in the index's order."""
        return [r[1:] for r in _RECORD.iter_unpack(self.index)]

    def ids(self) -> list[str]:
        return [self.index[n * _RECORD.size: n * _RECORD.size + 16].hex() for n in range(self.count)]

    def __contains__(self, eid: object) -> bool:
        return isinstance(eid, str) and self.find(eid) is not None

    def check(self, blob: bytes, offset: int, length: int, crc: int) -> str | None:
        """Why the bytes read for a record are not the entry it names (None: they are)."""
        if offset + length > self.size or offset < _HEADER.size + self.count * _RECORD.size:
            return "truncated: the entry lies beyond the pack's end" if offset + length > self.size else \
                "corrupt: its index points into the index"
        if len(blob) != length:
            return "truncated while it was read"
        if zlib.crc32(blob) != crc:
            return "corrupt: the entry's bytes do not match the CRC of the pack's index"
        return None

    def slice(self, data: bytes | None, eid: str) -> tuple[bytes | None, str | None]:
        """(the bytes of ``eid`` in ``data``, the whole file, or None; why not)."""
        found = self.find(eid)
        if found is None or data is None:
            return None, "missing" if found is None else "unreadable"
        blob = data[found[0]: found[0] + found[1]]
        why = self.check(blob, *found)
        return (None, why) if why else (blob, None)

    def read(self, eid: str) -> tuple[bytes | None, str | None] | None:
        """None: the pack has no ``eid``; else (its bytes, None) or (None, why they are unusable:
        :data:`GONE` when the pack was removed since it was opened)."""
        if self.problem is not None:
            return None
        found = self.find(eid)
        if found is None:
            return None
        offset, length, crc = found
        if offset + length > self.size:
            return None, "truncated: the entry lies beyond the pack's end"
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                info = os.fstat(fd)
                if (info.st_ino, info.st_size, info.st_mtime_ns) != self.stamp:
                    return Pack.open(self.path).read(eid)  # replaced meanwhile: read the new one
                blob = os.pread(fd, length, offset)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return None, GONE
        except OSError as exc:
            return None, f"unreadable ({exc.strerror or exc})"
        why = self.check(blob, offset, length, crc)
        return (None, why) if why else (blob, None)

    def entries(self, data: bytes | None = None) -> Iterator[tuple[str, bytes | None, str | None]]:
        """(id, bytes or None, why) of every entry, from ``data`` (the whole file) or one read."""
        if self.problem is not None:
            return
        if data is None:
            data = read_all(self.path)
        for n in range(self.count):
            raw, offset, length, crc = self._record(n)
            blob = data[offset: offset + length] if data is not None else b""
            why = self.check(blob, offset, length, crc) if data is not None else "unreadable"
            yield raw.hex(), (None if why else blob), why


def read_all(path: str) -> bytes | None:
    """The whole file at ``path`` (no link followed), None if it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with open(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def vanished(path: str) -> bool:
    """Whether no file (nor link) has the name ``path`` now: a pack a rewrite removed."""
    return not os.path.lexists(path)


#: packs read by this process, by path (see :meth:`Pack.open`)
_opened: dict[str, Pack] = {}
