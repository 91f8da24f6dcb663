"""Ctrl-C during a cache command: one line saying it was interrupted and what was done by then,
exit 130, no traceback (a tester: import/export/prune/verify/ls printed a traceback and no summary).
The interrupt is raised where the real one lands: in the middle of the command's work."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.served import pack_files, served
from tests.unit.helpers import make_tuner
from triton_dist import cli
from triton_dist._store import admin, files, folder_writes, pack_writes, packfile, packs, verify


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
        interrupt_at(patch, folder_writes, "create_entry_text", 3)  # the third entry's write
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


def signal_after(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, call: int, sig: int) -> list[int]:
    """``owner.name`` does its real work, then, on its ``call``-th call, the process sends itself
    ``sig``: a real Ctrl-C (SIGINT) or SIGTERM landing right after that step, through the handler
    in place (the command's, for SIGTERM). The signals raised, in a list."""
    real = getattr(owner, name)
    seen, sent = [0], []

    def then_stopped(*args, **kwargs):
        result = real(*args, **kwargs)
        seen[0] += 1
        if seen[0] == call:
            handler = signal.getsignal(sig)  # a Python handler, never the default's: that would end pytest
            assert callable(handler), handler
            sent.append(sig)
            signal.raise_signal(sig)
        return result

    monkeypatch.setattr(owner, name, then_stopped)
    return sent


@pytest.mark.parametrize("sig, by", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
@pytest.mark.parametrize("unlink", [1, 2], ids=["after-the-entry", "after-its-lock-file"])
def test_a_prune_stopped_right_after_a_deletion_counts_it(
        sig: int, by: str, unlink: int, cache_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # the stop lands in the deletion, once the file is gone: "removed 0 of 8" (one short), as
    # the entry was marked done only after its lock was released
    fill(4)
    with monkeypatch.context() as patch:
        sent = signal_after(patch, os, "unlink", unlink, sig)  # 1: the entry's file, 2: its lock file
        code, _, err = run(capsys, "--dir", str(cache_dir), "prune", "--older-than", "0")
    assert sent == [sig] and code == (130 if sig == signal.SIGINT else 143) and "Traceback" not in err
    assert len(list((cache_dir / "host").glob("*.json"))) == 3
    assert err.strip() == (f"interrupted: prune stopped by {by}; removed 1 of 8 file(s) it had planned to; "
                           "run the same command again to remove the rest")
    assert run(capsys, "--dir", str(cache_dir), "prune", "--older-than", "0")[0] == 0
    assert list((cache_dir / "host").glob("*.json")) == []


def packed_node(cache_dir: Path, node: Path, old: int) -> dict[str, bytes]:
    """A node whose ``host`` folder is one pack of 4 entries, the first ``old`` of them from 2020;
    what it serves."""
    fill(4)
    for path in sorted((cache_dir / "host").glob("*.json"))[:old]:
        path.write_text(files.dumps_entry({**json.loads(path.read_text()), "created": "2020-01-01T00:00:00+00:00"}))
    packs.install(node, "host", packfile.build([(p.stem, p.read_bytes())
                                                for p in sorted((cache_dir / "host").glob("*.json"))]))
    everything = served(node, "host")
    assert len(everything) == 4 and len(pack_files(node, "host")) == 1
    return everything


def stale(cache_dir: Path, old: int) -> set[str]:
    return {p.stem for p in sorted((cache_dir / "host").glob("*.json"))[:old]}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_prune_stopped_right_after_a_pack_is_rewritten_counts_its_entries(
        sig: int, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "node"
    everything = packed_node(cache_dir, node, old=2)
    with monkeypatch.context() as patch:
        sent = signal_after(patch, pack_writes, "_rewrite_without", 1, sig)
        code, _, err = run(capsys, "--dir", str(node), "prune", "--older-than", "1")
    assert sent == [sig] and code in (130, 143)
    assert "removed 2 of 2 file(s) it had planned to" in err  # was "removed 0 of 2": they were gone
    assert served(node, "host") == {k: v for k, v in everything.items() if k not in stale(cache_dir, 2)}
    assert len(pack_files(node, "host")) == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_prune_stopped_while_it_replaces_a_pack_leaves_one_pack(
        sig: int, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # the stop lands once the pack without the old entries is in place, before the old pack is
    # removed: two packs of one sequence were left (the old entries still served by the old one)
    node = tmp_path / "node"
    everything = packed_node(cache_dir, node, old=2)
    with monkeypatch.context() as patch:
        sent = signal_after(patch, os, "replace", 1, sig)
        code, _, err = run(capsys, "--dir", str(node), "prune", "--older-than", "1")
    assert sent == [sig] and code in (130, 143) and "Traceback" not in err
    assert len(pack_files(node, "host")) == 1  # the stop waited for the old pack to go
    assert served(node, "host") == {k: v for k, v in everything.items() if k not in stale(cache_dir, 2)}
    assert "removed 2 of 2 file(s) it had planned to" in err
    assert list(node.rglob(".*.tmp")) == []
    assert run(capsys, "--dir", str(node), "verify")[0] == 0


def test_a_stop_while_a_pack_is_replaced_is_delivered_once_it_is_replaced(
        tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a command (a program calling the store): Ctrl-C is held while the new pack takes
    the old one's place, then raised as it would have been, and the handlers are as before."""
    node = tmp_path / "node"
    packed_node(cache_dir, node, old=0)
    (pack,) = pack_files(node, "host")
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        sent = signal_after(patch, os, "replace", 1, signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            packs.remove(node, node / "host", [next(iter(served(node, "host")))])
    assert sent == [signal.SIGINT] and (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert len(served(node, "host")) == 3 and not pack.exists() and len(pack_files(node, "host")) == 1
