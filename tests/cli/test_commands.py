"""The cache command line on real cache directories: ls, show, why, verify, prune, and the
program itself (``python -m triton_dist.cache`` = the ``triton-dist-cache`` script)."""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

import pytest

from triton_dist import cli
from triton_dist._store.files import dumps_entry, locked
from triton_dist.errors import TritonDistWarning

from .helpers import KERNEL_MODULE, entries, load, run_cli

SHAPE_KEY = "((256,), 'torch.float32')"

LIST_MODULE = '''
from triton_dist.tune import autotune

SPACE = {space!r}


@autotune(config_space=SPACE, key_fn=lambda n: ("n", n), n_warmup=0, n_repeat=2)
def work(n, c):
    return c, sum(range(n * (c + 1)))
'''


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys, *args: str) -> tuple[int, dict]:
    code, out, _ = run(capsys, *args, "--json")
    return code, json.loads(out)


@pytest.fixture
def seeded(cache_dir, import_module):
    """A cache tuned for real: a Triton kernel (interpreted) for two shapes, a host function."""
    import torch

    kmod = import_module("kmod", KERNEL_MODULE)
    kmod.scale(torch.arange(256.0))
    kmod.scale(torch.arange(64.0))
    import_module("lmod", LIST_MODULE.format(space=[{"c": 0}, {"c": 1}, {"c": 2}])).work(20)
    return cache_dir


def scale_entry(root: Path) -> Path:
    return next(p for p in entries(root, "scale") if load(p)["key"] == SHAPE_KEY)


# ---------------------------------------------------------------------------- ls / show

def test_ls_lists_functions_keys_best_configs_ages_and_hardware(seeded, capsys):
    code, out, _ = run(capsys, "ls")
    assert code == 0
    assert "FUNCTION" in out and "BEST CONFIG" in out and "HARDWARE" in out
    assert SHAPE_KEY in out and "('n', 20)" in out and "BLOCK=" in out
    assert "3 entries of 2 function(s)" in out
    code, doc = run_json(capsys, "ls", "scale")
    assert code == 0 and {r["function"] for r in doc["entries"]} == {"scale"}
    row = next(r for r in doc["entries"] if r["key"] == SHAPE_KEY)
    entry = load(scale_entry(seeded))
    assert row["id"] == entry["id"] and row["best"] == entry["best"]["config"]
    assert row["hardware_digest"] == entry["hardware"]["digest"] and row["age_s"] >= 0


def test_ls_with_dir_option_and_an_empty_root(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, out, _ = run(capsys, "ls", "--dir", str(tmp_path / "empty"))
    assert code == 0 and "no entries" in out
    code, doc = run_json(capsys, "--dir", str(tmp_path / "empty"), "ls")
    assert code == 0 and doc["entries"] == []
    # a root that does not exist is a typo, not an empty cache (issue 18 item 10)
    code, out, err = run(capsys, "ls", "--dir", str(tmp_path / "nothing"))
    assert code == 1 and f"no cache at {tmp_path / 'nothing'}" in err and out == ""


def test_show_lists_every_candidate_with_its_time_or_failure(seeded, capsys):
    path = scale_entry(seeded)
    for spec in (path.stem[:8], str(path), f"scale/{path.stem[:6]}"):
        code, out, _ = run(capsys, "show", spec)
        assert code == 0, spec
        assert SHAPE_KEY in out and "BLOCK=32" in out and "BLOCK=64" in out
        assert "failed:" in out and "power of 2" in out  # BLOCK=100 cannot run
        assert "best" in out
    code, doc = run_json(capsys, "show", path.stem[:8])
    candidates = doc["entry"]["candidates"]
    assert [c["config"] for c in candidates] == [{"BLOCK": 32}, {"BLOCK": 100}, {"BLOCK": 64}]
    assert candidates[1]["error"] and candidates[1]["time_ms"] is None
    assert all(c["time_ms"] > 0 for c in (candidates[0], candidates[2]))


def test_show_an_unknown_or_ambiguous_id_exits_1(seeded, capsys):
    code, _, err = run(capsys, "show", "ffffffffffff")
    assert code == 1 and "no entry" in err
    for name in ("abcd" + "0" * 28, "abcd" + "1" * 28):
        (seeded / "scale" / f"{name}.json").write_text("{}")
    code, _, err = run(capsys, "show", "abcd")
    assert code == 1 and "matches 2 entries" in err


# ---------------------------------------------------------------------------- why

def test_why_says_hit_for_a_tuned_key_however_the_key_and_function_are_written(seeded, capsys, modules):
    for function, key in (("kmod:scale", SHAPE_KEY), ("kmod:scale", "((256,),'torch.float32')"),
                          ("kmod:scale", '[[256], "torch.float32"]'), (f"{modules}/kmod.py:scale", SHAPE_KEY)):
        code, doc = run_json(capsys, "why", function, key)
        assert code == 0 and doc["verdict"] == "hit" and doc["components"] == []
        assert doc["nearest_path"] == doc["expected_path"] == str(scale_entry(seeded))


def test_why_names_the_key_when_the_key_was_never_tuned(seeded, capsys):
    code, out, _ = run(capsys, "why", "kmod:scale", "((512,), 'torch.float32')")
    assert code == 1 and "MISS" in out and "differs in key" in out
    code, doc = run_json(capsys, "why", "kmod:scale", "((512,), 'torch.float32')")
    assert doc["components"] == ["key"] and doc["differences"][0]["entry"] in (SHAPE_KEY, "((64,), 'torch.float32')")


def test_why_names_the_hardware(seeded, capsys):
    code, doc = run_json(capsys, "why", "kmod:scale", SHAPE_KEY, "--hardware", "0123456789abcdef")
    assert code == 1 and doc["components"] == ["hardware"]
    assert load(scale_entry(seeded))["hardware"]["digest"] in doc["reason"]


def test_why_with_a_function_name_imports_what_its_entries_record_or_nothing(seeded, capsys):
    code, doc = run_json(capsys, "why", "scale", SHAPE_KEY)
    assert code == 0 and doc["verdict"] == "hit" and doc["imported"] == "kmod.scale"
    code, doc = run_json(capsys, "why", "kmod.scale", SHAPE_KEY)
    assert code == 0 and doc["verdict"] == "hit"
    code, doc = run_json(capsys, "why", "scale", SHAPE_KEY, "--no-import")
    assert code == 3 and doc["verdict"] == "unknown" and doc["imported"] is None  # neither hit nor miss
    assert load(scale_entry(seeded))["source_hash"] in doc["reason"]
    code, doc = run_json(capsys, "why", "scael", SHAPE_KEY)
    assert code == 1 and "similar names there: scale" in doc["reason"]


def test_the_diagnosis_api_that_preflight_calls(seeded):
    import sys

    from triton_dist._store.diagnose import diagnose

    scale = sys.modules["kmod"].scale
    assert diagnose(scale, ((256,), "torch.float32")).hit
    assert diagnose(scale, SHAPE_KEY, root=seeded).hit
    diag = diagnose(scale, ((512,), "torch.float32"))
    assert diag.verdict == "miss" and diag.components() == ["key"] and "differs in key" in diag.reason


def test_why_names_software_versions_only_when_the_version_check_is_on(seeded, capsys, monkeypatch):
    path = scale_entry(seeded)
    entry = load(path)
    entry["versions"]["triton"] = "0.0.1"
    path.write_text(dumps_entry(entry))
    code, doc = run_json(capsys, "why", "kmod:scale", SHAPE_KEY)
    assert code == 0 and doc["verdict"] == "hit"
    assert [d["component"] for d in doc["differences"]] == ["versions"]
    assert "triton: 0.0.1 ->" in doc["differences"][0]["detail"]
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_VERSION_CHECK", "1")
    code, doc = run_json(capsys, "why", "kmod:scale", SHAPE_KEY)
    assert code == 1 and doc["components"] == ["versions"]


def test_why_names_the_config_space(seeded, capsys, import_module):
    best = load(entries(seeded, "work")[0])["best"]["config"]
    smaller = [c for c in ({"c": 0}, {"c": 1}, {"c": 2}) if c != best]
    import_module("lmod_smaller", LIST_MODULE.format(space=smaller))
    code, doc = run_json(capsys, "why", "lmod_smaller:work", "('n', 20)")
    assert code == 1 and doc["components"] == ["config_space"]
    assert "no longer in config_space" in doc["reason"]
    import_module("lmod_grown", LIST_MODULE.format(space=[{"c": 0}, {"c": 1}, {"c": 2}, {"c": 3}]))
    code, doc = run_json(capsys, "why", "lmod_grown:work", "('n', 20)")
    assert code == 1 and doc["components"] == ["config_space"] and "never measured" in doc["reason"]


def test_why_names_the_source_after_an_edit_in_a_fresh_process(tmp_path, modules):
    """Tune a module in one process, edit the function, ask `why` from another process."""
    from .helpers import run_python, write_module

    root = tmp_path / "root"
    path = write_module(modules, "edited", KERNEL_MODULE)
    seeded = run_python("import torch, edited; edited.scale(torch.arange(256.0))", root, modules)
    assert seeded.returncode == 0, seeded.stderr
    path.write_text(KERNEL_MODULE.replace("    out = torch.empty_like(x)\n",
                                          "    x = x.contiguous()\n    out = torch.empty_like(x)\n"))
    result = run_cli("why", "edited:scale", SHAPE_KEY, "--json", root=root, modules=modules)
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "miss" and doc["components"] == ["source"]
    assert "source changed" in doc["differences"][0]["detail"]
    # by name only: the module the entry records is imported, with the edit
    result = run_cli("why", "scale", SHAPE_KEY, root=root, modules=modules)
    assert result.returncode == 1, result.stderr
    assert "MISS" in result.stdout and "differs in source" in result.stdout


def test_a_bad_environment_variable_exits_2_and_names_it(capsys, monkeypatch):
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "sometimes")
    code, _, err = run(capsys, "ls")
    assert code == 2 and "TRITON_DIST_AUTOTUNE_CACHE_ONLY" in err


def test_why_with_an_import_path_that_names_no_autotuned_function_exits_2(seeded, capsys):
    """No such module, no such attribute, or not a decorated function: bad usage (exit 2), never
    exit 1, which a script asking "would it hit?" reads as a miss (session 33)."""
    for spec in ("no_such_module_here:fn", "os:no_such_attribute_here", "os:getcwd"):
        code, _, err = run(capsys, "why", spec, SHAPE_KEY)
        assert code == 2 and ("cannot import" in err or "not a function decorated" in err), (spec, code, err)


def test_why_on_a_module_whose_code_fails_at_import_exits_3_and_names_module_error_and_fix(
        seeded, capsys, modules, monkeypatch):
    """The environment kept `why` from comparing (a module reading os.environ['LOCAL_RANK'] at
    import, asked about outside the job): the verdict is unknown, exit 3 as the epilog says, not
    exit 1, which a script asking "would it hit?" read as a miss."""
    from .helpers import write_module

    write_module(modules, "rankmod", "import os\nDEVICE = int(os.environ['LOCAL_RANK_OF_THIS_TEST'])\n"
                 + KERNEL_MODULE)
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.delenv("LOCAL_RANK_OF_THIS_TEST", raising=False)
    code, out, err = run(capsys, "why", "rankmod:scale", SHAPE_KEY)
    assert code == 3 and out == "", (code, out, err)
    assert "importing module 'rankmod' raised KeyError: 'LOCAL_RANK_OF_THIS_TEST'" in err
    assert "verdict is unknown" in err and "in the environment of one of the job's ranks" in err
    code, doc = run_json(capsys, "why", "rankmod:scale", SHAPE_KEY)
    assert code == 3 and doc["verdict"] == "unknown" and doc["error"] == "CacheAdminError"
    # in that environment it imports, and the verdict is told (a hit: the seeded entry)
    monkeypatch.setenv("LOCAL_RANK_OF_THIS_TEST", "0")
    code, out, err = run(capsys, "why", "rankmod:scale", SHAPE_KEY)
    assert code == 0 and "HIT" in out, (out, err)


# ---------------------------------------------------------------------------- verify

def test_verify_passes_a_clean_cache_with_temp_and_lock_leftovers(seeded, capsys):
    (seeded / "scale" / ".x.json.1234.tmp").write_text('{"half')
    with locked(scale_entry(seeded)):  # a lock file left by a replacement (a first entry takes none)
        pass
    assert any((seeded / "scale" / ".locks").glob("*.lock"))
    code, out, _ = run(capsys, "verify")
    assert code == 0 and "0 problem(s)" in out
    code, doc = run_json(capsys, "verify")
    assert doc["ok"] and doc["counts"]["ok"] == 3 and len(doc["leftovers"]) == 1


def test_verify_catches_a_truncated_entry_and_names_it(seeded, capsys):
    path = scale_entry(seeded)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    code, out, _ = run(capsys, "verify")
    assert code == 1 and str(path) in out and "corrupt" in out
    code, doc = run_json(capsys, "verify")
    assert code == 1 and [(p["path"], p["kind"]) for p in doc["problems"]] == [(str(path), "corrupt")]


def test_verify_passes_a_cache_that_replaced_a_corrupt_entry_and_names_its_history(seeded, capsys, import_module):
    # the tuner re-tunes a corrupt entry and moves its bytes to history/ (nothing is lost); verify
    # failed on that history file from then on, though the key is served by a valid entry (a tester)
    (path,) = entries(seeded, "work")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.warns(TritonDistWarning, match="ignoring cache file"):
        assert import_module("lmod_again", LIST_MODULE.format(space=[{"c": 0}, {"c": 1}, {"c": 2}])).work(20)
    assert load(path)["key"] == "('n', 20)"
    (old,) = (seeded / "work" / "history").glob("*.json")
    code, out, _ = run(capsys, "verify")
    assert code == 0 and "0 problem(s)" in out, out
    assert "1 history file(s) are not usable entries (not a problem" in out and "`prune --history`" in out
    assert any(line.split()[:2] == ["corrupt", str(old)] for line in out.splitlines()), out
    code, doc = run_json(capsys, "verify")
    assert code == 0 and doc["ok"] and doc["problems"] == []
    assert [(p["path"], p["kind"]) for p in doc["unusable_history"]] == [(str(old), "corrupt")]
    assert run(capsys, "prune", "--history")[0] == 0
    code, out, _ = run(capsys, "verify")
    assert code == 0 and "history file(s)" not in out and not old.exists()


def test_verify_catches_foreign_misplaced_unreadable_and_linked_files(seeded, capsys, tmp_path, monkeypatch):
    fdir = seeded / "scale"
    good = scale_entry(seeded)
    (fdir / "other.json").write_text('{"hello": "world"}')
    (fdir / "binary.json").write_bytes(b"\x00\xff\x00garbage")
    (fdir / "notes.txt").write_text("a note")
    (seeded / "stray.json").write_text("{}")
    misplaced = fdir / ("0" * 32 + ".json")
    misplaced.write_bytes(good.read_bytes())
    (fdir / "history").mkdir()
    (fdir / "history" / f"{good.stem}.20240101T000000000000Z.json").write_text('{"schema": ')
    outside = tmp_path / "outside.json"
    outside.write_bytes(good.read_bytes())
    (fdir / ("1" * 32 + ".json")).symlink_to(outside)
    os.mkfifo(fdir / "pipe.json")  # must not block verify
    (fdir / "history" / f"{good.stem}.20240101T000000000000Z-1.json").write_bytes(good.read_bytes())
    made_here = (good, misplaced, fdir / ("1" * 32 + ".json"))  # the other key's entry, whatever its id
    unreadable = next(p for p in entries(seeded, "scale") if p not in made_here and len(p.stem) == 32)
    real_read = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self == unreadable:
            raise PermissionError(13, "Permission denied")
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    code, doc = run_json(capsys, "verify")
    assert code == 1
    kinds = {Path(p["path"]).name: p["kind"] for p in doc["problems"]}
    assert kinds == {
        "other.json": "foreign", "binary.json": "corrupt", "notes.txt": "foreign", "stray.json": "foreign",
        misplaced.name: "inconsistent",
        "1" * 32 + ".json": "symlink", unreadable.name: "unreadable", "pipe.json": "foreign",
    }  # the corrupt history file is information, not a problem (the next test)
    assert [(Path(p["path"]).name, p["kind"]) for p in doc["unusable_history"]] == [
        (f"{good.stem}.20240101T000000000000Z.json", "corrupt")]
    assert doc["counts"]["history"] == 1  # the -1 history name of a second replacement that microsecond
    code, out, _ = run(capsys, "verify")
    assert code == 1 and "8 problem(s)" in out and str(misplaced) in out


def test_verify_names_a_linked_function_folder_once_and_its_advice_keeps_the_entries(seeded, capsys):
    # An alias of a function folder inside the root (`ln -s scale scale_alias`): verify walked it
    # and called each entry under the link "inconsistent", to "move or delete by hand", which
    # deleted the real entries (found by a tester, session 28). The link is one problem now, with
    # the command that removes the link itself; the folder it shows is checked under its own name.
    code, doc = run_json(capsys, "verify")
    assert code == 0
    ok, logs = doc["counts"]["ok"], doc["counts"].get("log", 0)
    alias = seeded / "scale_alias"
    alias.symlink_to(seeded / "scale")
    code, doc = run_json(capsys, "verify")
    assert doc["counts"]["ok"] == ok and doc["counts"].get("log", 0) == logs  # nothing counted twice
    assert code == 1 and [(Path(p["path"]).name, p["kind"]) for p in doc["problems"]] == [("scale_alias", "symlink")]
    assert f"rm {alias}" in doc["problems"][0]["detail"]
    alias.unlink()
    code, doc = run_json(capsys, "verify")
    assert code == 0 and doc["counts"]["ok"] == ok


def test_verify_of_a_missing_root_is_fine(tmp_path, capsys):
    code, out, _ = run(capsys, "verify", "--dir", str(tmp_path / "none"))
    assert code == 0 and "no cache there" in out


# ---------------------------------------------------------------------------- prune

def _backdate(path: Path, days: float) -> None:
    import datetime as dt

    entry = load(path)
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days)
    entry["created"] = when.isoformat(timespec="microseconds")
    path.write_text(dumps_entry(entry))


def test_prune_older_than_removes_old_entries_and_their_logs_and_dry_run_removes_nothing(seeded, capsys):
    old = scale_entry(seeded)
    _backdate(old, 30)
    assert old.with_suffix(".log").exists()
    before = sorted(seeded.rglob("*"))
    code, doc = run_json(capsys, "prune", "--older-than", "10", "--dry-run")
    assert code == 0 and {r["path"] for r in doc["removals"]} == {str(old), str(old.with_suffix(".log"))}
    assert sorted(seeded.rglob("*")) == before
    code, out, _ = run(capsys, "prune", "--older-than", "10")
    assert code == 0 and "removed 2 file(s)" in out
    assert not old.exists() and not old.with_suffix(".log").exists()
    assert len(entries(seeded, "scale")) == 1 and len(entries(seeded, "work")) == 1


def test_prune_other_hardware_keeps_this_machine_entries(seeded, capsys):
    digest = load(scale_entry(seeded))["hardware"]["digest"]
    code, doc = run_json(capsys, "prune", "--other-hardware")
    assert code == 0 and doc["removals"] == [] and doc["kept_hardware"] == digest
    code, doc = run_json(capsys, "prune", "--other-hardware", "--hardware", "feedfacefeedface")
    assert code == 0 and len([r for r in doc["removals"] if r["path"].endswith(".json")]) == 3
    assert entries(seeded, "scale") == [] and entries(seeded, "work") == []


def test_prune_history_and_invalid_files(seeded, capsys, import_module):
    sys.modules.pop("lmod")  # the module edited (another module's function of one name is said)
    import_module("lmod", LIST_MODULE.format(space=[{"c": 0}, {"c": 1}, {"c": 2}, {"c": 3}])).work(20)
    history = list((seeded / "work" / "history").glob("*.json"))
    assert len(history) == 1  # the grown space re-tuned the same entry
    (seeded / "scale" / "junk.json").write_text("not json")
    code, doc = run_json(capsys, "prune", "--history", "--invalid")
    assert code == 0
    assert {Path(r["path"]).name for r in doc["removals"]} == {history[0].name, "junk.json"}
    assert not history[0].exists() and len(entries(seeded, "work")) == 1
    code, _, err = run(capsys, "prune")
    assert code == 2 and "--older-than" in err


# ---------------------------------------------------------------------------- the program

def test_python_m_triton_dist_cache_and_the_console_script_are_one_program(seeded):
    from triton_dist import cache

    assert cache.main is cli.main
    (script,) = metadata.entry_points(group="console_scripts", name="triton-dist-cache")
    assert script.value == "triton_dist.cli:main"
    result = run_cli("ls", "--json", root=seeded)  # TRITON_DIST_AUTOTUNE_DIR from the environment
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["entries"]) == 3
    result = run_cli("--dir", os.fspath(seeded), "verify", root=seeded.parent / "elsewhere")
    assert result.returncode == 0 and "3 entries" in result.stdout
