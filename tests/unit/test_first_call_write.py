"""The first call's cache entry (issue 16): complete under its name when the call returns, its
fsync done right after on a background thread; other writers keep the fsync before the rename."""

from __future__ import annotations

import json
import os
import threading

from tests.unit.helpers import make_tuner, only_entry
from triton_dist._store import background_sync, files


def record_fsyncs(monkeypatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append((threading.current_thread().name, os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    return seen


def test_the_first_call_writes_a_complete_entry_and_fsyncs_it_in_the_background(cache_dir, monkeypatch):
    seen = record_fsyncs(monkeypatch)
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    assert tuned(1)[1] == 1
    entry = only_entry(cache_dir)  # complete and parseable the moment the call has returned
    assert entry["best"]["index"] == 1
    path = next((cache_dir / "host").glob("*.json"))
    # the queue may still hold the entries of earlier tests (CI's disk: tens of ms per fsync)
    assert background_sync.wait_idle(timeout_s=120)
    assert any(p == str(path.resolve()) for _, p in seen)
    assert {name for name, p in seen if p == str(path.resolve())} == {"triton-dist-fsync"}
    assert not any(name == threading.current_thread().name for name, _ in seen)


def test_other_writers_fsync_before_the_rename(tmp_path, monkeypatch):
    seen = record_fsyncs(monkeypatch)
    target = tmp_path / "entry.json"
    files.atomic_write_text(target, json.dumps({"a": 1}))
    assert json.loads(target.read_text()) == {"a": 1}
    # the temporary file was synced, by this thread, before it took the final name
    assert len(seen) == 1 and seen[0][0] == threading.current_thread().name
    assert os.path.basename(seen[0][1]).startswith(".entry.json.")


def test_the_sync_thread_outlives_a_path_that_fails_and_a_fork(tmp_path, monkeypatch):
    seen = record_fsyncs(monkeypatch)
    real = files.os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("bad.json"):
            raise ValueError("not an OSError")  # what once would have ended the thread
        real(fd)

    monkeypatch.setattr(background_sync.os, "fsync", failing)
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text("{}")
    good.write_text("{}")
    background_sync.sync_later(bad)
    assert background_sync.wait_idle(timeout_s=120)
    monkeypatch.setattr(background_sync.os, "fsync",
                        lambda fd: seen.append(("later", os.readlink(f"/proc/self/fd/{fd}"))))
    background_sync.sync_later(good)
    assert background_sync.wait_idle(timeout_s=120)
    assert ("later", str(good.resolve())) in seen
    # a forked child starts its own thread (the parent's does not exist there) and syncs its own
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if its entry got synced
        ok = False
        try:
            background_sync.sync_later(good)
            ok = background_sync.wait_idle(timeout_s=30)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_name_replaced_by_a_fifo_before_its_sync_does_not_stall_the_thread(tmp_path, monkeypatch):
    """The entry's name may be replaced by a FIFO between its write and its background fsync (as
    tests/reliability/test_bad_cache_files.py does right after a tuning): a blocking open would
    wait for a writer forever, and every path queued after it with it."""
    seen = record_fsyncs(monkeypatch)
    fifo, good = tmp_path / "pipe.json", tmp_path / "good.json"
    os.mkfifo(fifo)
    good.write_text("{}")
    background_sync.sync_later(fifo)
    background_sync.sync_later(good)
    assert background_sync.wait_idle(timeout_s=30)
    synced = [target for _, target in seen]
    assert str(good) in synced and str(fifo) not in synced


def test_a_path_is_synced_here_when_no_thread_can_start(tmp_path, monkeypatch):
    """A first tuning inside an ``atexit`` handler: Python 3.12 refuses new threads at shutdown
    (RuntimeError), which failed the call after its entry was written; the path is synced inline."""
    seen: list[tuple[str, str]] = []
    real = os.fsync
    monkeypatch.setattr(background_sync.os, "fsync",
                        lambda fd: (seen.append((threading.current_thread().name,
                                                 os.readlink(f"/proc/self/fd/{fd}"))), real(fd)))
    monkeypatch.setattr(background_sync, "_syncer", background_sync._Syncer())  # no thread yet

    def refused(self) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(background_sync.threading.Thread, "start", refused)
    entry = tmp_path / "entry.json"
    entry.write_text("{}")
    background_sync.start()  # what a tuning calls first: nothing to start, nothing raised
    background_sync.sync_later(entry)
    assert seen == [(threading.current_thread().name, str(entry.resolve()))]
    assert background_sync.wait_idle(timeout_s=0)  # nothing left queued for a thread that never ran
