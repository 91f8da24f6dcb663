"""The cache commands' text mode puts the data on stdout and the notes on stderr (a tester,
2026-12-05: ``export``'s skipped-file lines and ``ls``'s unusable-file footer were on stdout, so
``ls | ...`` pipelines and ``export > file.txt`` read them as data). ``--json`` keeps stdout one
strict JSON document. Each command is a fresh ``python -m triton_dist.cache`` process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from triton_dist.tune import autotune

from .helpers import env_for


def _cli(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triton_dist.cache", "--dir", str(root), *argv],
                          env=env_for(root), capture_output=True, text=True, timeout=120)


@pytest.fixture
def cache_with_a_bad_file(cache_dir: Path) -> Path:
    """One entry (and its log) of a real tuning, and a file beside it that is not an entry."""
    @autotune([{"b": 1}, {"b": 2}], lambda n: ("n", n), n_warmup=1, n_repeat=2)
    def noted_fn(n, b):
        return n * b

    noted_fn(3)
    (entry,) = (cache_dir / "noted_fn").glob("*.json")
    assert entry.with_suffix(".log").is_file()
    bad = entry.with_name("0" * 16 + ".json")
    bad.write_text("{ not json")
    return bad


def _strict(text: str) -> dict:
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    document = json.loads(text, parse_constant=refuse)
    assert isinstance(document, dict)
    return document


def test_ls_lists_on_stdout_and_notes_the_unusable_file_on_stderr(cache_with_a_bad_file, cache_dir):
    done = _cli(cache_dir, "ls")
    assert done.returncode == 0, done.stderr
    assert "noted_fn" in done.stdout and "unusable" not in done.stdout, done.stdout
    assert "1 unusable file(s) (treated as misses)" in done.stderr, done.stderr
    listing = _strict(_cli(cache_dir, "ls", "--json").stdout)
    assert len(listing["entries"]) == 1 and listing["unusable"][0]["path"] == str(cache_with_a_bad_file)


def test_why_notes_the_skipped_file_on_stderr(cache_with_a_bad_file, cache_dir):
    # a key never tuned: every file of the function is read for the nearest entry, the bad one
    # too (a key with entries reads only those: tests/cli/test_why_large_roots.py)
    done = _cli(cache_dir, "why", "--no-import", "noted_fn", "('n', 4)")
    assert "verdict" in done.stdout and "unusable" not in done.stdout, done.stdout
    assert "1 unusable file(s) skipped" in done.stderr, done.stderr
    _strict(_cli(cache_dir, "why", "--json", "--no-import", "noted_fn", "('n', 4)").stdout)


def test_export_and_import_say_what_they_did_on_stdout_and_what_they_skipped_on_stderr(
        cache_with_a_bad_file, cache_dir, tmp_path):
    archive = tmp_path / "a.tar.gz"
    done = _cli(cache_dir, "export", "--logs", str(archive))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"exported 1 file(s) from {cache_dir} to {archive}"], done.stdout
    assert f"  skipped {cache_with_a_bad_file}: " in done.stderr, done.stderr
    assert _strict(_cli(cache_dir, "export", "--json", "--logs", str(archive)).stdout)["skipped"]

    other = tmp_path / "other"
    done = _cli(other, "import", str(archive))  # the log is skipped without --logs
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"imported 1 file(s) from {archive} into {other}; 0 unchanged, "
                                        "0 newer local entr(ies) kept"], done.stdout
    assert "  skipped noted_fn/" in done.stderr and "a log (import logs with --logs)" in done.stderr, done.stderr
    assert _strict(_cli(tmp_path / "third", "import", "--json", str(archive)).stdout)["skipped"]
