"""``verify``: every file of a cache root classified, problems being what the tuner ignores.

Loose entries, history, logs, leftovers of interrupted writes, compiled winners, and packs
(``_store.packfile``): a pack that cannot be read is one problem; each entry of a readable pack
is checked as a loose file is (the entry check, its id, its function directory) and is ``ok``
when its function directory serves it, ``history`` when a loose file or a newer pack shadows it.
A file of ``history/`` that is not a usable entry is reported, ``archived``, but is no problem.
See docs/cache.md.
"""

from __future__ import annotations

import dataclasses
import json
import stat
from collections.abc import Iterator
from pathlib import Path

from triton_dist._store import files as _cache
from triton_dist._store import keylog, packfile
from triton_dist._store import packs as _packs
from triton_dist._store.admin import entry_problem
from triton_dist._store.check import check_entry, other_version
from triton_dist._store.denied import denied, why_denied
from triton_dist._store.stopped import Interrupted

__all__ = ["Finding", "verify"]


@dataclasses.dataclass
class Finding:
    path: str
    kind: str
    """ok, history, log, leftover, binaries, corrupt, foreign, invalid, inconsistent, unreadable, symlink"""
    detail: str = ""
    archived: bool = False
    """a file of ``history/`` that is not a usable entry (``kind`` says how): information, not a
    problem (:func:`_classify_history`)"""

    @property
    def problem(self) -> bool:
        return not self.archived and self.kind not in ("ok", "history", "log", "leftover", "binaries")


def _classify_json(path: Path, root: Path, kind_ok: str) -> Finding:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read forever
            return Finding(str(path), "foreign", "not a regular file")
        if info.st_size > _cache.MAX_ENTRY_BYTES:  # never read a 30 GB (sparse) file into memory
            return Finding(str(path), "invalid", f"it is larger than {_cache.MAX_ENTRY_BYTES} bytes "
                                                 f"({info.st_size}); the tuner ignores it")
        raw = path.read_bytes()  # at most MAX_ENTRY_BYTES, but for a file growing meanwhile
    except PermissionError as exc:  # its mode or owner, not its bytes (prune keeps it)
        return Finding(str(path), "unreadable", why_denied(exc))
    except OSError as exc:
        return Finding(str(path), "unreadable", f"{type(exc).__name__}: {exc.strerror or exc}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Finding(str(path), "corrupt", f"not valid JSON (truncated?): {type(exc).__name__}: {str(exc)[:120]}")
    why = check_entry(data)
    if why is not None:
        kind = "foreign" if why.startswith("not a ") else "invalid"
        return Finding(str(path), kind, why)
    _, why = _cache.load_json(path, root)  # the tuner's own reading (size limit, location)
    if why is not None:
        return Finding(str(path), "invalid", why)
    why = entry_problem(data, path)
    if why is not None:
        return Finding(str(path), "inconsistent", why)
    return Finding(str(path), kind_ok)


def _classify_history(path: Path, root: Path) -> Finding:
    """A history file: the entry another one replaced, kept as an archive that no reader serves.
    One that is not a usable entry (corrupt bytes the tuner replaced: they go to history, so that
    nothing is lost) is reported but is no problem: otherwise a cache that healed itself failed
    ``verify`` until someone cleared its history (a tester, 2026-12-04)."""
    finding = _classify_json(path, root, "history")
    if finding.problem:
        finding.archived = True
    return finding


def _listed(folder: Path) -> tuple[list[Path], Finding | None]:
    """The folder's entries, sorted, or the finding that it cannot be listed."""
    try:
        return sorted(folder.iterdir()), None
    except OSError as exc:
        return [], Finding(str(folder), "unreadable", f"cannot list it: {exc.strerror or exc}")


def _walk(directory: Path, root: Path, depth: int) -> Iterator[Finding]:
    """Findings for everything under one directory of the cache (depth 0: the root)."""
    children, unreadable = _listed(directory)
    if unreadable is not None:
        yield unreadable
        return
    for path in children:
        name = path.name
        if path.is_symlink() and not _cache._inside(path, root):
            yield Finding(str(path), "symlink", "a symbolic link leading outside the cache root; "
                                                "the tuner ignores it")
        elif path.is_symlink() and not path.exists():
            yield Finding(str(path), "symlink", "a broken symbolic link")
        elif path.is_symlink() and path.is_dir():  # never walked: its files are another folder's
            yield Finding(str(path), "symlink", f"a symbolic link to the folder {path.resolve()}, which is "
                                                "checked under its own name; remove the link itself "
                                                f"(`rm {path}`), not the files it shows")
        elif name.startswith(".") and name.endswith(".tmp"):
            yield Finding(str(path), "leftover", "temporary file of an interrupted write")
        elif path.is_dir():
            if depth == 0 or (depth == 1 and name in ("history", ".locks", "binaries", keylog.DIR_NAME)):
                yield from _walk(path, root, depth + 1)
            elif depth == 1 and name == packfile.DIR_NAME:
                yield from _walk_packs(path, root)
            else:
                yield Finding(str(path), "foreign", "unexpected directory in the cache")
        elif directory.name == ".locks" and name.endswith(".lock"):
            continue
        elif depth == 2 and directory.name == keylog.DIR_NAME and name == keylog.LOG_NAME:
            continue  # which ids are for which key (``_store.keylog``): bookkeeping
        elif depth == 1 and name.endswith(".json"):
            yield _classify_json(path, root, "ok")
        elif depth == 2 and directory.name == "history" and name.endswith(".json"):
            yield _classify_history(path, root)
        elif depth == 2 and directory.name == "binaries" and name.endswith(".json"):
            yield Finding(str(path), "binaries")  # compiled winners a campaign ships (ray_runner.binaries)
        elif depth == 1 and name.endswith(".log"):
            yield Finding(str(path), "log")
        else:
            yield Finding(str(path), "foreign", "not a file the cache writes")


def verify(root: Path) -> list[Finding]:
    """Every file of the cache, classified; problems are what ``verify`` exits non-zero on."""
    if not root.exists():
        return []
    if not root.is_dir():
        return [Finding(str(root), "foreign", "the cache root is not a directory")]
    findings: list[Finding] = []
    try:
        findings.extend(_walk(root, root, 0))
    except KeyboardInterrupt:
        raise Interrupted(f"checked {len(findings)} file(s) before it, no verdict (it only reads the cache: "
                          "nothing changed)") from None
    return findings


def _walk_packs(folder: Path, root: Path) -> Iterator[Finding]:
    """Findings for a function's ``packs`` directory: each pack and each of its entries. A pack
    replaced (a prune, a seeding) between the listing and its reading is no finding: the folder
    is listed again (``_store.packs.settled``)."""
    yield from _packs.settled(lambda strict: list(_pack_findings(folder, root, strict)))


def _pack_findings(folder: Path, root: Path, strict: bool) -> Iterator[Finding]:
    children, unreadable = _listed(folder)
    if unreadable is not None:
        yield unreadable
        return
    if not _cache._inside(folder, root):
        yield Finding(str(folder), "symlink", "a packs directory leading outside the cache root; the tuner ignores it")
        return
    served = {(str(pack.path), eid) for pack, eid in _packs.packed_ids(folder.parent, root)}
    for path in children:
        name = path.name
        if name.startswith(".") and name.endswith(".tmp"):
            yield Finding(str(path), "leftover", "temporary file of an interrupted write")
        elif path.is_symlink() or not packfile.NAME_RE.match(name):
            yield Finding(str(path), "foreign", "not a pack the cache writes (<seq>-<digest16>.pack, no link)")
        else:
            yield from _classify_pack(path, served, strict)


def _classify_pack(path: Path, served: set[tuple[str, str]], strict: bool) -> Iterator[Finding]:
    pack = packfile.Pack.open(path)
    if strict and pack.gone:
        raise _packs.Vanished(str(path))
    if denied(pack.problem):
        yield Finding(str(path), "unreadable", f"{pack.problem}; the tuner ignores every entry of it")
        return
    if pack.problem is not None:
        kind = "foreign" if "not a triton_dist pack" in pack.problem or other_version(pack.problem) else "corrupt"
        yield Finding(str(path), kind, f"{pack.problem}; the tuner ignores every entry of it")
        return
    data = _packs.whole(pack, strict)
    for eid in pack.ids():
        where = path / f"{eid}.json"
        blob, why = pack.slice(data, eid)
        if blob is None:
            yield Finding(str(where), "corrupt", f"{why}; the tuner ignores it")
            continue
        entry, why = _cache.parse_entry(blob)
        if entry is None:
            kind = "corrupt" if why and why.startswith("unreadable or not JSON") else \
                "foreign" if why and why.startswith("not a ") else "invalid"
            yield Finding(str(where), kind, str(why))
            continue
        why = entry_problem(entry, where)
        if why is not None:
            yield Finding(str(where), "inconsistent", why)
        else:
            yield Finding(str(where), "ok" if (str(path), eid) in served else "history")
