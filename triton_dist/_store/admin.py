"""What the cache command line does to a cache root: list, find and prune entries (walking the
root and checking an entry's consistency: :mod:`triton_dist._store.walk`).

Everything here reads JSON only and never executes code. Removing an entry takes the same
per-entry lock that writers take, so a prune never races a tuning that writes the same entry.
See docs/cache.md.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as _dt
import functools
import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import keylog as _keylog
from triton_dist._store import packfile as _packfile
from triton_dist._store import packs as _packs
from triton_dist._store.check import other_version
from triton_dist._store.denied import denied
from triton_dist._store.stopped import Interrupted
from triton_dist._store.walk import (
    HISTORY_RE,
    _packed,
    _shadowed_unusable,
    age_s,
    entry_problem,
    function_dirs,
    iter_entries,
    unreadable_dirs,
)
from triton_dist._store.walk import ID_RE as ID_RE  # importable here, as before
from triton_dist.errors import CacheAdminError

__all__ = ["Removals", "config_fields", "entry_problem", "find_entry", "list_entries", "prune", "unreadable_dirs",
           "varying_fields"]

STALE_TMP_S = 3600.0


def config_fields(encoded: Any) -> dict[str, Any]:
    """An encoded config as flat ``{field: encoded value}``; a triton.Config's kwargs and
    attributes become ``<name>.<field>`` (``cfg.BLOCK``, ``cfg.num_warps``)."""
    if not isinstance(encoded, dict):
        return {"": encoded}
    flat: dict[str, Any] = {}
    for name, value in encoded.items():
        fields = value.get("triton.Config") if isinstance(value, dict) and len(value) == 1 else None
        if not isinstance(fields, dict):
            flat[str(name)] = value
            continue
        kwargs = fields.get("kwargs")
        pairs = kwargs.get("dict") if isinstance(kwargs, dict) else None
        for pair in pairs if isinstance(pairs, list) else []:
            if isinstance(pair, list) and len(pair) == 2:
                flat[f"{name}.{pair[0]}"] = pair[1]
        flat.update((f"{name}.{attr}", v) for attr, v in fields.items() if attr != "kwargs")
    return flat


def varying_fields(configs: Iterable[Any]) -> list[str]:
    """The fields (:func:`config_fields`) whose value differs between ``configs``: what decides
    between candidates, and what ``ls`` shows of a best config (issue 18 item 9)."""
    flats = [config_fields(c) for c in configs]
    names = dict.fromkeys(f for flat in flats for f in flat)
    return [f for f in names
            if len({json.dumps(flat[f], sort_keys=True) if f in flat else None for flat in flats}) > 1]


def list_entries(root: Path,
                 functions: Iterable[str] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(one summary per usable entry, unusable files with why), for ``ls``."""
    rows, bad = [], []
    now = time.time()
    for path, entry, why in iter_entries(root, functions):
        if entry is None:
            bad.append({"path": str(path), "why": why or "unusable"})
            continue
        history = _packs.canonical(path).parent / "history"
        n_history = len(list(history.glob(f"{entry['id']}.*.json"))) if history.is_dir() else 0
        rows.append({
            "function": entry["function"], "id": entry["id"], "path": str(path), "key": entry["key"],
            "best": entry["best"].get("config"), "best_index": entry["best"].get("index"),
            "best_time_ms": entry["best"].get("time_ms"), "default_time_ms": entry.get("default_time_ms"),
            "created": entry.get("created"), "age_s": age_s(entry, now),
            "hardware_digest": entry["hardware"].get("digest"), "hardware": entry["hardware"],
            "source_hash": entry["source_hash"], "versions": entry["versions"],
            "world_size": entry.get("world_size"), "candidates": len(entry["candidates"]),
            "failed": sum(1 for c in entry["candidates"] if isinstance(c, dict) and c.get("error")),
            "varying": varying_fields(c.get("config") for c in entry["candidates"]),
            "history": n_history,
        })
    return rows, bad


def find_entry(root: Path, spec: str) -> Path:
    """An entry by path, by id, by unique id prefix, or by ``function/id-prefix``."""
    as_path = Path(spec).expanduser()
    try:
        if as_path.is_file() or (_packs.is_packed(as_path) and as_path.parent.is_file()):
            return as_path
    except OSError:  # a name too long for a file (ENAMETOOLONG): not a file; told so below (a tester)
        pass
    function, _, prefix = spec.rpartition("/")
    prefix = prefix.removesuffix(".json").lower()
    if not prefix or not re.fullmatch(r"[0-9a-f.tz-]+", prefix):
        raise CacheAdminError(f"{spec!r} is neither a file nor an entry id (prefix); "
                              "`ls` lists the entries and their ids.")
    current, older = [], []
    for directory in function_dirs(root, [function] if function else None):
        current += [p for p in _current(directory, root) if p.stem.lower().startswith(prefix)]
        older += [p for p in (directory / "history").glob("*.json") if p.stem.lower().startswith(prefix)]
    matches = current or older
    if not matches and function:
        raise CacheAdminError(_not_under(root, function, prefix))
    if not matches:
        raise CacheAdminError(f"no entry under {root} has an id starting with {prefix!r}; "
                              "`ls` lists the entries and their ids.")
    if len(matches) > 1:
        shown = "\n  ".join(str(p) for p in sorted(matches)[:10])
        raise CacheAdminError(f"{spec!r} matches {len(matches)} entries; give more of the id:\n  {shown}")
    return matches[0]


def _current(directory: Path, root: Path) -> list[Path]:
    """The paths of the entries ``directory`` serves: its ``*.json`` files and packed entries."""
    packed = [Path(pack.path) / f"{eid}.json" for pack, eid in _packs.packed_ids(directory, root)]
    return list(directory.glob("*.json")) + packed


def _not_under(root: Path, function: str, prefix: str) -> str:
    """Why ``function/prefix`` names nothing, and where that id is if another function has it."""
    elsewhere = sorted(p for d in function_dirs(root) for p in _current(d, root) if p.stem.lower().startswith(prefix))
    where = f"no entry of {function!r} under {root} has an id starting with {prefix!r}"
    if not (root / _cache.safe_name(function)).is_dir():
        names = [d.name for d in function_dirs(root)]
        where = (f"there is no function {function!r} under {root}"
                 + (f" (its functions: {', '.join(names)})" if names else ""))
    if elsewhere:
        found = ", ".join(f"{_packs.canonical(p).parent.name}/{p.stem[:12]}" for p in elsewhere[:5])
        return f"{where}; the id is under another function: {found}. Give that, or the id alone."
    return f"{where}; `ls` lists the entries and their ids."


# ---------------------------------------------------------------------------- prune

@dataclasses.dataclass
class Removal:
    path: str
    reason: str
    done: bool = False
    error: str | None = None


class Removals(list[Removal]):
    """What :func:`prune` removed (or would), in ``kept`` what ``invalid`` left because another
    triton_dist version wrote it (without ``other_versions``), and in ``unreadable`` the files
    it could not judge because this user may not read them (``denied``: kept, whatever the
    criteria; ``reason`` says why)."""

    def __init__(self, removals: Iterable[Removal] = (), kept: Iterable[Removal] = (),
                 unreadable: Iterable[Removal] = ()) -> None:
        super().__init__(removals)
        self.kept = list(kept)
        self.unreadable = list(unreadable)


def _history_age_s(path: Path, now: float) -> float | None:
    match = HISTORY_RE.match(path.stem)
    if match:  # the time it became history: the stamp write_entry gave it
        stamp = _dt.datetime.strptime(match.group(2), "%Y%m%dT%H%M%S%fZ").replace(tzinfo=_dt.timezone.utc)
        return now - stamp.timestamp()
    entry, _ = _cache.load_json(path)
    return age_s(entry, now) if entry else None


def _names(directory: Path) -> list[str]:
    """The names in ``directory`` (none if it cannot be listed)."""
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _starting_with(names: list[str], prefix: str) -> list[str]:
    """The names of the sorted ``names`` that start with ``prefix``: a bisection, not a scan."""
    start = bisect.bisect_left(names, prefix)
    end = start
    while end < len(names) and names[end].startswith(prefix):
        end += 1
    return names[start:end]


def _gone(path: Path) -> bool:
    """Whether nothing is at ``path`` any more (not a link either)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _remove(removal: Removal, path: Path, lock: bool) -> None:
    try:
        if lock:  # its lock file goes with it (taken and removed while held: files.locked)
            with _cache.locked(path, drop=True):
                path.unlink(missing_ok=True)
        else:
            path.unlink(missing_ok=True)
        removal.done = True
    except OSError as exc:
        removal.error = f"{type(exc).__name__}: {exc}"
    except KeyboardInterrupt:  # a stop that lands once the file is gone (or while its lock goes): counted
        removal.done = _gone(path)
        raise


def prune(root: Path, *, older_than_days: float | None = None, keep_hardware: str | None = None,
          history: bool = False, invalid: bool = False, other_versions: bool = False,
          dry_run: bool = False, functions: Iterable[str] | None = None) -> Removals:
    """Remove entries (with their logs) and history files that match any given criterion; a real
    prune then compacts the key log (``_store.keylog``) of each function folder it removed
    entries from, to the lines of the entries left.

    ``older_than_days``: entries and history older than that; ``keep_hardware``: a hardware
    digest, entries and history for any other one go; ``history``: every history file;
    ``invalid``: files that ``verify`` reports as corrupt, foreign or inconsistent, but for
    those another triton_dist version wrote (``check.other_version``: in a root two versions
    share they are that version's entries), which are kept and listed in ``kept``;
    ``other_versions``: those. Temporary files of interrupted writes older than an hour always go.
    A file this user may not read (``denied``: its permissions, not its bytes; another user's
    in a shared root) is never removed on what it holds: it is kept and listed in ``unreadable``.
    """
    now = time.time()
    limit = None if older_than_days is None else older_than_days * 86400.0
    plan: list[tuple[Removal, Path, bool]] = []
    kept: list[Removal] = []
    unreadable: list[Removal] = []
    judging = invalid or other_versions or limit is not None or keep_hardware is not None

    def unusable(path: Path, why: str | None) -> list[str]:
        if denied(why):  # not known to be invalid, old or another's hardware: maybe a user's hit
            if judging:
                unreadable.append(Removal(str(path), str(why)))
            return []
        if not other_version(why):
            return [f"unusable: {why}"] if invalid else []
        if not other_versions and invalid:
            kept.append(Removal(str(path), f"another version's: {why}"))
        return [f"another version's: {why}"] if other_versions else []

    def reasons(path: Path, entry: dict[str, Any] | None, age: float | None, why: str | None) -> list[str]:
        out = []
        if entry is None:
            return unusable(path, why)
        if limit is not None and age is not None and age > limit:
            out.append(f"older than {older_than_days:g} days")
        if keep_hardware is not None and entry["hardware"].get("digest") != keep_hardware:
            out.append(f"other hardware ({entry['hardware'].get('digest')})")
        return out

    def a_folder(path: Path) -> bool:  # a directory where a file belongs: never removed (verify: by hand)
        return path.is_dir() and not path.is_symlink()

    for directory in function_dirs(root, functions):
        names = _names(directory)  # listed once: a glob per entry made prune quadratic (a tester)
        logs = sorted(n for n in names if n.endswith(".log"))
        for path in sorted(directory / n for n in names if n.endswith(".json")):
            if a_folder(path):
                continue
            entry, why = _cache.load_json(path, root)
            problem = entry_problem(entry, path) if entry is not None else None
            if problem:
                entry, why = None, problem
            found = reasons(path, entry, age_s(entry, now) if entry else None, why)
            if found:
                plan.append((Removal(str(path), "; ".join(found)), path, True))
                for log_path in [directory / n for n in _starting_with(logs, path.stem)]:
                    plan.append((Removal(str(log_path), f"log of {path.name}"), log_path, False))
        for path, entry, why in _packed(directory, root):  # removed by rewriting their pack
            found = reasons(path, entry, age_s(entry, now) if entry else None, why)
            if found:  # (an unreadable pack itself, with --invalid: removed as a file)
                plan.append((Removal(str(path), "; ".join(found)), path, _packs.is_packed(path)))
        for path, why in _shadowed_unusable(directory, root) if invalid or other_versions else ():
            for reason in unusable(path, why):
                plan.append((Removal(str(path), f"{reason} (a loose file serves its id)"), path, True))
        for path in sorted((directory / "history").glob("*.json")):
            if a_folder(path):
                continue
            entry, why = _cache.load_json(path, root)
            found = ["history"] if history else reasons(path, entry, _history_age_s(path, now), why)
            if found:
                plan.append((Removal(str(path), "; ".join(found)), path, False))
        for path in [p for d in (directory, directory / "history", directory / _packfile.DIR_NAME,
                                 directory / _keylog.DIR_NAME) for p in sorted(d.glob(".*.tmp"))]:
            try:
                stale = now - path.stat().st_mtime > STALE_TMP_S
            except OSError:
                continue
            if stale:
                plan.append((Removal(str(path), "temporary file of an interrupted write"), path, False))
    if not dry_run:
        try:
            _carry_out(root, plan, functions)
        except KeyboardInterrupt:
            done = sum(removal.done for removal, _, _ in plan)
            raise Interrupted(f"removed {done} of {len(plan)} file(s) it had planned to; run the same "
                              "command again to remove the rest") from None
    return Removals((removal for removal, _, _ in plan), kept, unreadable)


LOCK_RE = re.compile(r"^([0-9a-f]{32})\.lock$")


def _drop_orphan_locks(directory: Path, root: Path) -> None:
    """Remove the lock files of entries that are gone (earlier prunes left one per removed entry),
    each only if no one holds it (``files.drop_free_lock``). Bookkeeping: not listed as removals."""
    ids = [m.group(1) for n in _names(directory / ".locks") if (m := LOCK_RE.match(n))]
    if not ids:
        return
    live = {n[:-5] for n in _names(directory) if n.endswith(".json")}
    live.update(eid for _, eid in _packs.packed_ids(directory, root))
    for eid in ids:
        if eid not in live:
            _cache.drop_free_lock(directory / f"{eid}.json")


def _carry_out(root: Path, plan: list[tuple[Removal, Path, bool]], functions: Iterable[str] | None) -> None:
    """Remove what :func:`prune` planned (loose files one by one, packed entries per pack)."""
    packed: dict[Path, list[tuple[Removal, str]]] = {}
    for removal, path, lock in plan:
        if _packs.is_packed(path):
            packed.setdefault(_packs.canonical(path).parent, []).append((removal, path.stem))
        else:
            _remove(removal, path, lock)
    for directory, removals in packed.items():
        _remove_packed(root, directory, removals)
    touched = {_packs.canonical(path).parent if _packs.is_packed(path) else path.parent
               for removal, path, _ in plan if removal.done and path.suffix == ".json"}
    for directory in function_dirs(root, functions):
        _drop_orphan_locks(directory, root)
        if directory in touched:
            _keylog.compact(directory, functools.partial(_live_ids, directory, root))


def _live_ids(directory: Path, root: Path) -> set[str]:
    """The ids of the entries ``directory`` still has: loose files (listed first: a packer writes
    its pack before removing the loose files), then packed entries."""
    live = {n[:-5] for n in _names(directory) if n.endswith(".json")}
    live.update(eid for _, eid in _packs.packed_ids(directory, root))
    return live


def _remove_packed(root: Path, directory: Path, removals: list[tuple[Removal, str]]) -> None:
    """Remove packed entries: their packs are rewritten without them, under the function's pack
    lock (``_store.packs.remove``)."""
    try:
        _packs.remove(root, directory, [eid for _, eid in removals])
    except OSError as exc:
        for removal, _ in removals:
            removal.error = f"{type(exc).__name__}: {exc}"
        return
    except KeyboardInterrupt:  # stopped in the middle (or right after a pack was rewritten): what no pack holds went
        held = {eid for pack in _packs.usable_packs(directory, root) for eid in pack.ids()}
        for removal, eid in removals:
            removal.done = eid not in held
        raise
    for removal, _ in removals:
        removal.done = True
