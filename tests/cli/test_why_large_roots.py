"""``cache why`` on large and odd roots (a tester, 2026-12-05): it read and held every entry of
the function, twice (~5 s and ~300 MB for 10,000 entries), where it asks about one call; a root
that is a file was said not to exist; ``why ../outside`` was shown as the function "/outside".
Each ``why`` runs in a fresh process that records, by an audit hook, every file it opens and
every folder it lists; the entries come from real tunings of a host function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .helpers import env_for, load

MODULE = '''
from triton_dist.tune import autotune


@autotune(config_space=[{"c": 0}, {"c": 1}], key_fn=lambda n: ("n", n), n_warmup=0, n_repeat=1)
def work(n, c):
    return c + n
'''

#: ``python -m triton_dist.cache ARGS`` with the paths it opens and lists written to OPENED
WATCHED = '''
import json, os, sys
opened = []
def hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        opened.append([event, os.fsdecode(args[0])])
sys.addaudithook(hook)
from triton_dist.cli import main
try:
    status = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as f:
        json.dump(opened, f)
sys.exit(status)
'''

KEYS = 40


@pytest.fixture
def tuned(cache_dir: Path, import_module) -> Path:
    """``work`` tuned for KEYS keys, ("n", 0) to ("n", KEYS - 1): KEYS entries in one folder."""
    module = import_module("whymod", MODULE)
    for n in range(KEYS):
        module.work(n)
    assert len(list((cache_dir / "work").glob("*.json"))) == KEYS
    return cache_dir


def why(root: Path, modules: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    record = tmp_path / f"opened-{len(list(tmp_path.glob('opened-*')))}.json"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WATCHED), str(record), "--dir", str(root), "why",
                           *args], env=env_for(root, modules), cwd=modules, capture_output=True, text=True,
                          timeout=180)
    return done, json.loads(record.read_text())


def entry_files(opened: list[list[str]], folder: Path) -> set[str]:
    return {path for event, path in opened if event == "open" and path.startswith(f"{folder}{os.sep}")
            and path.endswith(".json")}


@pytest.mark.parametrize("function", ["work", "whymod:work", "whymod.work"])
def test_why_of_a_tuned_key_reads_that_key_s_entry_not_the_function_s_others(tuned, modules, tmp_path, function):
    done, opened = why(tuned, modules, tmp_path, function, "('n', 7)")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HIT" in done.stdout and "compared with" in done.stdout, done.stdout
    (mine,) = [p for p in (tuned / "work").glob("*.json") if load(p)["key"] == "('n', 7)"]
    # its own entry, read by the diagnosis and by the hit rule; none of the 39 others (it read
    # all 40, twice with a plain name)
    assert entry_files(opened, tuned / "work") == {str(mine)}, sorted(entry_files(opened, tuned / "work"))


def test_why_of_a_key_never_tuned_names_the_nearest_of_the_function_s_entries(tuned, modules, tmp_path):
    newest = max((load(p)["created"], load(p)["key"]) for p in (tuned / "work").glob("*.json"))[1]
    done, _ = why(tuned, modules, tmp_path, "--json", "whymod:work", "('n', 1000)")
    assert done.returncode == 1, done.stdout + done.stderr
    diag = json.loads(done.stdout)
    # every entry differs in key alone: the newest is nearest, the next five follow
    assert load(Path(diag["nearest_path"]))["key"] == newest
    assert diag["components"] == ["key"] and diag["scanned"] == KEYS
    assert len(diag["others"]) == 5 and all(o["components"] == ["key"] for o in diag["others"])


def test_why_on_a_root_that_is_a_file_says_so(tmp_path, modules):
    root = tmp_path / "not-a-root"
    root.write_text("a file\n")
    done, _ = why(root, modules, tmp_path, "--no-import", "work", "('n', 7)")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{root} is not a directory" in done.stdout and "does not exist" not in done.stdout, done.stdout


def test_why_of_a_path_says_it_is_no_function_of_the_root_and_reads_nothing_outside(tuned, modules, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    for path in (tuned / "work").glob("*.json"):  # real entries, out of the root
        (outside / path.name).write_bytes(path.read_bytes())
    for spec in ("../outside", f"{outside}", "./work", "..", "work."):
        done, opened = why(tuned, modules, tmp_path, "--no-import", spec, "('n', 7)")
        assert done.returncode == 2, (spec, done.stdout, done.stderr)
        assert f"{spec!r} is not a function of the cache root {tuned}" in done.stderr, (spec, done.stderr)
        assert "/outside" not in done.stdout and not done.stdout, (spec, done.stdout)
        assert not [p for _, p in opened if p.startswith(str(outside))], spec


def test_why_of_a_function_folder_linked_out_of_the_root_reads_nothing_in_it(tuned, modules, tmp_path):
    outside = tmp_path / "outside"
    (tuned / "work").rename(outside)  # its entries and key log, now out of the root
    (tuned / "work").symlink_to(outside, target_is_directory=True)
    for args in (["work"], ["whymod:work"], ["--no-import", "work"]):
        done, opened = why(tuned, modules, tmp_path, *args, "('n', 7)")
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "resolves outside the cache root" in done.stdout and "HIT" not in done.stdout, (args, done.stdout)
        inside_link = [p for _, p in opened if p.startswith((f"{tuned / 'work'}{os.sep}", str(outside)))
                       or p == str(tuned / "work")]
        assert not inside_link, (args, inside_link)


def test_ls_json_writes_its_document_as_it_encodes_it(tuned, monkeypatch):
    """``ls --json`` built the whole text of the document, from millions of small pieces, before
    writing it (~85 MB of its 124 MB on 10,000 entries, a tester): now in pieces of bounded size."""
    from triton_dist import cli
    from triton_dist._cli import output

    class Out:
        def __init__(self) -> None:
            self.writes: list[str] = []

        def write(self, text: str) -> int:
            self.writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    out = Out()
    monkeypatch.setattr(output, "CHUNK_CHARS", 4096, raising=False)
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["--dir", str(tuned), "ls", "--json"]) == 0
    document = json.loads("".join(out.writes))
    assert len(document["entries"]) == KEYS
    assert len("".join(out.writes)) > 4 * 4096 and len(out.writes) > 4
    assert max(len(w) for w in out.writes) < 2 * 4096  # one piece over the bound at most
