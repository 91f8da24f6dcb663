"""The cache's cost in file-system operations does not grow with one function's entries (a tester:
``prune --dry-run`` took 19 s at 4,000 entries of one function, three globs of the whole folder per
entry; each miss listed the whole folder, and a new process's first miss read every entry). Counted
in calls, not timed."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from tests.unit.helpers import make_tuner
from triton_dist._store import admin


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts the directory listings (``os.scandir``, which pathlib's glob uses, and ``os.listdir``)."""
    counts: Counter[str] = Counter()
    for name in ("scandir", "listdir"):
        real = getattr(os, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, counting)
    yield counts


def fill(n: int) -> None:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0}, n_warmup=0, n_repeat=1)
    for k in range(n):
        tuned(k)


def test_prune_lists_each_folder_a_few_times_not_once_per_entry(cache_dir: Path, listings: Counter[str]) -> None:
    fill(40)
    listings.clear()
    plan = admin.prune(cache_dir, older_than_days=0, dry_run=True)
    assert len([r for r in plan if r.path.endswith(".json")]) == 40
    assert sum(listings.values()) <= 12, listings  # before: 3 globs of the folder per entry (> 120)


def test_a_real_prune_leaves_no_lock_files_and_clears_those_left_earlier(cache_dir: Path) -> None:
    fill(6)
    locks = cache_dir / "host" / ".locks"
    locks.mkdir(exist_ok=True)
    (locks / f"{'a' * 32}.lock").touch()  # what an earlier prune left for an entry it removed
    held = FileLock(str(locks / f"{'b' * 32}.lock"))
    held.acquire()  # a writer holds this one: it stays
    try:
        removed = admin.prune(cache_dir, older_than_days=0)
        assert all(r.done for r in removed) and len([r for r in removed if r.path.endswith(".json")]) == 6
        assert not list((cache_dir / "host").glob("*.json"))
        assert sorted(p.name for p in locks.iterdir() if admin.LOCK_RE.match(p.name)) == [f"{'b' * 32}.lock"]
    finally:
        held.release()


def test_a_miss_does_not_list_the_function_folder_once_this_process_has(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0}, n_warmup=0, n_repeat=1)
    for k in range(30):
        tuned(k)
    folder = str(cache_dir / "host")
    listed: list[str] = []
    real = os.listdir

    def counting(path=".", *args, **kwargs):
        listed.append(os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "listdir", counting)
    for k in range(100, 110):
        tuned(k)
    assert [p for p in listed if os.path.normpath(p) == folder] == []  # before: one listing per miss


def test_a_new_processs_first_miss_reads_no_entry_of_another_key(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from triton_dist._store import keyindex

    fill(30)
    monkeypatch.setattr(keyindex, "_known", {})  # what a new process knows
    reads: list[bytes] = []
    real = keyindex.key_of
    monkeypatch.setattr(keyindex, "key_of", lambda blob: reads.append(blob) or real(blob))
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0}, n_warmup=0, n_repeat=1)
    tuned(1000)
    assert reads == []  # before: the 30 entries of the function, each read for its key
    assert len(list((cache_dir / "host").glob("*.json"))) == 31


def test_entries_the_key_log_lacks_are_found_by_a_process_once_and_logged(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry written by an older version or copied in by hand (not in the log) still serves
    timing reuse: a process's first look lists the folder once and adds it to the log."""
    from triton_dist._store import keyindex, keylog

    fill(3)
    (cache_dir / "host" / keylog.DIR_NAME / keylog.LOG_NAME).unlink()  # as an older version left the folder
    monkeypatch.setattr(keyindex, "_known", {})
    key = next(iter(keyindex.key_of(p.read_bytes()) for p in (cache_dir / "host").glob("*.json")))
    assert key is not None
    [(path, entry)] = keyindex.entries_with_key(cache_dir / "host", cache_dir, key)
    assert entry["key"] == key
    pairs, _ = keylog.read_from(cache_dir / "host", 0) or ([], 0)
    assert len(pairs) == 3 and (path.stem, keylog.key_hash(key)) in pairs
