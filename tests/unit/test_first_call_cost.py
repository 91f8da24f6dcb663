"""What a first call costs beyond its measurement (issue 16, P2 on the real first call): the
settings are parsed again only when they change, an entry's text comes from the C encoder, a
key's first entry is created without the lock, the cache directories are checked once, and the
tuning log is flushed in batches. Each keeps what it replaced correct."""

from __future__ import annotations

import json
import math
import os

import pytest

from tests.unit.helpers import make_tuner, only_entry
from triton_dist._logging import TuningLog
from triton_dist._store import files
from triton_dist.settings import get_settings, override

# ------------------------------------------------------------------------------------ settings


def test_settings_are_parsed_again_only_when_a_variable_they_read_changes(cache_dir, monkeypatch) -> None:
    first = get_settings()
    assert get_settings() is first  # nothing changed: the same parse
    monkeypatch.setenv("UNRELATED_VARIABLE_OF_THE_JOB", "1")
    assert get_settings() is first  # a variable the settings do not read
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "strict")
    assert get_settings().cache_only == "strict"
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(cache_dir / "elsewhere"))
    assert get_settings().autotune_dir == cache_dir / "elsewhere"
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY=None):
        assert get_settings().cache_only == "off"
    assert get_settings().cache_only == "strict"
    monkeypatch.delenv("TRITON_DIST_COMPILE_WORKERS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))  # a 64-CPU node
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert get_settings().compile_workers == 32
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # read by the default compile workers, outside TRITON_DIST_*
    assert get_settings().compile_workers == 16
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))  # pinned to 8 of them
    assert get_settings().compile_workers == 8


def test_an_invalid_setting_fails_every_time_not_only_the_first(monkeypatch) -> None:
    from triton_dist.errors import SettingsError

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "sometimes")
    for _ in range(2):
        with pytest.raises(SettingsError, match="TRITON_DIST_AUTOTUNE_CACHE_ONLY='sometimes'"):
            get_settings()


# ------------------------------------------------------------------------------ entry text


def test_an_entry_text_is_one_line_per_field_and_per_candidate_and_round_trips(cache_dir) -> None:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    tuned(1)
    entry = only_entry(cache_dir)
    text = files.dumps_entry(entry)
    assert json.loads(text) == entry
    assert text == files.dumps_entry(json.loads(text))  # the same entry, the same bytes
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert sum(line.startswith('    {"') for line in lines) == len(entry["candidates"])  # one per candidate
    assert sum(line.startswith('  "') for line in lines) == len(entry)  # one per top-level field
    assert [json.loads(line.split(": ", 1)[0]) for line in lines if line.startswith('  "')] == sorted(entry)
    path = next((cache_dir / "host").glob("*.json"))
    assert path.read_text() == text  # what the tuner wrote


def test_an_entry_text_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(ValueError):
        files.dumps_entry({"best": {"time_ms": math.nan}})
    assert files.dumps_entry({}) == "{}\n"
    assert json.loads(files.dumps_entry({"candidates": [], "key": "k"})) == {"candidates": [], "key": "k"}


# ------------------------------------------------------------------------------ first entry


def test_a_keys_first_entry_is_created_without_the_lock_and_a_later_one_keeps_history(cache_dir) -> None:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    tuned(1)
    folder = cache_dir / "host"
    [path] = folder.glob("*.json")
    assert not (folder / ".locks").exists()  # created in place: no lock file was needed
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    first = path.read_bytes()
    tuned.tune(1, force=True)  # replaces it: under the lock, the old one to history
    assert (folder / ".locks").is_dir()
    [old] = (folder / "history").glob("*.json")
    assert old.read_bytes() == first
    assert json.loads(path.read_text())["id"] == json.loads(first)["id"]


def test_a_first_entry_that_another_writer_created_meanwhile_goes_through_the_lock(cache_dir, monkeypatch) -> None:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    real = files.create_entry_text
    theirs: list[bytes] = []

    def raced(path, text, fsync=True, folder=None):  # another process's entry lands just before ours
        other = text.replace('"created": "', '"created": "1999')
        assert real(path, other, fsync=fsync, folder=folder)
        theirs.append(other.encode())
        return real(path, text, fsync=fsync, folder=folder)  # False: a name is there now

    monkeypatch.setattr(files, "create_entry_text", raced)
    tuned(1)
    folder = cache_dir / "host"
    [old] = (folder / "history").glob("*.json")
    assert theirs and old.read_bytes() == theirs[0]  # theirs kept in history, not lost
    assert only_entry(cache_dir)["best"]["index"] == 1 and not only_entry(cache_dir)["created"].startswith("1999")


def test_a_checked_cache_directory_replaced_by_a_link_outside_is_refused(tmp_path) -> None:
    root = tmp_path / "root"
    target = root / "fn"
    files.ensure_private_dir(target, root)
    files.ensure_private_dir(target, root)  # the remembered check
    outside = tmp_path / "outside"
    outside.mkdir()
    target.rmdir()
    target.symlink_to(outside)
    with pytest.raises(PermissionError, match="outside the cache root"):
        files.ensure_private_dir(target, root)


# ------------------------------------------------------------------------------ tuning log


def test_the_tuning_logs_first_line_is_on_disk_at_once_and_every_line_at_close(tmp_path) -> None:
    path = tmp_path / "t.log"
    log = TuningLog(path, verbose=False)
    log.info("tuning f for key %s", "(1,)")
    assert path.read_text().endswith("tuning f for key (1,)\n")  # what is being tuned, if it dies now
    for i in range(50):
        log.info("config %d: %.4f ms", i, 1.0)
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 51 and lines[-1].endswith("config 49: 1.0000 ms")
