"""Ctrl-C during a cache command: one line saying it was interrupted and what was done by then,
exit 130, no traceback (a tester: import/export/prune/verify/ls printed a traceback and no summary).
The interrupt is raised where the real one lands: in the middle of the command's work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.helpers import make_tuner
from triton_dist import cli
from triton_dist._store import admin, files, verify


def fill(n: int) -> None:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0}, n_warmup=0, n_repeat=1)
    for k in range(n):
        tuned(k)


def interrupt_at(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, call: int) -> None:
    """``owner.name`` raises KeyboardInterrupt on its ``call``-th call (Ctrl-C landing there)."""
    real = getattr(owner, name)
    seen = [0]

    def stopping(*args, **kwargs):
        seen[0] += 1
        if seen[0] == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, stopping)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_interrupted_import_says_how_many_files_went_in_and_a_rerun_finishes(
        cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fill(5)
    tarball = tmp_path / "a.tar.gz"
    assert run(capsys, "--dir", str(cache_dir), "export", str(tarball))[0] == 0
    other = tmp_path / "other"
    with monkeypatch.context() as patch:
        interrupt_at(patch, files, "write_entry", 3)
        code, out, err = run(capsys, "--dir", str(other), "import", str(tarball))
    assert code == 130 and "Traceback" not in err
    assert err.strip() == (f"interrupted: import stopped by Ctrl-C; imported 2 of 5 file(s) of {tarball}; those are "
                           "whole (each written atomically), run the same command again to finish")
    assert len(list((other / "host").glob("*.json"))) == 2
    code, out, _ = run(capsys, "--dir", str(other), "import", str(tarball))
    assert code == 0 and len(list((other / "host").glob("*.json"))) == 5


def test_an_interrupted_prune_says_how_many_files_it_removed(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fill(4)
    interrupt_at(monkeypatch, admin, "_remove", 3)
    code, _, err = run(capsys, "--dir", str(cache_dir), "prune", "--older-than", "0")
    assert code == 130 and "Traceback" not in err
    assert err.strip().startswith("interrupted: prune stopped by Ctrl-C; removed 2 of ")
    assert "run the same command again to remove the rest" in err


@pytest.mark.parametrize("command", ["verify", "ls", "export"])
def test_interrupted_reading_commands_say_nothing_changed(
        command: str, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fill(3)
    interrupt_at(monkeypatch, admin._cache, "load_json", 2)  # while it reads the entries
    args = [str(tmp_path / "x.tar.gz")] if command == "export" else []
    code, _, err = run(capsys, "--dir", str(cache_dir), command, *args)
    assert code == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith(f"interrupted: {command} stopped by Ctrl-C; ")
    assert ("checked" in err) if command == "verify" else ("nothing changed" in err or "only read" in err)
    assert not (tmp_path / "x.tar.gz").exists()


def test_with_json_the_interrupt_is_a_json_document_too(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fill(2)
    interrupt_at(monkeypatch, verify, "_classify_json", 1)
    code, out, err = run(capsys, "--dir", str(cache_dir), "verify", "--json")
    assert code == 130 and json.loads(out)["error"] == "KeyboardInterrupt"
    assert err.startswith("interrupted: verify stopped by Ctrl-C; checked ")
