"""Moving cache entries between machines as one archive file (tar.gz).

Layout of an archive: ``MANIFEST.json`` plus ``<function>/<entry_id>.json`` (and, on request,
``<function>/<entry_id>.log`` and ``<function>/history/<entry_id>.<stamp>.json``). Packed entries
(``_store.packs``) are exported as the loose files they stand for, and imported as loose files.

Import never executes code and never extracts: each member is read into memory from the tar
stream and checked (a regular file, a relative path of the layout above without ``..``, within
the size limits; an entry of the right schema whose id matches its source hash, hardware digest
and key and its file name). Any refused member refuses the whole archive before anything is
written. Entries then go in folder by folder (``_store.folder_writes``): a key's first entry created
in place, one that replaces another under the per-entry lock (the entry it replaces becomes
history, as after a re-tuning); each one whole and synced before its name appears.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import re
import tarfile
import time
import zlib
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from triton_dist import __version__
from triton_dist._store import files as _cache
from triton_dist._store import packfile
from triton_dist._store.admin import HISTORY_RE, ID_RE, entry_problem, iter_entries
from triton_dist._store.check import check_entry
from triton_dist._store.folder_writes import FolderWrites
from triton_dist._store.leftovers import hold, remove_leftovers
from triton_dist._store.packs import canonical, is_packed, load_entry
from triton_dist._store.stopped import Interrupted
from triton_dist.errors import CacheAdminError

__all__ = ["export_archive", "import_archive"]

ARCHIVE_FORMAT = "triton_dist.cache-archive/v1"
MAX_LOG_BYTES = 16 * 2**20
MAX_MEMBERS = 200_000
MAX_TOTAL_BYTES = 2 * 2**30  # what import holds in memory before writing anything


@dataclasses.dataclass
class ArchiveReport:
    archive: str
    root: str
    written: list[str] = dataclasses.field(default_factory=list)
    unchanged: list[str] = dataclasses.field(default_factory=list)
    kept_newer: list[str] = dataclasses.field(default_factory=list)
    skipped: list[dict[str, str]] = dataclasses.field(default_factory=list)
    refused: list[dict[str, str]] = dataclasses.field(default_factory=list)
    dry_run: bool = False
    leftovers_removed: list[str] = dataclasses.field(default_factory=list)
    """export: temporary archives of killed exports to the same path, removed (:func:`_leftovers`)"""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = len(data), 0o644, int(mtime), tarfile.REGTYPE
    tar.addfile(info, io.BytesIO(data))


def export_archive(root: Path, archive: Path, functions: Iterable[str] | None = None, *,
                   history: bool = False, logs: bool = False) -> ArchiveReport:
    """Write the usable entries of ``root`` (of ``functions``, or all) into ``archive``."""
    report = ArchiveReport(str(archive), str(root))
    members: list[tuple[str, bytes, float]] = []
    for path, entry, why in iter_entries(root, functions, history=history):
        if entry is None:
            report.skipped.append({"path": str(path), "why": why or "unreadable"})
            continue
        stands_for = canonical(path)  # a packed entry goes into the archive as its loose file
        rel = stands_for.relative_to(root).as_posix()
        mtime = (path.parent if is_packed(path) else path).stat().st_mtime
        members.append((rel, _cache.dumps_entry(entry).encode(), mtime))
        report.written.append(rel)
        log_path = stands_for.with_suffix(".log")
        if logs and path.parent.name != "history" and log_path.is_file() and not log_path.is_symlink():
            members.append((log_path.relative_to(root).as_posix(), log_path.read_bytes()[:MAX_LOG_BYTES],
                            log_path.stat().st_mtime))
    manifest = {"format": ARCHIVE_FORMAT, "triton_dist": __version__, "created": _cache.utc_now(),
                "entries": len(report.written)}
    archive = Path(archive)
    if archive.is_symlink() or (archive.exists() and not archive.is_file()):
        # the archive is written beside it and renamed over it: a device node or a link there was
        # replaced by a regular file, /dev/stdout or /dev/full as root included (a tester, 2026-12-04)
        kind = "a symbolic link" if archive.is_symlink() else "a directory" if archive.is_dir() else \
            "a device, FIFO or socket"
        raise CacheAdminError(f"cannot write the archive {archive}: it is {kind}, which export would replace "
                              "with a regular file; name a new file or a regular one to overwrite "
                              "(the cache was only read)")
    tmp = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        report.leftovers_removed = [str(path) for path in remove_leftovers(archive)]
        with open(tmp, "wb") as raw:
            hold(raw.fileno())  # while it is written: a later export knows it for a live one's
            # (leftovers.remove_leftovers)
            with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                _add(tar, "MANIFEST.json", (json.dumps(manifest, indent=2) + "\n").encode(), time.time())
                for name, data, mtime in members:
                    _add(tar, name, data, mtime)
            raw.flush()
            os.replace(tmp, archive)
    except OSError as exc:  # where the archive goes, not the cache root: say so (a tester, session 28)
        raise CacheAdminError(f"cannot write the archive {archive}: {type(exc).__name__}: {exc.strerror or exc}. "
                              f"Check the permissions and free space of {archive.parent}, or name an "
                              "ARCHIVE path in a writable directory; the cache was only read") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return report


def _member_kind(name: str) -> tuple[str, str | None]:
    """("entry" | "history" | "log" | "manifest" | "dir", None) or ("", why it is refused)."""
    if not name or "\\" in name or "\x00" in name:
        return "", "an empty name, a backslash or a NUL byte"
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("/"):
        return "", "an absolute path"
    parts = [p for p in path.parts if p != "."]
    if any(p == ".." for p in parts):
        return "", "a path with '..'"
    if parts == ["MANIFEST.json"]:
        return "manifest", None
    if not parts:  # "./" of an archive made with `tar -C root .`
        return "dir", None
    if not parts or any(p != _cache.safe_name(p) or p.startswith(".") for p in parts):
        return "", "a name the cache does not use"
    if len(parts) == 1 or (len(parts) == 2 and parts[1] == "history"):
        return "dir", None
    stem, _, suffix = parts[-1].rpartition(".")
    if len(parts) == 2 and suffix == "json" and ID_RE.match(stem):
        return "entry", None
    if len(parts) == 2 and suffix == "log" and ID_RE.match(stem):
        return "log", None
    if len(parts) == 3 and parts[1] == "history" and suffix == "json" and HISTORY_RE.match(stem):
        return "history", None
    return "", "not a path of the cache layout (<function>/<entry id>.json)"


def _read_members(tar: tarfile.TarFile, report: ArchiveReport) -> list[tuple[str, str, bytes]]:
    members = []
    total = 0
    for count, info in enumerate(tar, 1):
        total += max(0, info.size)
        if count > MAX_MEMBERS or total > MAX_TOTAL_BYTES:
            report.refused.append({"member": info.name, "why": f"the archive has more than {MAX_MEMBERS} "
                                                               f"members or {MAX_TOTAL_BYTES} bytes"})
            break
        kind, why = _member_kind(info.name)
        if why is None and kind == "dir" and not info.isdir():
            why = "a directory name used by something that is not a directory"
        if why is None and kind != "dir" and not info.isfile():
            why = "a link or special file (only regular files are imported)"
        limit = MAX_LOG_BYTES if kind == "log" else _cache.MAX_ENTRY_BYTES
        if why is None and info.size > limit:
            why = f"larger than {limit} bytes"
        if why is not None:
            report.refused.append({"member": info.name, "why": why})
            continue
        if kind == "dir":
            continue
        f = tar.extractfile(info)
        members.append((kind, PurePosixPath(info.name).as_posix(), f.read(limit + 1) if f else b""))
    return members


def _parse_entry(name: str, data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        entry = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"not valid JSON: {type(exc).__name__}"
    why = check_entry(entry) or entry_problem(entry, Path(name))
    return (entry, None) if why is None else (None, why)


def import_archive(root: Path, archive: Path, *, dry_run: bool = False, replace: bool = False,
                   logs: bool = False, history: bool = False) -> ArchiveReport:
    """Check every member of ``archive``, then write its entries under ``root``.

    An entry equal to the one already there is left alone; a local entry that is newer than the
    archive's is kept unless ``replace``. Logs and history members go in only when asked.
    Raises CacheAdminError (nothing written) when any member is refused.
    """
    report = ArchiveReport(str(archive), str(root), dry_run=dry_run)
    if Path(archive).exists() and not Path(archive).is_file():  # /dev/zero spun for ever (a tester)
        raise CacheAdminError(f"cannot read the archive {archive}: it is not a regular file (a device, FIFO, "
                              "socket or directory); `export` writes a tar.gz file")
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _read_members(tar, report)
    except tarfile.ReadError as exc:  # tarfile lists every compression it tried: say what it means
        raise CacheAdminError(f"cannot read the archive {archive}: it is not a tar file (`export` writes "
                              f"a tar.gz; {str(exc).splitlines()[0].rstrip(':')})") from exc
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise CacheAdminError(f"cannot read the archive {archive}: {type(exc).__name__}: {exc}") from exc
    entries: list[tuple[str, str, dict[str, Any]]] = []
    texts: list[tuple[str, bytes]] = []
    names = {name for kind, name, _ in members if kind == "entry"}
    for kind, name, data in members:
        if kind == "manifest":
            try:
                manifest = json.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                manifest = None
            if not isinstance(manifest, dict) or manifest.get("format") != ARCHIVE_FORMAT:
                report.refused.append({"member": name, "why": f"not a {ARCHIVE_FORMAT} manifest"})
        elif kind in ("entry", "history"):
            entry, why = _parse_entry(name, data)
            if why is not None:
                report.refused.append({"member": name, "why": why})
            elif kind == "entry" or history:
                entries.append((kind, name, entry))  # type: ignore[arg-type]
            else:
                report.skipped.append({"member": name, "why": "history (import it with --history)"})
        elif kind == "log":
            if not logs:
                report.skipped.append({"member": name, "why": "a log (import logs with --logs)"})
            elif re.sub(r"\.log$", ".json", name) not in names:
                report.refused.append({"member": name, "why": "a log without its entry in the archive"})
            else:
                texts.append((name, data))
    if report.refused:
        lines = "\n  ".join(f"{r['member']}: {r['why']}" for r in report.refused[:20])
        raise CacheAdminError(f"refusing the archive {archive}: nothing was imported; "
                              f"{len(report.refused)} member(s) refused:\n  {lines}", report=report.to_dict())
    if not any(kind in ("entry", "history") for kind, _, _ in members):
        raise CacheAdminError(_no_entries(archive, members), report=report.to_dict())
    # plan every write before the first one (all-or-nothing, --dry-run included): what each
    # entry becomes, its text, and that every directory is inside the root and writable
    root = Path(root)
    packed: dict[Path, bool] = {}  # whether a function folder has packs, looked at once
    plan = [step for kind, name, entry in entries
            if (step := _plan_entry(root, kind, name, entry, report, replace, packed)) is not None]
    plan += [("log", name, data.decode("utf-8", errors="replace"), None) for name, data in texts]
    report.written = [name for _, name, _, _ in plan]
    if dry_run:
        return report
    _check_writable(root, archive, {(root / name).parent for _, name, _, _ in plan})
    done = 0
    writes = FolderWrites(root)  # a folder's descriptor, packs and key log once (_store.folder_writes)
    left: set[str] = set()  # entries another process wrote since the plan, left as they are
    try:
        for kind, name, text, entry in plan:
            path = root / name
            if kind == "entry" and entry is not None:
                # the rule asked again, under the entry's lock, of an entry found there now
                verdict = writes.entry(path, text, entry,
                                       functools.partial(_keep_local, text=text, entry=entry, replace=replace))
                if verdict is not None:
                    getattr(report, verdict).append(name)
                    left.add(name)
            elif kind == "history":
                _cache.atomic_write_text(path, text)
            else:
                with _cache.locked(path):
                    _cache.atomic_write_text(path, text)
            done += 1
    except KeyboardInterrupt:
        raise Interrupted(f"imported {done} of {len(plan)} file(s) of {archive}; those are whole (each written "
                          "atomically), run the same command again to finish") from None
    except OSError as exc:
        raise CacheAdminError(f"import of {archive} stopped after {done} of {len(plan)} file(s): "
                              f"{exc}. The files written are complete entries; free space or fix "
                              "the permissions and import again.", report=report.to_dict()) from None
    finally:
        writes.close()
        if left:
            report.written = [name for name in report.written if name not in left]
    return report


def _no_entries(archive: Path, members: list[tuple[str, str, bytes]]) -> str:
    """One line: an archive without one entry would import nothing and look like success."""
    names = [name for _, name, _ in members]
    what = (f"it holds only {', '.join(names[:3])}" + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            if names else "it holds no file")
    return (f"the archive {archive} holds no cache entries ({what}; an entry is "
            "<function>/<entry id>.json): nothing to import. Make one with `python -m "
            "triton_dist.cache export ARCHIVE` on a machine whose cache has entries.")


def _check_writable(root: Path, archive: Path, directories: set[Path]) -> None:
    """Every directory the import writes into exists, is inside ``root`` and takes a file."""
    try:
        for directory in sorted(directories):
            _cache.ensure_private_dir(directory, root)
            probe = directory / f".import-probe.{os.getpid()}.tmp"
            probe.write_bytes(b"")
            probe.unlink()
    except OSError as exc:
        raise CacheAdminError(f"refusing the archive {archive}: nothing was imported; cannot write "
                              f"under {root}: {exc}. Fix the permissions or point --dir at a "
                              "writable cache root.") from None


def _plan_entry(root: Path, kind: str, name: str, entry: dict[str, Any], report: ArchiveReport,
                replace: bool, packed: dict[Path, bool]) -> tuple[str, str, str, dict[str, Any] | None] | None:
    """(kind, name, text, entry) to write, or None (unchanged or newer locally: reported).
    ``packed``: whether each folder has packs, filled as folders come (listed once, not per entry)."""
    path = root / name
    text = _cache.dumps_entry(entry)
    if kind == "history":  # history files are never rewritten: write it if it is not there
        if path.exists():
            report.unchanged.append(name)
            return None
        return kind, name, text, entry
    if _cache.entry_path(root, entry["function"], entry["id"]) != path:
        raise CacheAdminError(f"{name}: the entry belongs at {_cache.entry_path(root, entry['function'], entry['id'])}")
    if path.parent not in packed:
        packed[path.parent] = bool(packfile.pack_paths(path.parent))
    local = None
    if packed[path.parent] or os.path.lexists(path):
        local, _, _ = load_entry(root, entry["function"], entry["id"])  # loose, else packed
    verdict = _keep_local(local, text, entry, replace)
    if verdict is not None:
        getattr(report, verdict).append(name)
        return None
    return kind, name, text, entry


def _keep_local(local: dict[str, Any] | None, text: str, entry: dict[str, Any], replace: bool) -> str | None:
    """"unchanged" or "kept_newer" where the local entry ``local`` stays (identical to the archive's
    ``entry`` of text ``text``, or newer and not ``replace``), else None: the archive's is written."""
    if local is not None and _cache.dumps_entry(local) == text:
        return "unchanged"
    if local is not None and not replace and str(local.get("created", "")) > str(entry.get("created", "")):
        return "kept_newer"
    return None
