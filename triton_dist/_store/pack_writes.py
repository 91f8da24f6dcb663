"""Writing a function's packs: seeding one (:func:`install`) and taking entries out of them
(:func:`remove`), both under the function's pack lock (``.locks/packs.lock``).

The order of the steps is what lets readers go without a lock (``_store.packs``, the one lookup):
a pack is complete when its name appears (:func:`_write_pack`), a rewrite writes the new pack
before it removes the old one (:func:`_rewrite_without`), and seeding writes its pack before
older packs lose its ids, so at every step some pack (or loose file) serves each id. Seeding
moves the bytes it replaces (an older pack's copy, a differing loose file) to history, as a
replaced entry's are. A Ctrl-C or SIGTERM during a replacement leaves one of the two packs.

``_store.packs`` re-exports :func:`install` and :func:`remove` (seeding and ``cache prune`` call
them there); it reads loose files as :func:`_read_plain` does (:data:`NEVER`: not taken as they are).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from triton_dist._store import files as _cache
from triton_dist._store import packfile
from triton_dist._store.packfile import DIR_NAME, Pack
from triton_dist._store.stopped import held

__all__ = ["NEVER", "install", "remove"]

#: what ``_store.packs.Served.digest`` answers for an id whose bytes no reader would take as they
#: are (and what :func:`_read_plain` reads of a link or anything else that is not a plain file)
NEVER = b""


def _write_pack(folder: Path, name: str, data: bytes, replaces: Path | None = None) -> None:
    """Put a pack's bytes at ``folder/name``, complete when the name appears (no fsync: the
    caller flushes, seeding's one ``syncfs``), and remove the pack it ``replaces`` with the same
    stop held (``stopped.held``): a Ctrl-C or SIGTERM leaves one of the two, never both."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        with held():
            os.replace(tmp, folder / name)
            if replaces is not None:
                replaces.unlink(missing_ok=True)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _rewrite_without(pack: Pack, ids: set[str], data: bytes | None = None) -> dict[str, bytes]:
    """Replace ``pack`` by one without ``ids`` (same ``seq``; removed when nothing is left);
    the bytes it held for them, by id."""
    kept, dropped = [], {}
    for eid, blob, _why in pack.entries(data):
        if eid in ids:
            if blob is not None:
                dropped[eid] = blob
        elif blob is not None:
            kept.append((eid, blob))
    path = Path(pack.path)
    if not kept:
        path.unlink(missing_ok=True)
        return dropped
    new = packfile.build(kept)
    name = packfile.pack_name(int(path.name[:8]), new)
    if name != path.name:
        _write_pack(path.parent, name, new, replaces=path)
    return dropped


def remove(root: Path, directory: Path, ids: Iterable[str]) -> list[str]:
    """Take ``ids`` out of every pack of the function ``directory`` (under its pack lock): the
    ids that were packed. Removing a packed entry rewrites its pack (``cache prune``)."""
    wanted, done = set(ids), set()
    with _cache.locked(directory / DIR_NAME):
        for path in packfile.pack_paths(directory):
            pack = Pack.open(path)
            hit = {i for i in wanted if i in pack}
            if hit:
                done |= set(_rewrite_without(pack, hit))
    return sorted(done)


def install(root: Path, folder: str, data: bytes) -> tuple[str, int, int, list[str]]:
    """Seed the pack ``data`` (``packfile.build``) into ``root/folder`` (made if need be):
    (the SHA-256 of the pack as read back from the disk, hex; its entries; how many of them were
    served with other bytes before, or not at all; errors).

    Under the function's pack lock: a byte-identical pack already there is left alone (renamed to
    be the newest when it is not), else ``data`` becomes the newest pack; then the other packs
    lose the ids (the bytes they served, when they differ, go to history, as a replaced entry
    does): in this order a reader finds every id at every moment, in the pack that served it
    before, then in this one, and a seeding stopped in between leaves both. A loose
    file of one of the ids that differs goes to history too (a link is removed); an identical one
    is left, as it serves the same bytes. So the node serves the pack's bytes for every id, and
    seeding the same entries again changes nothing and adds no history."""
    directory = root / folder
    _cache.ensure_private_dir(directory / DIR_NAME, root)
    new = _Incoming(data)
    errors: list[str] = []
    with _cache.locked(directory / DIR_NAME):
        paths = packfile.pack_paths(directory)
        same = next((p for p in paths if p.endswith(f"-{new.sha[:16]}.pack") and packfile.read_all(p) == data), None)
        top = max((int(Path(p).name[:8]) for p in paths), default=0)
        name = Path(same).name if same is not None else f"{top + 1:08d}-{new.sha[:16]}.pack"
        if same is None:
            _write_pack(directory / DIR_NAME, name, data)
        elif paths[0] != same:
            name = f"{top + 1:08d}-{new.sha[:16]}.pack"
            os.replace(same, directory / DIR_NAME / name)
        before = _take_ids(paths, new, same)
    loose = _loose_shadows(root, directory, new, errors)
    for eid, blob in before.items():
        if eid not in loose and blob != new.blob(eid):
            _to_history(root, directory, eid, blob, errors)
    changed = new.pack.count if same is None and not before and not loose else 0
    for eid in new.ids if not changed else ():  # what served it before: a loose file, a newer pack, this one
        old = loose.get(eid, before.get(eid))
        changed += (same is None or eid in loose or eid in before) and (old is None or old != new.blob(eid))
    on_disk = data if same == str(directory / DIR_NAME / name) else packfile.read_all(str(directory / DIR_NAME / name))
    if on_disk is None:
        errors.append(f"{directory / DIR_NAME / name}: cannot read the pack back")
    served = new.sha if on_disk == data else hashlib.sha256(on_disk or b"").hexdigest()
    return served, new.pack.count, changed, errors


class _Incoming:
    """A pack being seeded: its digest, and its ids and entries' bytes when they are needed (a
    fresh node needs neither: its work is one write and one read back)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pack = data, Pack.from_bytes(data)
        if self.pack.problem is not None:
            raise ValueError(f"not a pack: {self.pack.problem}")
        self.sha = hashlib.sha256(data).hexdigest()
        self._spans: dict[str, tuple[int, int]] | None = None

    @property
    def spans(self) -> dict[str, tuple[int, int]]:
        if self._spans is None:
            self._spans = {eid: r[:2] for eid, r in zip(self.pack.ids(), self.pack.records(), strict=True)}
        return self._spans

    @property
    def ids(self) -> Iterable[str]:
        return self.spans.keys()

    def blob(self, eid: str) -> bytes:
        offset, length = self.spans[eid]
        return self.data[offset: offset + length]


def _take_ids(paths: list[str], new: _Incoming, same: str | None) -> dict[str, bytes]:
    """Take ``new``'s ids out of the packs ``paths`` (newest first, as they were before ``new``
    was written) but the byte-identical one ``same``: the bytes they served for them (the first
    copy of an id is the one it served; none of what ``same`` served, the same bytes)."""
    before: dict[str, bytes] = {}
    ids = set(new.ids) if paths else set()
    older = False  # than ``same``
    for path in paths:
        if path == same:
            ids, older = ids - before.keys(), True
            continue
        pack = Pack.open(path)
        hit = ids.intersection(pack.ids()) if pack.problem is None else set()
        for eid, blob in (_rewrite_without(pack, hit) if hit else {}).items():
            if not older:
                before.setdefault(eid, blob)
    return before


def _read_plain(path: Path) -> bytes | None:
    """The bytes of the plain file ``path``; None if there is none; :data:`NEVER` for a link or
    anything else that is not a plain file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return NEVER
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return NEVER
        return os.read(fd, info.st_size + 1)
    finally:
        os.close(fd)


def _loose_shadows(root: Path, directory: Path, new: _Incoming, errors: list[str]) -> dict[str, bytes]:
    """The loose files of ``new``'s ids (their bytes before, by id): an identical one is left, any
    other goes to history under its entry's lock (a link is removed), so that the pack's entry is
    served."""
    found: dict[str, bytes] = {}
    try:
        names = {n[:-5] for n in os.listdir(directory) if n.endswith(".json")}
    except OSError:
        return found
    ids = new.ids if names else ()
    for eid in names.intersection(ids):
        path = directory / f"{eid}.json"
        try:
            blob = _read_plain(path)
            if blob is not None and blob == new.blob(eid):
                found[eid] = blob
                continue
            with _cache.locked(path):
                blob = _read_plain(path)
                if blob is None:
                    continue
                found[eid] = blob
                if blob == new.blob(eid):
                    continue
                if blob != NEVER:
                    os.link(path, _cache.history_path(path, root))
                path.unlink()
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    return found


def _to_history(root: Path, directory: Path, eid: str, blob: bytes, errors: list[str]) -> None:
    """The bytes a pack served for ``eid`` before seeding replaced them: a history file."""
    try:
        path = _cache.history_path(directory / f"{eid}.json", root)
        _cache.atomic_write_text(path, blob.decode("utf-8", errors="replace"), durable=False)
    except OSError as exc:
        errors.append(f"{directory / eid}.json (history): {exc}")
