"""The first call's cache entry (issue 16): complete under its name when the call returns, its
fsync done right after on a background thread; other writers keep the fsync before the rename."""

from __future__ import annotations

import json
import os
import threading
import time

from tests.unit.helpers import make_tuner, only_entry
from triton_dist._store import files


def record_fsyncs(monkeypatch) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append((threading.current_thread().name, os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    return seen


def wait_for(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_the_first_call_writes_a_complete_entry_and_fsyncs_it_in_the_background(cache_dir, monkeypatch):
    seen = record_fsyncs(monkeypatch)
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    assert tuned(1)[1] == 1
    entry = only_entry(cache_dir)  # complete and parseable the moment the call has returned
    assert entry["best"]["index"] == 1
    path = next((cache_dir / "host").glob("*.json"))
    assert wait_for(lambda: any(p == str(path.resolve()) for _, p in seen))
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
