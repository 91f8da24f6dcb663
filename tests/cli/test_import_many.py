"""``cache import`` of many entries (a tester, 2026-12-05: 10,000 entries took 21.7 s against
2.8 s for ``export``): per entry it opened the function folder, listed its packs twice and
appended to its key log; now once per folder. Every entry still has its ``fsync`` before its
name appears (docs/reliability.md, "How the cache stays whole"). Real tunings, a real archive,
the import in a fresh process whose opened files an audit hook records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from triton_dist import cli
from triton_dist._store import background_sync, create, keylog
from triton_dist._store.keyindex import entries_with_key

from .helpers import env_for, load
from .test_why_large_roots import MODULE, WATCHED

KEYS = 12


@pytest.fixture
def archive(cache_dir: Path, import_module, tmp_path: Path) -> Path:
    """An archive of ``work``'s entries for KEYS keys, exported from a real tuning."""
    module = import_module("importmod", MODULE)
    for n in range(KEYS):
        module.work(n)
    background_sync.wait_idle()  # the tuning's own fsyncs done before the import's are watched
    tarball = tmp_path / "entries.tar.gz"
    assert cli.main(["--dir", str(cache_dir), "export", str(tarball)]) == 0
    return tarball


def test_an_import_opens_each_folder_its_packs_and_its_key_log_once_not_per_entry(archive, tmp_path, modules):
    root = tmp_path / "imported"
    record = tmp_path / "opened.json"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WATCHED), str(record), "--dir", str(root),
                           "import", str(archive)], env=env_for(root, modules), capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = root / "work"
    assert len(list(folder.glob("*.json"))) == KEYS
    opened = [(event, path) for event, path in json.loads(record.read_text())]
    assert opened.count(("open", str(folder))) == 1  # the folder the entries are created in
    assert opened.count(("open", keylog.log_path(folder))) == 1  # one append of KEYS lines
    assert opened.count(("os.listdir", str(folder / "packs"))) <= 2  # planned, then written (was 2 per entry)
    # the key log names every entry: a later miss finds each key's entry by it
    lines = Path(keylog.log_path(folder)).read_text().splitlines()
    assert len(lines) == KEYS
    for path in folder.glob("*.json"):
        assert [p for p, _ in entries_with_key(folder, root, load(path)["key"])] == [path]


def test_every_imported_entry_is_synced_before_its_name_appears(archive, tmp_path, monkeypatch):
    root = tmp_path / "imported"
    steps: list[tuple[str, object]] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        real_fsync(fd)
        steps.append(("fsync", os.fstat(fd).st_ino))

    def link(src, dst, *args, **kwargs) -> None:
        real_link(src, dst, *args, **kwargs)
        steps.append(("link", os.stat(dst, dir_fd=kwargs.get("dst_dir_fd")).st_ino))
        names.append(dst)

    names: list[str] = []
    monkeypatch.setattr(create.os, "fsync", fsync)
    monkeypatch.setattr(create.os, "link", link)
    assert cli.main(["--dir", str(root), "import", str(archive)]) == 0
    assert sorted(names) == sorted(p.name for p in (root / "work").glob("*.json"))
    for at, (step, inode) in enumerate(steps):  # each file's fsync came before its name
        if step == "link":
            assert ("fsync", inode) in steps[:at], (names, steps)
