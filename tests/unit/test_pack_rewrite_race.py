"""A reader racing a pack rewrite: ``cache prune`` and seeding replace a pack (the new one is
written, then the old one removed), so a reader that listed the old one can find it gone when it
opens or reads it. The reader lists the folder again and reads the pack that replaced it: no
"ignoring cache pack ...: cannot open it" warning, no miss (re-tuning) of an entry the new pack
holds, no tool reporting a corrupt pack or entry that is only replaced.

The race is made deterministic with real files and the real writers: a hook on the store's own
functions runs a real prune (``packs.remove``) or seeding (``packs.install``) right after the reader
listed the packs, right before it opens one, or right before it reads one's bytes."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.served import pack_files, served
from tests.unit.helpers import make_tuner
from tests.unit.test_packs import tuned_entries
from triton_dist._store import admin, decide, keyindex, pack_writes, packfile, packs, verify
from triton_dist._store.scan import scan_function_dir


def _hook(monkeypatch: pytest.MonkeyPatch, where: str, rewrite: Callable[[], None]) -> list[Callable[[], None]]:
    """Run ``rewrite`` once, the first time a reader reaches ``where``: after it listed a
    function's packs, before it opens a pack, or before it reads a pack's bytes. What is left to
    run (empty once it ran)."""
    pending = [rewrite]

    def fire() -> None:
        if pending:
            pending.pop()()  # the rewrite's own calls of the hooked functions are the real ones

    if where == "listing":
        real_paths = packfile.pack_paths

        def pack_paths(directory: Path | str) -> list[str]:
            paths = real_paths(directory)
            if paths:
                fire()
            return paths

        monkeypatch.setattr(packfile, "pack_paths", pack_paths)
    elif where == "open":
        real_open = packfile.Pack.open.__func__  # type: ignore[attr-defined]

        def pack_open(cls: type[packfile.Pack], path: Any) -> packfile.Pack:
            fire()
            return real_open(cls, path)

        monkeypatch.setattr(packfile.Pack, "open", classmethod(pack_open))
    else:
        real_read, real_read_all = packfile.Pack.read, packfile.read_all

        def read(self: packfile.Pack, eid: str) -> Any:
            fire()
            return real_read(self, eid)

        def read_all(path: str) -> bytes | None:
            fire()
            return real_read_all(path)

        monkeypatch.setattr(packfile.Pack, "read", read)
        monkeypatch.setattr(packfile, "read_all", read_all)
    return pending


def _rewriter(root: Path, how: str, items: dict[str, bytes], victim: str) -> Callable[[], None]:
    directory = root / "host"

    def prune() -> None:  # what `cache prune` does to a packed entry: its pack rewritten without it
        assert packs.remove(root, directory, [victim]) == [victim]

    def seed() -> None:  # a campaign seeding one entry again: the older pack is rewritten without it
        packs.install(root, "host", packfile.build([(victim, items[victim])]))

    return prune if how == "prune" else seed


def _tuner(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    tuned, probe = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    ids = {n: decide.identify(tuned.target, ("x", n), 1).id for n in range(1, 4)}
    keys = sorted((n for n in ids if ids[n] in expected), key=lambda n: ids[n] != target)  # the target first
    assert ids[keys[0]] == target
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [tuned(n)[1] for n in keys]
    assert not [str(w.message) for w in caught]
    assert results == [1] * len(expected) and probe.benches == 0  # every key hit its entry: none re-tuned


def _ls(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    rows, bad = admin.list_entries(root)
    assert bad == [] and {r["id"] for r in rows} == expected


def _verify(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    found = verify.verify(root)
    assert [(f.path, f.kind, f.detail) for f in found if f.problem] == []
    assert {Path(f.path).stem for f in found if f.kind == "ok" and packs.is_packed(f.path)} == expected


def _scan(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    entries, skipped = scan_function_dir(root / "host", root)  # `why`, the miss diagnosis
    assert skipped == [] and {e["id"] for _, e in entries} == expected


def _reuse(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    key = json.loads(items[target])["key"]
    found = keyindex.entries_with_key(root / "host", root, key)  # timing reuse's look-up
    assert [e["id"] for _, e in found] == [target]


def _preflight(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    here = packs.Served(root / "host", root)  # the campaign's already-cached check
    assert {eid: here.raw(eid) for eid in expected} == {eid: items[eid] for eid in expected}


def _show(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    path = admin.find_entry(root, f"host/{target[:12]}")
    entry, why = packs.read_path(path)
    assert why is None and entry is not None and entry["id"] == target


def _prune_invalid(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    removed = admin.prune(root, invalid=True)  # a pack it found gone is no invalid entry to remove
    assert [(r.path, r.reason) for r in removed] == []


def _shadowed(root: Path, items: dict[str, bytes], target: str, expected: set[str]) -> None:
    (root / "host" / f"{target}.json").write_bytes(items[target])  # a loose copy serves the id
    assert list(admin._shadowed_unusable(root / "host", root)) == []  # what prune --invalid removes


READERS = {"tuner": _tuner, "ls": _ls, "verify": _verify, "why": _scan, "timing reuse": _reuse,
           "preflight": _preflight, "show": _show, "prune --invalid": _prune_invalid,
           "prune --invalid, shadowed": _shadowed}


@pytest.mark.parametrize("how", ["prune", "seed"])
@pytest.mark.parametrize("where", ["listing", "open", "read"])
@pytest.mark.parametrize("reader", list(READERS))
def test_a_reader_racing_a_pack_rewrite_reads_the_pack_that_replaced_it(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch, reader: str, where: str, how: str) -> None:
    items = tuned_entries(cache_dir)
    ordered = sorted(items)
    target, victim = ordered[1], ordered[0]
    expected = set(items) - {victim} if how == "prune" else set(items)
    (old,) = pack_files(cache_dir, "host")
    pending = _hook(monkeypatch, where, _rewriter(cache_dir, how, items, victim))
    READERS[reader](cache_dir, items, target, expected)
    assert pending == [] and old not in pack_files(cache_dir, "host")  # the race did happen
    monkeypatch.undo()
    assert served(cache_dir, "host") == {eid: items[eid] for eid in expected}


def test_a_show_of_a_listed_entry_whose_pack_was_rewritten_reads_the_new_pack(cache_dir: Path) -> None:
    items = tuned_entries(cache_dir)
    target, victim = sorted(items)[1], sorted(items)[0]
    path = admin.find_entry(cache_dir, f"host/{target[:12]}")  # `show` found it, then a prune ran
    assert packs.remove(cache_dir, cache_dir / "host", [victim]) == [victim]
    assert not path.parent.exists()
    entry, why = packs.read_path(path)
    assert why is None and entry is not None and entry["id"] == target
    entry, why = packs.read_path(path.parent / f"{victim}.json")  # the pruned one: gone for good
    assert entry is None and why == "missing"


def test_every_id_is_served_at_every_step_of_a_seeding(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeding an id that an older pack holds writes the new pack before the older one loses it:
    a reader between the two steps finds it (in the older pack, then in the new one), never a miss."""
    items = tuned_entries(cache_dir)
    changed = {eid: json.dumps({**json.loads(blob), "created": "2030-01-01T00:00:00+00:00"}).encode()
               for eid, blob in items.items() if eid != min(items)}
    seen: list[set[str]] = []

    def look() -> None:
        seen.append({eid for eid in items if packs.load_entry(cache_dir, "host", eid)[0] is not None})

    for name in ("_write_pack", "_rewrite_without"):
        real = getattr(pack_writes, name)

        def step(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            look()
            try:
                return _real(*args, **kwargs)
            finally:
                look()

        monkeypatch.setattr(pack_writes, name, step)
    packs.install(cache_dir, "host", packfile.build(changed.items()))
    monkeypatch.undo()
    assert len(seen) >= 4 and all(ids == set(items) for ids in seen), seen
    assert served(cache_dir, "host") == {**items, **changed}


def test_a_pack_replaced_under_every_listing_is_listed_a_bounded_number_of_times(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrites that never stop (here: the pack renamed to the newest after each listing, as a
    seeding of the same bytes does): the reader lists :data:`packs.LISTINGS` times, then reads
    its last listing as it is (the pack it lists is gone: said, a miss) instead of looping."""
    items = tuned_entries(cache_dir)
    target = sorted(items)[1]
    real_paths = packfile.pack_paths
    listings = []

    def pack_paths(directory: Path | str) -> list[str]:
        paths = real_paths(directory)
        listings.append(paths)
        for path in paths:
            name = Path(path).name
            Path(path).rename(Path(path).with_name(f"{int(name[:8]) + 1:08d}{name[8:]}"))
        return paths

    monkeypatch.setattr(packfile, "pack_paths", pack_paths)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entry, where, why = packs.load_entry(cache_dir, "host", target)
    assert len(listings) == packs.LISTINGS and (entry, where, why) == (None, None, None)
    assert [str(w.message) for w in caught if "cannot open it" in str(w.message)]
    monkeypatch.undo()
    entry, _, why = packs.load_entry(cache_dir, "host", target)  # once the rewrites stop: read
    assert why is None and entry is not None and entry["id"] == target
