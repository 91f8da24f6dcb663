"""R3: bad cache files are a miss with a warning through the public API, never a crash or code
execution; writes never follow a symlink out of the root; created directories are 0700."""

from __future__ import annotations

import json
import os
import pickle
import stat
from collections import Counter

import pytest

from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune

SPACE = [{"block": 1}, {"block": 2}, {"block": 4}]
RUNS = 1 + 2


class Marker:
    """Unpickling this would create a file: proof that nothing executed cache contents."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def make_tuned():
    calls: Counter[int] = Counter()

    @autotune(SPACE, lambda n: ("n", n), n_warmup=1, n_repeat=2)
    def cached_fn(n, block):
        calls[block] += 1
        return n * 10 + block

    return cached_fn, calls


@pytest.fixture
def tuned_entry(cache_dir):
    """A tuned function, its valid entry's path and text; the in-memory decision is cleared."""
    fn, calls = make_tuned()
    fn(3)
    (path,) = (cache_dir / "cached_fn").glob("*.json")
    fn.clear()
    calls.clear()
    return fn, calls, path, path.read_text()


def _entry_with(text: str, **changes) -> str:
    data = json.loads(text)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for name in parents:
            node = node[name]
        node[last] = value
    return json.dumps(data)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


#: name -> bytes to plant, from (the valid entry's text, a marker path that code execution creates)
CORPUS = {
    "empty": lambda valid, marker: b"",
    "truncated": lambda valid, marker: valid.encode()[: len(valid) // 2],
    "not-json": lambda valid, marker: b"\x00\xffgarbage\xfe{{",
    "not-utf8-json": lambda valid, marker: '{"schema": "é"}'.encode("latin-1"),
    "json-list": lambda valid, marker: b"[]",
    "json-string": lambda valid, marker: b'"triton_dist.autotune/v1"',
    "other-schema": lambda valid, marker: _entry_with(valid, schema="triton_dist.autotune/v999").encode(),
    "best-is-a-list": lambda valid, marker: _entry_with(valid, best=[1, 2]).encode(),
    "best-without-config": lambda valid, marker: _entry_with(valid, best={"index": 0}).encode(),
    "candidates-garbage": lambda valid, marker: _entry_with(valid, candidates=[1, "x", None, [2]]).encode(),
    "key-is-a-number": lambda valid, marker: _entry_with(valid, key=5).encode(),
    "other-key": lambda valid, marker: _entry_with(valid, key="('n', 4)").encode(),
    "other-source": lambda valid, marker: _entry_with(valid, source_hash="0" * 16).encode(),
    "config-not-in-space": lambda valid, marker: _entry_with(valid, best__config={"block": 999}).encode(),
    "config-deeply-nested": lambda valid, marker: _entry_with(
        valid, best__config=json.loads(_nested(400))).encode(),
    "deeply-nested": lambda valid, marker: _nested(200_000).encode(),
    "huge-int": lambda valid, marker: (
        '{"schema": "triton_dist.autotune/v1", "n": ' + "9" * 100_000 + "}").encode(),
    "huge": lambda valid, marker: _entry_with(valid, padding="x" * (9 * 2**20)).encode(),
    "pickle": lambda valid, marker: pickle.dumps(Marker(str(marker))),
    "yaml-tag": lambda valid, marker: f"!!python/object/apply:os.system ['touch {marker}']".encode(),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bad_entry_is_a_miss_with_a_warning_then_retuned(tuned_entry, tmp_path, name):
    fn, calls, path, valid = tuned_entry
    marker = tmp_path / "executed"
    path.write_bytes(CORPUS[name](valid, marker))
    with pytest.warns(TritonDistWarning, match="ignoring cache file"):
        assert fn(3) == 30 + fn.best_config(3)["block"]
    # re-tuned (an entry of another source version may lend timings of unchanged configs: issue 6)
    assert sum(calls.values()) >= RUNS + 1
    assert not marker.exists()
    # the bad file was replaced by a good entry (the bad one is kept in history)
    fn.clear()
    calls.clear()
    assert fn(3) == 30 + fn.best_config(3)["block"]
    assert sum(calls.values()) == 1


def test_a_valid_entry_still_hits(tuned_entry):
    fn, calls, _, _ = tuned_entry
    fn(3)
    assert sum(calls.values()) == 1


@pytest.mark.timeout(60)
def test_a_fifo_or_a_directory_under_the_entry_name_does_not_block_or_crash(tuned_entry):
    fn, calls, path, _ = tuned_entry
    path.unlink()
    os.mkfifo(path)  # a reader that opens it blindly blocks forever
    with pytest.warns(TritonDistWarning, match="not a regular file"):
        fn(3)
    fn.clear()
    path.unlink(missing_ok=True)
    path.mkdir()
    with pytest.warns(TritonDistWarning) as record:
        assert fn(3) == 30 + fn.best_config(3)["block"]
    text = " ".join(str(w.message) for w in record)
    assert "ignoring cache file" in text and "nothing was saved" in text


@pytest.mark.timeout(60)
def test_a_fifo_where_the_tuning_log_goes_does_not_block_the_tuning(tuned_entry, tmp_path, monkeypatch):
    """The log was opened for appending without O_NONBLOCK: a FIFO at its name (no reader) blocked
    the tuning forever in os.open (a tester, 2026-12-04); the same for contextual_autotune's
    ./.autotune_logs/rank-0.log. The tuning goes on without a log."""
    fn, calls, path, _ = tuned_entry
    path.unlink()
    log = path.with_suffix(".log")
    log.unlink(missing_ok=True)
    os.mkfifo(log)
    fn.clear()
    assert fn(3) == 30 + fn.best_config(3)["block"]  # tuned again, with no log
    assert path.is_file() and stat.S_ISFIFO(log.stat().st_mode)

    import torch

    from triton_dist.autotuner import contextual_autotune

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".autotune_logs").mkdir()
    os.mkfifo(tmp_path / ".autotune_logs" / "rank-0.log")

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def step(x):
        return x + 1

    assert step(torch.ones(1)).item() == 2.0


def test_a_fifo_where_the_key_log_goes_does_not_block_the_tuning(tuned_entry):
    """The key log (``<function>/.keys/index``) is appended to by every entry write: a FIFO at its
    name must not hang the writer, as a FIFO at a tuning log's name did (U22)."""
    fn, calls, path, _ = tuned_entry
    path.unlink()
    log = path.parent / ".keys" / "index"
    log.parent.mkdir(exist_ok=True)
    log.unlink(missing_ok=True)
    os.mkfifo(log)
    fn.clear()
    assert fn(3) == 30 + fn.best_config(3)["block"]  # tuned again, its entry written
    assert path.is_file() and stat.S_ISFIFO(log.stat().st_mode)


def test_entry_symlinked_outside_the_root_is_not_read_and_not_written_through(tuned_entry, tmp_path):
    fn, calls, path, valid = tuned_entry
    outside = tmp_path / "outside.json"
    outside.write_text(valid)
    path.unlink()
    path.symlink_to(outside)
    with pytest.warns(TritonDistWarning, match="outside the cache root"):
        fn(3)
    assert sum(calls.values()) == 3 * RUNS + 1
    assert outside.read_text() == valid
    assert path.is_file() and not path.is_symlink()
    # a dangling link pointing out of the root is a warned miss too
    fn.clear()
    path.unlink()
    path.symlink_to(tmp_path / "nowhere.json")
    with pytest.warns(TritonDistWarning, match="outside the cache root"):
        fn(3)
    assert not (tmp_path / "nowhere.json").exists()


@pytest.mark.parametrize("link", ["function-dir", "history", "locks", "lock-file", "log"])
def test_no_write_follows_a_symlink_out_of_the_root(cache_dir, tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    fn, calls = make_tuned()
    fn_dir = cache_dir / "cached_fn"
    if link == "function-dir":
        cache_dir.mkdir(parents=True)
        fn_dir.symlink_to(outside, target_is_directory=True)
    else:
        fn(3)  # a real entry first, then plant the link
        if link in ("locks", "lock-file"):
            fn.tune(3, force=True)  # replacing an entry locks it (a key's first entry needs no lock)
        fn.clear()
        (entry,) = fn_dir.glob("*.json")
        if link == "history":
            (fn_dir / "history").symlink_to(outside, target_is_directory=True)
        elif link == "lock-file":
            (outside / "victim.lock").write_text("precious\n")
            (lock,) = (fn_dir / ".locks").iterdir()
            lock.unlink()
            lock.symlink_to(outside / "victim.lock")
        elif link == "locks":
            for lock in (fn_dir / ".locks").iterdir():
                lock.unlink()
            (fn_dir / ".locks").rmdir()
            (fn_dir / ".locks").symlink_to(outside, target_is_directory=True)
        else:
            (outside / "victim.log").write_text("precious\n")
            entry.with_suffix(".log").unlink()
            entry.with_suffix(".log").symlink_to(outside / "victim.log")
    env = {"TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        if link in ("log", "lock-file"):
            value = fn(3)  # the link is not followed (log skipped, lock link replaced): entry written
        else:
            with pytest.warns(TritonDistWarning, match="nothing was saved"):
                value = fn(3)
    assert value == 30 + fn.best_config(3)["block"]
    leftovers = sorted(p.name for p in outside.iterdir())
    victims = {"log": "victim.log", "lock-file": "victim.lock"}
    assert leftovers == ([victims[link]] if link in victims else [])
    if link in victims:
        assert (outside / victims[link]).read_text() == "precious\n"


def test_directories_the_cache_creates_are_private(tmp_path, monkeypatch):
    old = os.umask(0o022)
    try:
        root = tmp_path / "a" / "b" / "autotune"
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(root))
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "1")
        fn, _ = make_tuned()
        fn(3)
        fn.clear()
        fn(3)  # the second write creates history/
    finally:
        os.umask(old)
    created = [tmp_path / "a", tmp_path / "a" / "b", root, root / "cached_fn",
               root / "cached_fn" / ".locks", root / "cached_fn" / "history"]
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in created}
    assert modes == {k: 0o700 for k in modes}


def test_a_root_path_too_long_for_the_file_system_is_a_warning_not_a_crash(tmp_path, monkeypatch):
    """Every tuned call raised a bare OSError (File name too long) from the entry's lookup (a
    tester's hostile inputs, 2026-12-04); an unusable root is a warning, and tuning works."""
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / ("x" * 300) / "cache"))

    @autotune([{"block": 1}, {"block": 2}], lambda n: (n,), n_warmup=0, n_repeat=1)
    def host(n, block):
        return n * block

    with pytest.warns(TritonDistWarning, match="nothing was saved"):
        assert host(3) in (3, 6)


def test_a_config_no_entry_can_hold_is_refused_at_decoration():
    """A config holding itself raised a RecursionError from the encoder, a 5000-digit int a bare
    ValueError from json (a tester's hostile inputs, 2026-12-04)."""
    from triton_dist.errors import ConfigSpaceError

    loop: list = []
    loop.append(loop)
    deep: list = [1]
    for _ in range(45):  # written, then never read back: "nests deeper than 48 levels" in every process
        deep = [deep]
    for bad in ({"block": loop}, {"block": 10 ** 5000}, {"block": deep}):
        with pytest.raises(ConfigSpaceError, match=r"config_space\[0\] of .* cannot be written to the cache"):
            autotune([bad], lambda n: (n,))(lambda n, block: n)
