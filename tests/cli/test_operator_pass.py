"""The cache command line driven as an operator who never read the code (2026-12-03): real
caches tuned with fixed times, then damaged the ways disks and people damage them. Each test is
a defect found so: advice that did not work, a misleading error, a help page that said nothing."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tarfile
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.served import pack_files
from triton_dist import cli
from triton_dist._store import packfile, packs
from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune

from .helpers import entries, env_for

TIMES = {1: 3.0, 2: 1.0, 4: 2.0}  # c=2 wins every key


def _tune(n: int, key_text: str = "n") -> int:
    """One real tuning of ``work`` (a fresh decorated function: it reads the disk)."""
    seen: list[int] = []

    def bench(fn, n_warmup, n_repeat):
        fn()
        return [TIMES[seen[-1]]] * n_repeat

    @autotune([{"c": 1}, {"c": 2}, {"c": 4}], key_fn=lambda n: (key_text, n), do_bench=bench)
    def work(n, c):
        seen.append(c)
        return c

    return work(n)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _pack_loose(root: Path, function: str) -> None:
    """Seed ``root`` as a campaign does: the function's loose entries become one pack."""
    directory = root / function
    items = [(p.stem, p.read_bytes()) for p in sorted(directory.glob("*.json"))]
    for path in directory.iterdir():
        if path.is_file():
            path.unlink()
    packs.install(root, function, packfile.build(items))


# ------------------------------------------------------------- verify's advice, prune --invalid

def test_prune_invalid_removes_a_corrupt_packed_entry_that_a_retuned_loose_file_shadows(cache_dir, capsys):
    """A pack cut short makes its entries misses; the tuner re-tunes them into loose files. verify
    went on reporting the packed copies as corrupt (exit 1) and said "Remove them (`prune
    --invalid`)", but prune --invalid skipped them (it looked only at served entries): removed 0,
    and verify failed forever."""
    for n in (1, 2, 3):
        assert _tune(n) == 2
    _pack_loose(cache_dir, "work")
    (pack,) = pack_files(cache_dir, "work")
    pack.write_bytes(pack.read_bytes()[: pack.stat().st_size // 2])  # the header still reads
    with pytest.warns(TritonDistWarning, match="truncated"):
        for n in (1, 2, 3):
            assert _tune(n) == 2  # the corrupt ones are misses: re-tuned into loose files
    loose = {p.name: p.read_bytes() for p in entries(cache_dir, "work")}
    assert loose, "no entry was re-tuned: the pack was not cut where the test meant"
    code, out, _ = run(capsys, "verify")
    assert code == 1 and "corrupt" in out and "prune --invalid" in out

    code, out, _ = run(capsys, "prune", "--invalid")
    assert code == 0 and "removed 0 file(s)" not in out
    code, out, _ = run(capsys, "verify")
    assert code == 0, out
    # the loose entries the tuner serves are untouched, and still hit
    assert {p.name: p.read_bytes() for p in entries(cache_dir, "work")} == loose
    code, out, _ = run(capsys, "ls", "work")
    assert code == 0 and "3 entries of 1 function(s)" in out and "unusable" not in out


def test_verify_names_what_prune_invalid_leaves_for_the_operator(cache_dir, capsys):
    """prune --invalid never deletes a file the cache does not write (the root may be a
    directory people keep other things in), so verify must not promise that it will: it names
    those files as ones to move or delete by hand."""
    assert _tune(1) == 2
    stray = cache_dir / "notes.txt"
    stray.write_text("mine\n")
    corrupt = cache_dir / "work" / ("0" * 32 + ".json")
    corrupt.write_text('{"schema": ')
    code, out, _ = run(capsys, "verify")
    assert code == 1 and str(stray) in out and str(corrupt) in out
    assert "prune --invalid" in out and "by hand" in out, out
    assert str(stray) in out.split("by hand", 1)[1] and str(corrupt) not in out.split("by hand", 1)[1]

    code, _, _ = run(capsys, "prune", "--invalid")
    assert code == 0 and stray.exists() and not corrupt.exists()
    code, out, _ = run(capsys, "verify")
    assert code == 1 and str(stray) in out and "by hand" in out
    assert "Remove them (`prune --invalid`)" not in out  # nothing left that it would remove


def test_a_folder_with_an_entrys_name_is_left_by_prune_and_named_by_verify_for_removal_by_hand(cache_dir, capsys):
    """A directory where an entry file belongs: prune --invalid planned to remove it ("would remove
    1 file(s)"), then failed with IsADirectoryError on every run, and verify said `prune --invalid`
    would remove it (found by a tester, session 28). cache.md: it never deletes a directory."""
    assert _tune(1) == 2
    folder = cache_dir / "work" / ("2" * 32 + ".json")
    folder.mkdir()
    (cache_dir / "work" / "history").mkdir(exist_ok=True)
    old = cache_dir / "work" / "history" / ("2" * 32 + ".20240101T000000000000Z.json")
    old.mkdir()
    code, out, _ = run(capsys, "verify")
    assert code == 1 and "Remove them (`prune --invalid`)" not in out
    assert str(folder) in out.split("by hand", 1)[1] and str(old) in out.split("by hand", 1)[1]
    for dry in (["--dry-run"], []):
        code, out, _ = run(capsys, "--json", "prune", "--invalid", *dry)
        assert code == 0 and json.loads(out)["removals"] == [], out
    assert folder.is_dir() and old.is_dir() and _tune(1) == 2


def test_an_archive_that_cannot_be_written_is_named_not_the_cache_root(cache_dir, tmp_path, capsys):
    """`export` into a place it cannot write told the user to point --dir at a writable cache root,
    which has nothing to do with it (found by a tester, session 28): the archive's folder is named."""
    assert _tune(1) == 2
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the archive's folder would be\n")
    code, out, err = run(capsys, "export", str(blocker / "out.tar.gz"))
    assert code == 1 and f"cannot write the archive {blocker / 'out.tar.gz'}" in err
    assert f"free space of {blocker}" in err and "writable cache root" not in err
    assert not list(tmp_path.glob("**/.out.tar.gz.*.tmp"))


def test_export_never_replaces_a_link_or_a_device_and_import_never_reads_one(cache_dir, tmp_path, capsys):
    """`export ARCHIVE` wrote beside ARCHIVE and renamed over it: a symbolic link (/dev/stdout is one)
    or a device node there was replaced by a regular file, exit 0 (a tester replaced the machine's
    /dev/full as root); `import /dev/zero` spun for ever. Both are refused, and nothing changes."""
    assert _tune(1) == 2
    target = tmp_path / "target.tgz"
    target.write_bytes(b"keep me")
    link = tmp_path / "link.tgz"
    link.symlink_to(target)
    fifo = tmp_path / "pipe.tgz"
    os.mkfifo(fifo)
    for where, kind in ((link, "a symbolic link"), (fifo, "a device, FIFO or socket"), (tmp_path, "a directory")):
        code, _, err = run(capsys, "export", str(where))
        assert code == 1 and kind in err, err
    assert link.is_symlink() and target.read_bytes() == b"keep me" and os.path.exists(fifo)
    assert not os.path.isfile(fifo)
    code, _, err = run(capsys, "import", "/dev/zero")
    assert code == 1 and "not a regular file" in err


def test_a_link_loop_as_root_and_an_over_long_id_are_told_what_they_are(cache_dir, tmp_path, capsys):
    """A root that is a loop of links was said to link to a folder "which does not exist: create that
    folder" (it exists: it links back); `show` of an id too long for a file name gave the
    permissions advice (a tester's hostile inputs, 2026-12-04)."""
    one, two = tmp_path / "loop1", tmp_path / "loop2"
    one.symlink_to(two)
    two.symlink_to(one)
    code, _, err = run(capsys, "ls", "--dir", str(one))
    assert code == 1 and "leads back to itself" in err and "create that folder" not in err
    assert _tune(1) == 2
    code, _, err = run(capsys, "show", "a" * 300)
    assert code == 1 and "has an id starting with" in err and "permissions" not in err


def test_a_cache_root_that_is_a_link_to_a_missing_folder_is_said_so(tmp_path, monkeypatch, capsys):
    """A root that is a symbolic link to a volume not mounted yet: the tuner warned "[Errno 17] File
    exists", `ls` "the directory does not exist" and `verify` "no cache there" (found by a tester,
    session 28); each names the link and its missing target now."""
    target = tmp_path / "not-yet" / "cache"
    root = tmp_path / "cache"
    root.symlink_to(target)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(root))
    with pytest.warns(TritonDistWarning, match=r"is a symbolic link to .*not-yet/cache, which does not exist"):
        assert _tune(1) == 2  # tuning works, nothing saved
    code, _, err = run(capsys, "ls")
    assert code == 1 and "which does not exist" in err and str(target) in err
    code, out, _ = run(capsys, "verify")
    assert code == 0 and "which does not exist" in out


# ------------------------------------------------------------------ output into a closed pipe

def test_output_into_a_closed_pipe_is_not_reported_as_a_disk_error(cache_dir, tmp_path):
    """`ls | head -1` closes the pipe early. The broken pipe was reported as "error: [Errno 32]
    Broken pipe. Check the permissions and free space there, or point --dir ... at a writable
    cache root": advice about the cache for a reader that stopped reading."""
    assert _tune(1, "k" * 200_000) == 2  # one ls line longer than a pipe's buffer
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone: every write fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "triton_dist.cache", "ls"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=env_for(cache_dir),
                              cwd=tmp_path, timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert "permissions" not in done.stderr and "--dir" not in done.stderr, done.stderr
    assert done.returncode == 1


# ------------------------------------------------------------------------------ --help pages

@pytest.mark.parametrize(("command", "says"), [
    ("ls", "list entries"), ("show", "every candidate"), ("why", "misses"),
    ("verify", "exit 1 on corrupt"), ("export", "archive file"), ("import", "atomically"),
    ("prune", "remove old entries")])
def test_each_commands_help_says_what_it_does(capsys, command, says):
    """`verify --help` printed only the options, never what verify does or what its exit status
    means: the sentence was in the command list of the top-level help only."""
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert says in " ".join(out.split()), out


def test_the_archive_argument_says_what_it_is(capsys):
    for command in ("export", "import"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "ARCHIVE tar.gz" in out or "ARCHIVE the" in out, out


# ------------------------------------------------------------------ what a message names

def test_an_entry_of_another_schema_version_is_named_as_such(cache_dir, capsys):
    """An entry that a newer (or older) triton_dist wrote, with another schema version, was
    "not a triton_dist.autotune/v1 entry", as a file of some other program is; the operator of a
    fleet with two versions could not tell that `prune --invalid` would delete the other
    version's entries."""
    assert _tune(1) == 2
    (path,) = entries(cache_dir, "work")
    path.write_text(path.read_text().replace("triton_dist.autotune/v1", "triton_dist.autotune/v2"))
    code, out, _ = run(capsys, "verify")
    assert code == 1 and "triton_dist.autotune/v2" in out and "version" in out, out
    code, _, err = run(capsys, "show", path.stem[:8])
    assert code == 1 and "triton_dist.autotune/v2" in err and "version" in err, err


def test_a_dir_that_is_a_file_is_not_called_missing(tmp_path, capsys):
    """`--dir` naming a file said "the directory does not exist" (it exists: it is a file)."""
    target = tmp_path / "settings.yaml"
    target.write_text("x: 1\n")
    for command in (["ls"], ["show", "abc"], ["prune", "--history"], ["export", str(tmp_path / "a.tgz")]):
        code, _, err = run(capsys, "--dir", str(target), *command)
        assert code == 1 and "not a directory" in err and "does not exist" not in err, (command, err)
    assert target.read_text() == "x: 1\n"


# ------------------------------------------------------------- typos and wrong kinds of path

def test_export_onto_a_directory_is_refused_with_a_file_name_to_use(cache_dir, tmp_path, capsys):
    """``export DIR`` wrote its temporary file into DIR's parent and failed renaming it onto DIR,
    with advice about permissions and free space."""
    _tune(8)
    target = tmp_path / "out"
    target.mkdir()
    code, _, err = run(capsys, "export", str(target))
    assert code == 1 and "is a directory" in err and str(target / "autotune-cache.tar.gz") in err
    assert "free space" not in err and list(target.iterdir()) == [] and list(tmp_path.glob(".*.tmp")) == []


def test_importing_a_file_that_is_not_a_tar_says_so_in_one_line(cache_dir, tmp_path, capsys):
    """tarfile's error listed the gz, bz2 and xz attempts, one per line."""
    bogus = tmp_path / "cache.tgz"
    bogus.write_text("these are notes, not an archive\n")
    code, _, err = run(capsys, "import", str(bogus))
    assert code == 1 and "it is not a tar file (`export` writes a tar.gz" in err
    assert len(err.strip().splitlines()) == 1 and "method bz2" not in err


def test_pruning_a_function_that_is_not_there_is_an_error_naming_what_is(cache_dir, capsys):
    """``prune --function <typo> ...`` removed nothing and reported "removed 0 file(s)", exit 0."""
    _tune(8)
    code, out, err = run(capsys, "prune", "--function", "wrok", "--older-than", "0")
    assert code == 1 and "no entries of wrok" in err and "work" in err and "nothing removed" in err
    assert len(entries(cache_dir, "work")) == 1  # nothing removed, the real function's entry untouched
    code, out, _ = run(capsys, "prune", "--function", "work", "--older-than", "0", "--dry-run")
    assert code == 0 and "would remove 2 file(s)" in out  # the entry and its tuning log


# --------------------------------------------------------------- the operator's second pass

def _tar(path: Path, members: list[tuple[str, bytes | None]]) -> Path:
    """A tar.gz of ``members``: (name, bytes) files and (name, None) directories."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_importing_an_archive_without_entries_is_refused_naming_export(cache_dir, tmp_path, capsys):
    """An empty tar, or one with a manifest and directories but no entry, was "imported 0
    file(s) ...", exit 0: the node the operator meant to seed stayed cold."""
    manifest = json.dumps({"format": "triton_dist.cache-archive/v1", "entries": 0}).encode()
    archives = [_tar(tmp_path / "empty.tar.gz", []),
                _tar(tmp_path / "dirs.tar.gz", [("MANIFEST.json", manifest), ("work", None),
                                                ("work/history", None)])]
    for archive in archives:
        for dry in ([], ["--dry-run"]):
            code, out, err = run(capsys, "import", str(archive), *dry)
            assert code == 1 and out == "", (archive, out)
            assert len(err.strip().splitlines()) == 1, err
            assert "holds no cache entries" in err and str(archive) in err and "export ARCHIVE" in err, err
    assert not cache_dir.exists()  # nothing written, not even the root


def test_prune_invalid_keeps_the_entries_of_another_triton_dist_version(cache_dir, capsys):
    """A root two triton_dist versions share: prune --invalid deleted the other version's entries
    (another schema version) as if they were corrupt; that version's jobs then started cold."""
    for n in (1, 2):
        assert _tune(n) == 2
    newer, _ = entries(cache_dir, "work")
    newer.write_text(newer.read_text().replace("triton_dist.autotune/v1", "triton_dist.autotune/v2"))
    corrupt = cache_dir / "work" / ("0" * 32 + ".json")
    corrupt.write_text('{"schema": ')
    code, out, err = run(capsys, "prune", "--invalid")
    assert code == 0 and not corrupt.exists() and newer.exists(), out
    assert newer.with_suffix(".log").exists()
    (kept,) = [line for line in err.splitlines() if "kept" in line]  # a note: stderr
    assert "1 file(s)" in kept and "another triton_dist version" in kept and "--other-versions" in kept, err
    assert "kept" not in out, out
    code, out, _ = run(capsys, "verify")  # still reported, with advice that prune follows
    assert code == 1 and "--other-versions" in out and "Remove them (`prune --invalid`)" not in out, out

    code, out, _ = run(capsys, "prune", "--invalid", "--other-versions", "--dry-run")
    assert code == 0 and "would remove 2 file(s)" in out and newer.exists()  # the entry and its log
    code, out, _ = run(capsys, "prune", "--other-versions")
    assert code == 0 and not newer.exists() and not newer.with_suffix(".log").exists(), out
    assert len(entries(cache_dir, "work")) == 1
    with pytest.raises(SystemExit):
        cli.main(["prune", "--help"])
    assert "--other-versions" in capsys.readouterr().out


def _nobody() -> tuple[int, int]:
    """(uid, gid) of ``nobody``, whom :func:`_as_other_user` becomes when this is root."""
    try:
        user = pwd.getpwnam("nobody")
        return user.pw_uid, user.pw_gid
    except KeyError:
        return 65534, 65534


@contextlib.contextmanager
def _shared_root(cache_dir: Path) -> Iterator[Path]:
    """A copy of ``cache_dir`` in a folder every user can reach (a shared cache root), removed
    after, whatever its tests chmod'ed. :func:`_give_to_other_user` hands it over."""
    base = Path(tempfile.mkdtemp(prefix="td-unreadable-"))
    try:
        base.chmod(0o755)  # another user must reach the root
        root = base / "cache"
        shutil.copytree(cache_dir, root)
        yield root
    finally:
        for path in base.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o700)
        shutil.rmtree(base)


def _give_to_other_user(root: Path) -> None:
    """Everything under ``root`` owned by the user :func:`_as_other_user` runs as (when this is
    root: ``nobody``; else it is this user already)."""
    if os.geteuid() == 0:
        uid, gid = _nobody()
        for path in [root, *root.rglob("*")]:
            os.chown(path, uid, gid, follow_symlinks=False)


def _as_other_user(argv: list[str]) -> tuple[int, str, str]:
    """``cli.main(argv)`` as a user other than root (whom permissions do not stop): as this user
    when it is not root, else in a forked child that drops to ``nobody`` (the interpreter lives
    where nobody may not read: the child runs the modules this process has imported)."""
    if os.geteuid() != 0:
        code = cli.main(argv)
        return code, "", ""
    if not hasattr(os, "fork"):
        pytest.skip("running as root without os.fork: cannot run the command as a user whom "
                    "permissions stop (root reads a chmod 000 folder)")
    uid, gid = _nobody()
    datetime.datetime.strptime("2026", "%Y")  # imports _strptime (prune's history stamps) here
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 70
            try:
                sys.stdout, sys.stderr = out, err
                try:
                    os.setgroups([])
                    os.setgid(gid)
                    os.setuid(uid)
                except OSError as exc:
                    err.write(f"cannot drop root: {exc}")
                    code = 77
                else:
                    code = cli.main(argv)
            except BaseException:  # noqa: BLE001 - the child reports anything, then exits
                traceback.print_exc(file=err)
            finally:
                out.flush()
                err.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        texts = out.read(), err.read()
    if code == 77:
        pytest.skip(f"running as root and cannot become uid {uid} ({texts[1]}): root reads a chmod 000 "
                    "folder, so the test needs another user")
    return code, *texts


def _as_user(capsys, *args: str) -> tuple[int, str, str]:
    code, out, err = _as_other_user(list(args))
    if os.geteuid() != 0:
        captured = capsys.readouterr()
        out, err = captured.out, captured.err
    return code, out, err


def test_an_unreadable_function_folder_is_reported_and_the_others_are_served(cache_dir, capsys):
    """One function folder the user cannot read (chmod 000, another user's umask) made `show ID`
    of every other function and `prune --invalid --dry-run` fail with "Permission denied ...
    check the permissions and free space", and `ls` left it out without a word."""
    assert _tune(1) == 2

    @autotune([{"b": 1}, {"b": 2}], key_fn=lambda n: ("m", n), do_bench=lambda fn, w, r: [1.0] * r)
    def beta(n, b):
        return b

    beta(3)
    with _shared_root(cache_dir) as root:
        (beta_entry,) = entries(root, "beta")
        (work_entry,) = entries(root, "work")
        corrupt = root / "beta" / ("0" * 32 + ".json")
        corrupt.write_text('{"schema": ')
        _give_to_other_user(root)
        locked = root / "work"
        locked.chmod(0)

        def names_the_folder(err: str) -> bool:
            lines = [line for line in err.splitlines() if str(locked) in line]
            return len(lines) == 1 and "permission" in lines[0].lower() and "chmod" in lines[0]

        for spec in (beta_entry.stem[:10], f"beta/{beta_entry.stem[:10]}"):
            code, out, err = _as_user(capsys, "--dir", str(root), "show", spec)
            assert code == 0 and str(beta_entry) in out, (spec, out, err)
        code, out, err = _as_user(capsys, "--dir", str(root), "show", beta_entry.stem[:10])
        assert names_the_folder(err), err
        code, out, err = _as_user(capsys, "--dir", str(root), "prune", "--invalid", "--dry-run")
        assert code == 0 and str(corrupt) in out and "would remove 1 file(s)" in out, (out, err)
        assert names_the_folder(err), err
        code, out, err = _as_user(capsys, "--dir", str(root), "ls")
        assert code == 0 and "beta" in out and names_the_folder(err), (out, err)
        # the folder named: the command could not do what was asked
        code, out, err = _as_user(capsys, "--dir", str(root), "show", f"work/{work_entry.stem[:10]}")
        assert code == 1 and names_the_folder(err), err
        code, out, err = _as_user(capsys, "--dir", str(root), "prune", "--invalid", "--dry-run",
                                  "--function", "work", "--function", "beta")
        assert code == 1 and str(corrupt) in out and names_the_folder(err), (out, err)
        assert corrupt.exists()


def test_an_entry_file_the_user_cannot_read_is_kept_and_reported_not_pruned_as_corrupt(cache_dir, capsys):
    """Another user's entry file with mode 0600 in a shared root (this user may still remove it:
    the folder is writable): `prune --invalid` took it for a corrupt file and deleted it, and that
    user's jobs started cold; `verify` had prune remove it too."""
    for n in (1, 2):
        assert _tune(n) == 2
    with _shared_root(cache_dir) as root:
        served, locked = entries(root, "work")
        corrupt = root / "work" / ("0" * 32 + ".json")
        corrupt.write_text('{"schema": ')
        _give_to_other_user(root)
        if os.geteuid() == 0:  # root's file, 0600, in nobody's root (else this user's, chmod 000)
            os.chown(locked, 0, 0)
        locked.chmod(0o600 if os.geteuid() == 0 else 0)
        log = locked.with_suffix(".log")
        assert log.exists()

        def names_the_file(err: str) -> bool:
            lines = [line for line in err.splitlines() if str(locked) in line]
            return (len(lines) == 1 and "permission" in lines[0].lower() and "chmod" in lines[0]
                    and "Traceback" not in err)

        code, out, err = _as_user(capsys, "--dir", str(root), "prune", "--invalid", "--dry-run")
        assert code == 0 and str(corrupt) in out and str(locked) not in out, (out, err)
        assert "would remove 1 file(s)" in out and names_the_file(err), (out, err)
        code, out, err = _as_user(capsys, "--dir", str(root), "--json", "prune", "--invalid")
        document = json.loads(out)
        assert code == 0 and [r["path"] for r in document["removals"]] == [str(corrupt)], (out, err)
        assert document["unreadable_files"] == [str(locked)] and document["kept_other_versions"] == []
        assert locked.exists() and log.exists() and not corrupt.exists() and served.exists()
        corrupt.write_text('{"schema": ')
        code, out, err = _as_user(capsys, "--dir", str(root), "prune", "--invalid")
        assert code == 0 and locked.exists() and log.exists() and not corrupt.exists(), (out, err)
        (kept,) = [line for line in err.splitlines() if line.startswith("kept")]  # a note: stderr
        assert "1 file(s)" in kept and "cannot read" in kept and "kept" not in out, (out, err)
        assert names_the_file(err), err
        # the function named: the command could not do what was asked for all of it
        code, out, err = _as_user(capsys, "--dir", str(root), "prune", "--invalid", "--function", "work")
        assert code == 1 and locked.exists() and names_the_file(err), (out, err)

        code, out, err = _as_user(capsys, "--dir", str(root), "verify")
        (line,) = [line for line in out.splitlines() if str(locked) in line]
        assert code == 1 and "unreadable" in line and "corrupt" not in out, out
        assert "permission" in out.lower() and "prune --invalid" not in out, out
        code, out, err = _as_user(capsys, "--dir", str(root), "ls")
        assert code == 0 and served.stem[:12] in out and names_the_file(err), (out, err)
        assert "unusable" not in out, out
        code, out, err = _as_user(capsys, "--dir", str(root), "--json", "ls")
        assert code == 0 and json.loads(out)["unreadable_files"] == [str(locked)], (out, err)
        code, out, err = _as_user(capsys, "--dir", str(root), "ls", "work")
        assert code == 1 and names_the_file(err), (out, err)
        code, out, err = _as_user(capsys, "--dir", str(root), "show", served.stem[:12])
        assert code == 0 and str(served) in out, (out, err)
        for spec in (locked.stem[:12], str(locked)):
            code, out, err = _as_user(capsys, "--dir", str(root), "show", spec)
            assert code == 1 and out == "" and names_the_file(err), (spec, out, err)
            assert len(err.strip().splitlines()) == 1, err


def test_why_with_an_unknown_verdict_exits_3_saying_what_to_give(cache_dir, capsys):
    """`why work KEY --no-import` cannot compare the source: the verdict was UNKNOWN, exit 0 -
    the exit status of a hit, so a script asking "would it hit?" was told yes."""
    assert _tune(1) == 2
    code, out, _ = run(capsys, "why", "work", "('n', 1)", "--no-import")
    assert code == 3 and "UNKNOWN" in out, out
    assert "source" in out and "module:attr" in out, out
    code, out, _ = run(capsys, "--json", "why", "work", "('n', 1)", "--no-import")
    assert code == 3 and json.loads(out)["verdict"] == "unknown"
    code, _, _ = run(capsys, "why", "work", "('n', 7)", "--no-import")
    assert code == 1  # a key never tuned: a miss, whatever the source
    with pytest.raises(SystemExit):
        cli.main(["why", "--help"])
    assert "3 unknown" in " ".join(capsys.readouterr().out.split())
