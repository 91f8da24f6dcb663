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
from triton_dist._store import admin, keyindex, keylog


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
    pairs, _, _ = keylog.read_from(cache_dir / "host", 0) or ([], 0, None)
    assert len(pairs) == 3 and (path.stem, keylog.key_hash(key)) in pairs


def log_lines(directory: Path) -> list[str]:
    return (directory / keylog.DIR_NAME / keylog.LOG_NAME).read_text().splitlines()


def test_a_real_prune_compacts_the_key_log_and_keeps_what_writers_append_meanwhile(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write appends a line: without compaction a prune left the lines of all it removed
    (a tester: 3,458 of them; a 3M-line log made a new process's first miss take 12.9 s)."""
    fill(6)
    directory = cache_dir / "host"
    paths = sorted(directory.glob("*.json"))
    for path in paths[:4]:  # made old: prune removes them
        text = path.read_text()
        start = text.index('"created": "') + len('"created": "')
        path.write_text(text[:start] + "2001-01-01T00:00:00+00:00" + text[text.index('"', start):])
    log = directory / keylog.DIR_NAME / keylog.LOG_NAME
    with log.open("a") as f:  # what earlier prunes left, a second write of a kept entry, garbage
        f.write(f"{'e' * 32} {'0' * 32}\n" + log_lines(directory)[-1] + "\nnot a line\n")
    ident = log.stat().st_ino
    late = f"{'f' * 32} {'1' * 32}"
    real_live = admin._live_ids

    def live_while_a_writer_appends(d: Path, root: Path) -> set[str]:
        with log.open("a") as f:  # a writer logs an entry after prune took the log's size
            f.write(late + "\n")
        return real_live(d, root)

    monkeypatch.setattr(admin, "_live_ids", live_while_a_writer_appends)
    admin.prune(cache_dir, older_than_days=1, dry_run=True)
    assert len(log_lines(directory)) == 6 + 3  # a dry run changes nothing
    removed = admin.prune(cache_dir, older_than_days=1)
    assert sorted(r.path for r in removed if r.path.endswith(".json")) == sorted(map(str, paths[:4]))
    kept = sorted(p.stem for p in directory.glob("*.json"))
    lines = log_lines(directory)
    assert sorted(line[:32] for line in lines[:-1]) == kept  # before: 10 lines, 4 of removed entries
    assert lines[-1] == late and log.stat().st_ino != ident  # replaced, what was appended kept
    assert not list(log.parent.glob(".*.tmp"))
    # a reader finds the kept entries through the new log (read from its start)
    for path in directory.glob("*.json"):
        key = keylog.key_of(path.read_bytes())
        assert key is not None
        assert [p for p, _ in keyindex.entries_with_key(directory, cache_dir, key)] == [path]


def test_the_log_is_read_in_bounded_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One pread of the whole log: 198 MB read at once, 2 GB of memory (a tester)."""
    lines = [f"{i:032x} {i * 7:032x}\n" for i in range(2000)]
    (tmp_path / keylog.DIR_NAME).mkdir()
    (tmp_path / keylog.DIR_NAME / keylog.LOG_NAME).write_text(
        "".join(lines[:1000]) + "x" * 100_000 + "\n" + "".join(lines[1000:]))  # a long malformed line
    sizes: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: sizes.append(n) or real(fd, n, at))
    monkeypatch.setattr(keylog, "CHUNK_BYTES", 1000)  # not a multiple of a line: lines span chunks
    seen: list[tuple[str, str]] = []
    read = keylog.read_from(tmp_path, 0, add=lambda eid, digest: seen.append((eid, digest)))
    assert read is not None and read[1] == (tmp_path / keylog.DIR_NAME / keylog.LOG_NAME).stat().st_size
    assert seen == [(line[:32], line[33:65]) for line in lines]
    assert max(sizes) <= 1000 and len(sizes) > 100  # before: one read of 232,001 bytes


def entry_taken_away(cache_dir: Path) -> tuple[Path, Path, bytes, str, Path]:
    """Three entries of ``host``; the first one's file removed (its bytes kept to put it back):
    (the function folder, that file, its bytes, its key, the key log)."""
    fill(3)
    directory = cache_dir / "host"
    source = sorted(directory.glob("*.json"))[0]
    blob = source.read_bytes()
    key = keylog.key_of(blob)
    assert key is not None
    source.unlink()
    return directory, source, blob, key, directory / keylog.DIR_NAME / keylog.LOG_NAME


def test_a_miss_lists_the_folder_again_once_the_last_listing_is_old(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running process listed a folder once, so it never found an entry the log lacks that
    appeared later (an older writer in a shared root, a writer killed before logging, NFS)."""
    directory, source, blob, key, log = entry_taken_away(cache_dir)
    log.write_text("".join(line + "\n" for line in log_lines(directory) if not line.startswith(source.stem)))
    now = [1000.0]
    monkeypatch.setattr(keyindex, "_clock", lambda: now[0])
    monkeypatch.setattr(keyindex, "_known", {})  # a new process
    listed: list[str] = []
    real = os.listdir

    def counting(path=".", *args, **kwargs):
        listed.append(os.path.normpath(os.fspath(path)))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "listdir", counting)
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0}, n_warmup=0, n_repeat=1)
    for k in range(100, 110):
        tuned(k)
        now[0] += 1.0
    assert listed.count(str(directory)) == 1  # the misses between listings list nothing
    source.write_bytes(blob)  # an entry the log lacks, as a writer killed before logging it leaves
    assert keyindex.entries_with_key(directory, cache_dir, key) == []  # not listed again yet
    now[0] += keyindex.LIST_AGAIN_S
    assert [p for p, _ in keyindex.entries_with_key(directory, cache_dir, key)] == [source]  # before: never
    tuned(200)
    assert listed.count(str(directory)) == 2  # one more listing, then none until the bound passes again
    assert any(line.startswith(source.stem) for line in log_lines(directory))  # and it is logged


def test_a_log_replaced_by_a_longer_file_is_read_from_its_start(cache_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The log was re-read by size only: one replaced by another file at least as long (rsync of
    another root) was read from the old offset, its start skipped."""
    directory, source, blob, key, log = entry_taken_away(cache_dir)
    others = [line + "\n" for line in log_lines(directory) if not line.startswith(source.stem)]
    mine = next(line + "\n" for line in log_lines(directory) if line.startswith(source.stem))
    log.write_text("".join(others))
    monkeypatch.setattr(keyindex, "_known", {})
    assert keyindex.entries_with_key(directory, cache_dir, key) == []  # listed and read: 2 lines
    source.write_bytes(blob)
    replacement = log.with_name("copied")
    replacement.write_text(mine + "".join(others))  # longer than what was read, its new line first
    os.replace(replacement, log)
    assert [p for p, _ in keyindex.entries_with_key(directory, cache_dir, key)] == [source]  # before: []
