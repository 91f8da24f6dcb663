"""SIGTERM during a cache command (``kill``, ``timeout``, Kubernetes, a job scheduler): the same
one line as Ctrl-C, saying what was done by then, exit 143 (128 + 15), nothing left half-written
(Python's default ended the process where it was). The command runs in a real process that
stops at a chosen point of its work (test_cli_interrupt.py's points) and tells the test, which
sends it a real SIGTERM there; the handler is the command's only: the import of the package
installs none, and the one in place before is put back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.served import pack_files, served
from triton_dist import cli
from triton_dist._cli import stopping
from triton_dist._store import admin, files, packfile, packs

from .helpers import env_for
from .test_cli_interrupt import fill

#: runs the command line with ``MODULE.ATTR`` stopping at its CALL-th call (WHEN: before or after
#: the real one): it writes one line to the descriptor FD, then waits for the test's SIGTERM
DRIVER = textwrap.dedent("""
    import importlib, os, sys, time
    from triton_dist import cli
    module, attr, call, when, fd = sys.argv[1:6]
    owner = importlib.import_module(module)
    real, seen = getattr(owner, attr), [0]
    def stopping(*args, **kwargs):
        seen[0] += 1
        if seen[0] != int(call):
            return real(*args, **kwargs)
        result = real(*args, **kwargs) if when == "after" else None
        os.write(int(fd), b"mid-way\\n")
        time.sleep(60)  # the SIGTERM lands here
        return result if when == "after" else real(*args, **kwargs)
    setattr(owner, attr, stopping)
    sys.exit(cli.main(sys.argv[6:]))
""")


def terminated_at(point: str, *args: str, root: Path, at_stop: Callable[[], None] | None = None,
                  sig: int = signal.SIGTERM) -> tuple[int, str, str]:
    """Run ``triton-dist-cache --dir ROOT ARGS``, stopped at ``point`` (``module:attr:call:when``);
    send it ``sig`` there (after ``at_stop()``, which looks at the files mid-way): (status, stdout, stderr)."""
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as told:
        try:
            run = subprocess.Popen([sys.executable, "-c", DRIVER, *point.split(":"), str(write_end),
                                    "--dir", str(root), *args], env=env_for(root), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, pass_fds=(write_end,))
        finally:
            os.close(write_end)
        try:
            reached = told.readline()  # empty: it ended without reaching the point
            if reached:
                if at_stop is not None:
                    at_stop()
                run.send_signal(sig)
            out, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
    assert reached, f"never reached {point}: exit {run.returncode}\n{err}"
    return run.returncode, out, err


def cli_json(root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """``triton-dist-cache --dir ROOT ARGS --json`` in a fresh process."""
    done = subprocess.run([sys.executable, "-m", "triton_dist.cache", "--dir", str(root), *args, "--json"],
                          env=env_for(root), capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout)


def tmp_files(root: Path) -> list[Path]:
    return list(root.rglob(".*.tmp"))


def assert_clean(root: Path) -> None:
    """Every file whole: verify finds no problem and no temporary file of a write."""
    code, doc = cli_json(root, "verify")
    assert code == 0 and doc["problems"] == [] and doc["leftovers"] == [], doc


def dated(path: Path, created: str) -> bytes:
    """Rewrite the entry file ``path`` as created at ``created``; its bytes."""
    path.write_text(files.dumps_entry({**json.loads(path.read_text()), "created": created}))
    return path.read_bytes()


def one_line(err: str, command: str) -> str:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"interrupted: {command} stopped by SIGTERM; "), err
    return err.strip()


def test_a_terminated_import_says_how_many_files_went_in_and_a_rerun_finishes(
        cache_dir: Path, tmp_path: Path) -> None:
    fill(5)
    tarball = tmp_path / "a.tar.gz"
    assert cli.main(["--dir", str(cache_dir), "export", str(tarball)]) == 0
    other = tmp_path / "other"
    code, _, err = terminated_at("triton_dist._store.folder_writes:create_entry_text:3:before", "import", str(tarball),
                                 root=other)
    assert code == 143
    assert one_line(err, "import") == (
        f"interrupted: import stopped by SIGTERM; imported 2 of 5 file(s) of {tarball}; those are whole "
        "(each written atomically), run the same command again to finish")
    assert len(list((other / "host").glob("*.json"))) == 2
    assert_clean(other)
    code, doc = cli_json(other, "import", str(tarball))
    assert code == 0 and len(doc["written"]) == 3 and len(list((other / "host").glob("*.json"))) == 5


def test_sigterm_in_the_middle_of_a_files_write_leaves_the_old_file_and_no_temporary_one(
        cache_dir: Path, tmp_path: Path) -> None:
    fill(3)
    tarball = tmp_path / "a.tar.gz"
    assert cli.main(["--dir", str(cache_dir), "export", str(tarball)]) == 0
    # the local entries made older than the archive's: the import replaces each (write, rename)
    local = {p: dated(p, "2020-01-01T00:00:00+00:00") for p in (cache_dir / "host").glob("*.json")}

    def mid_write() -> None:  # the first replacement's temporary file is complete, not yet renamed
        assert len(tmp_files(cache_dir)) == 1

    code, _, err = terminated_at("os:fsync:1:before", "import", str(tarball), root=cache_dir, at_stop=mid_write)
    assert code == 143 and "imported 0 of 3 file(s)" in one_line(err, "import")
    assert tmp_files(cache_dir) == [] and {p: p.read_bytes() for p in local} == local
    assert_clean(cache_dir)


def test_a_terminated_prune_says_how_many_files_it_removed(cache_dir: Path) -> None:
    fill(4)
    code, _, err = terminated_at("triton_dist._store.admin:_remove:3:before", "prune", "--older-than", "0",
                                 root=cache_dir)
    assert code == 143  # the plan: each entry, then its log
    assert one_line(err, "prune") == ("interrupted: prune stopped by SIGTERM; removed 2 of 8 file(s) it had "
                                      "planned to; run the same command again to remove the rest")
    assert len(list((cache_dir / "host").glob("*.json"))) == 3 and len(list((cache_dir / "host").glob("*.log"))) == 3
    assert_clean(cache_dir)
    assert cli.main(["--dir", str(cache_dir), "prune", "--older-than", "0"]) == 0
    assert list((cache_dir / "host").glob("*.json")) == []


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_prune_terminated_while_it_rewrites_a_pack_leaves_one_pack_and_says_what_went(
        when: str, cache_dir: Path, tmp_path: Path) -> None:
    fill(4)
    old = sorted((cache_dir / "host").glob("*.json"))[:2]
    for path in old:  # two entries of 2020: `prune --older-than 1` takes them out of the pack
        dated(path, "2020-01-01T00:00:00+00:00")
    node = tmp_path / "node"
    packs.install(node, "host", packfile.build([(p.stem, p.read_bytes())
                                                for p in sorted((cache_dir / "host").glob("*.json"))]))
    everything = served(node, "host")
    assert len(everything) == 4 and len(pack_files(node, "host")) == 1
    pruned = {k: v for k, v in everything.items() if k not in {p.stem for p in old}}

    # before: the pack without them not written yet; after: written, the old one gone with it
    # (both under one held stop: a SIGTERM between them left two packs of one sequence)
    code, _, err = terminated_at(f"triton_dist._store.pack_writes:_write_pack:1:{when}", "prune", "--older-than", "1",
                                 root=node)
    assert code == 143
    assert f"removed {0 if when == 'before' else 2} of 2 file(s)" in one_line(err, "prune")
    assert served(node, "host") == (everything if when == "before" else pruned)
    assert len(pack_files(node, "host")) == 1 and tmp_files(node) == []
    assert_clean(node)
    assert cli.main(["--dir", str(node), "prune", "--older-than", "1"]) == 0
    assert served(node, "host") == pruned and len(pack_files(node, "host")) == 1


def test_a_terminated_export_leaves_no_archive_and_the_one_there_unchanged(cache_dir: Path, tmp_path: Path) -> None:
    fill(4)
    tarball = tmp_path / "a.tar.gz"
    tarball.write_bytes(b"an older archive")

    def mid_write() -> None:  # the archive's temporary file holds the manifest and an entry
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] != []

    code, out, err = terminated_at("triton_dist._store.archive:_add:3:before", "export", str(tarball), "--json",
                                   root=cache_dir, at_stop=mid_write)
    assert code == 143 and json.loads(out)["error"] == "Terminated"
    assert one_line(err, "export") == ("interrupted: export stopped by SIGTERM; no archive was written (one "
                                       "already there is unchanged); the cache was only read")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []
    assert tarball.read_bytes() == b"an older archive"


def temporaries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_killed_exports_temporary_archive_is_removed_by_the_next_export_never_a_live_ones(
        cache_dir: Path, tmp_path: Path) -> None:
    # SIGKILL (an out-of-memory kill, a job's hard stop) runs no handler: .a.tar.gz.<pid>.tmp stayed
    # beside the archive for ever, one per killed export
    fill(4)
    tarball = tmp_path / "a.tar.gz"
    seen: list[Path] = []

    def meanwhile() -> None:  # the first export stopped mid-write, alive: another export to the path
        seen.extend(temporaries(tmp_path))
        code, doc = cli_json(cache_dir, "export", str(tarball))
        assert code == 0 and len(doc["written"]) == 4 and doc.get("leftovers_removed", []) == [], doc
        assert temporaries(tmp_path) == seen  # a live export's temporary archive is never removed

    code, _, _ = terminated_at("triton_dist._store.archive:_add:3:before", "export", str(tarball),
                               root=cache_dir, at_stop=meanwhile, sig=signal.SIGKILL)
    assert code == -signal.SIGKILL and len(seen) == 1
    assert temporaries(tmp_path) == seen  # nothing removed it
    again = subprocess.run([sys.executable, "-m", "triton_dist.cache", "--dir", str(cache_dir), "export",
                            str(tarball)], env=env_for(cache_dir), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [f"exported 4 file(s) from {cache_dir} to {tarball}"]
    assert again.stderr.splitlines() == [  # a note: stderr
        f"removed 1 temporary archive(s) that killed exports to {tarball} had left beside it (their processes "
        f"no longer run): {seen[0].name}"]
    assert temporaries(tmp_path) == []
    code, doc = cli_json(tmp_path / "other", "import", str(tarball))
    assert code == 0 and len(doc["written"]) == 4


#: holds an exclusive lock on the file argv[1] (as an export holds its temporary archive's) until killed
HOLDER = ("import fcntl, sys, time; f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); "
          "print('held', flush=True); time.sleep(120)")


def test_a_temporary_archive_whose_lock_is_held_is_kept_and_other_files_are_left_alone(
        cache_dir: Path, tmp_path: Path) -> None:
    """On a shared file system another host's live export to the same path has a pid that does not
    run here: its lock says it is live."""
    fill(2)
    tarball = tmp_path / "a.tar.gz"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, timeout=60)
    gone = int(ended.stdout)  # a process that has ended
    elsewhere = tmp_path / f".a.tar.gz.{gone}.tmp"
    others = [tmp_path / f".b.tar.gz.{gone}.tmp", tmp_path / ".a.tar.gz.x1.tmp", tmp_path / ".a.tar.gz.0.tmp"]
    for path in [elsewhere, *others]:
        path.write_bytes(b"part of an archive")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(elsewhere)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        code, doc = cli_json(cache_dir, "export", str(tarball))
        assert code == 0 and doc.get("leftovers_removed", []) == [] and elsewhere.exists()
    finally:
        holder.kill()
        holder.communicate()
    code, doc = cli_json(cache_dir, "export", str(tarball))  # its process gone, the lock with it
    assert code == 0 and temporaries(tmp_path) == sorted(others)
    assert doc["leftovers_removed"] == [str(elsewhere)]  # another archive's, and names no export writes


@pytest.mark.parametrize("command", ["verify", "ls"])
def test_terminated_reading_commands_say_nothing_changed(command: str, cache_dir: Path) -> None:
    fill(3)
    code, _, err = terminated_at("triton_dist._store.files:load_json:2:before", command, root=cache_dir)
    assert code == 143 and ("checked" if command == "verify" else "nothing changed") in one_line(err, command)


def test_the_handler_is_the_commands_only(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the package installs no handler; a command's is put back as it was after it."""
    imported = subprocess.run(
        [sys.executable, "-c", "import signal, triton_dist, triton_dist.cli, triton_dist.cache, triton_dist.tune, "
                               "triton_dist._cli.commands; print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"],
        env=env_for(cache_dir), capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0 and imported.stdout.strip() == "True", imported.stderr
    fill(2)
    during = []
    real = admin.list_entries

    def looking(*args, **kwargs):
        during.append(signal.getsignal(signal.SIGTERM))
        return real(*args, **kwargs)

    def own(signum, frame):  # a program's own handler, around a call of cli.main
        raise AssertionError("not called")

    monkeypatch.setattr(admin, "list_entries", looking)
    for before in (signal.SIG_DFL, own, signal.SIG_IGN):
        previous = signal.signal(signal.SIGTERM, before)
        try:
            assert cli.main(["--dir", str(cache_dir), "ls"]) == 0
            assert signal.getsignal(signal.SIGTERM) is before
        finally:
            signal.signal(signal.SIGTERM, previous)
    # while it ran: the command's handler; SIGTERM ignored by whoever started it stays ignored
    assert [isinstance(h, stopping._OnSigterm) for h in during] == [True, True, False]
    assert during[2] is signal.SIG_IGN
