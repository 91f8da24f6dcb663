"""The cache command line driven as an operator who never read the code (2026-12-03): real
caches tuned with fixed times, then damaged the ways disks and people damage them. Each test is
a defect found so: advice that did not work, a misleading error, a help page that said nothing."""

from __future__ import annotations

import os
import subprocess
import sys
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
