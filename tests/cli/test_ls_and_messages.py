"""What the cache command line shows and says (issue 18 items 9, 10, 12): ``ls`` shows the
fields that decide between configs and fits COLUMNS; a typo in a path, a function or an option
gets a message that says what is there and what to type."""

from __future__ import annotations

import json
import sys

import pytest
import triton

from triton_dist import cli
from triton_dist.tune import autotune

from .helpers import entries, load

# the demo's shape of space: BLOCK and num_warps vary, num_stages is the same everywhere
SPACE = [{"cfg": triton.Config({"BLOCK": b}, num_stages=3, num_warps=w)} for b in (256, 512) for w in (4, 8)]
# per key: the times of the four configs; key 1's best is (512, 4), key 2's (512, 8)
TIMES = {1: [4.0, 3.0, 1.0, 2.0], 2: [4.0, 3.0, 2.0, 1.0]}
LONG = "x" * 90  # a key part that cannot fit an 80-column line


def _tune(n, tag=""):
    def bench(fn, n_warmup, n_repeat):
        return [TIMES[n][fn()]] * n_repeat

    @autotune(SPACE, key_fn=lambda n, tag="": (n, tag), do_bench=bench)
    def scale(n, tag="", cfg=None):
        return SPACE.index({"cfg": cfg})

    return scale(n, tag)


def run(capsys, *args):
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def demo_cache(cache_dir):
    assert _tune(1) == 2 and _tune(2, LONG) == 3
    return cache_dir


def _rows(out):
    return [line for line in out.splitlines() if line.startswith("scale ")]


def test_ls_shows_the_fields_that_decide_and_fits_columns(demo_cache, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "ls")
    assert code == 0
    table = out.split("\n\n")[0].splitlines()  # the summary line below names the root: not cut
    assert len(table) == 3 and all(len(line) <= 80 for line in table), out
    rows = _rows(out)
    assert len(rows) == 2
    # the deciding field num_warps is shown; num_stages, equal in every candidate, is not
    assert any("BLOCK=512, num_warps=4" in r for r in rows), out
    assert any("BLOCK=512, num_warps=8" in r for r in rows), out
    assert "num_stages" not in out
    assert "…" in out and LONG not in out  # the long key is what got cut

    code, doc = run(capsys, "ls", "--json")[:2]
    varying = {tuple(r["varying"]) for r in json.loads(doc)["entries"]}
    assert varying == {("cfg.BLOCK", "cfg.num_warps")}


def test_ls_cuts_nothing_when_there_is_room_or_no_terminal(demo_cache, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    out = run(capsys, "ls")[1]
    assert LONG in out and "…" not in out
    monkeypatch.delenv("COLUMNS")  # captured output is not a terminal: nothing to fit
    out = run(capsys, "ls")[1]
    assert LONG in out and "…" not in out and max(len(line) for line in out.splitlines()) > 100


def test_ls_of_one_config_space_field_shows_the_whole_config(cache_dir, capsys):
    @autotune([{"cfg": triton.Config({"BLOCK": 64}, num_warps=2)}], key_fn=lambda n: (n,))
    def lone(n, cfg=None):
        return n

    lone(3)
    out = run(capsys, "ls")[1]
    assert "BLOCK=64" in out and "num_warps=2" in out  # nothing varies: everything is shown


def test_ls_of_a_function_that_is_not_there_says_what_is(demo_cache, capsys):
    code, out, _ = run(capsys, "ls", "nosuchfn")
    assert code == 1  # a negative answer: a script asking "is nosuchfn tuned?" is told no
    assert f"no entries of nosuchfn under {demo_cache}; it has 2 entries of: scale" in out
    assert run(capsys, "ls", "scale")[0] == 0 and run(capsys, "ls")[0] == 0


def test_ls_of_an_empty_root_is_an_answer_not_a_failure(tmp_path, capsys):
    (tmp_path / "root").mkdir()
    code, out, _ = run(capsys, "--dir", str(tmp_path / "root"), "ls")
    assert code == 0 and "no entries under" in out


def test_the_help_names_every_exit_status(capsys):
    with pytest.raises(SystemExit):
        run(capsys, "--help")
    out = capsys.readouterr().out
    for status in ("0 done", "1 a negative answer", "2 bad usage", "3 `why`", "130", "143"):
        assert status in " ".join(out.split()), status


def test_a_root_that_does_not_exist_is_no_cache_and_exit_1(tmp_path, capsys):
    typo = tmp_path / "typo"
    for argv in (["ls"], ["show", "abcdef"], ["prune", "--history"], ["ls", "--json"]):
        code, out, err = run(capsys, "--dir", str(typo), *argv)
        assert code == 1, argv
        assert f"no cache at {typo}" in err and "TRITON_DIST_AUTOTUNE_DIR" in err, argv
    assert not typo.exists()  # nothing created by looking


def test_show_under_the_wrong_function_points_at_the_right_one(demo_cache, capsys):
    (path, _) = entries(demo_cache, "scale")
    prefix = path.stem[:6]
    code, _, err = run(capsys, "show", f"nofunc/{prefix}")
    assert code == 1
    assert "there is no function 'nofunc'" in err and "its functions: scale" in err
    assert f"scale/{path.stem[:12]}" in err  # where the id is
    code, out, _ = run(capsys, "show", f"scale/{prefix}")
    assert code == 0 and load(path)["key"] in out


def test_prune_with_only_a_function_says_how_to_say_what_to_remove(demo_cache, capsys):
    code, _, err = run(capsys, "prune", "--function", "scale")
    assert code == 2
    assert "--function scale only narrows" in err
    assert "prune --function scale --older-than 0" in err and "--dry-run" in err
    # the hint works as written
    code, out, _ = run(capsys, "prune", "--function", "scale", "--older-than", "0", "--dry-run")
    assert code == 0 and "would remove" in out and len(entries(demo_cache, "scale")) == 2
    code, out, _ = run(capsys, "prune", "--function", "scale", "--older-than", "0")
    assert code == 0 and entries(demo_cache, "scale") == []


@pytest.mark.parametrize(("argv0", "prog"), [("/opt/venv/bin/triton-dist-cache", "triton-dist-cache"),
                                             ("/repo/triton_dist/cache.py", "python -m triton_dist.cache")])
def test_the_help_names_the_program_as_it_was_started(capsys, monkeypatch, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {prog} ")


def test_show_lists_candidates_by_their_deciding_fields(demo_cache, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = next(p for p in entries(demo_cache, "scale") if load(p)["key"] == "(1, '')")
    code, out, _ = run(capsys, "show", path.stem[:8])
    assert code == 0
    best_line = next(line for line in out.splitlines() if line.startswith("best"))
    assert "num_stages=3" in best_line and "num_warps=4" in best_line  # the winner in full
    candidates = out.split("\n\n")[1].splitlines()
    assert [line.split()[1:3] for line in candidates[1:]] == [
        ["BLOCK=256,", "num_warps=4"], ["BLOCK=256,", "num_warps=8"],
        ["BLOCK=512,", "num_warps=4"], ["BLOCK=512,", "num_warps=8"]]
    assert all(len(line) <= 80 for line in candidates)
