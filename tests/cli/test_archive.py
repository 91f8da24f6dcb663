"""export / import: one archive file; import checks everything first, never executes code,
refuses paths outside the root, links and foreign files, and writes atomically under the lock."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from triton_dist._store.files import dumps_entry

from .helpers import KERNEL_MODULE, entries, load, run_python, write_module
from .test_commands import SHAPE_KEY, run, run_json


@pytest.fixture
def seeded(cache_dir, import_module):
    import torch

    kmod = import_module("kmod_arch", KERNEL_MODULE)
    kmod.scale(torch.arange(256.0))
    kmod.scale(torch.arange(64.0))
    return cache_dir


def files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_export_then_import_into_an_empty_root_and_a_fresh_process_hits(tmp_path, modules, capsys):
    """The round trip: tuned in one process, exported, imported elsewhere, hit by a new process
    in strict cache-only mode without measuring anything."""
    source = tmp_path / "source-root"
    write_module(modules, "kmod_trip", KERNEL_MODULE)
    tuned = run_python("import torch, kmod_trip; kmod_trip.scale(torch.arange(256.0))", source, modules)
    assert tuned.returncode == 0, tuned.stderr
    archive = tmp_path / "out" / "cache.tar.gz"
    code, out, _ = run(capsys, "export", str(archive), "--dir", str(source))
    assert code == 0 and "exported 1 file(s)" in out and archive.is_file()

    target = tmp_path / "empty-root"
    code, doc = run_json(capsys, "import", str(archive), "--dir", str(target))
    assert code == 0 and doc["written"] == [entries(source, "scale")[0].relative_to(source).as_posix()]
    (original,) = entries(source, "scale")
    (imported,) = entries(target, "scale")
    assert imported.name == original.name and load(imported) == load(original)

    hit = run_python("""
        import torch, kmod_trip
        out = kmod_trip.scale(torch.arange(256.0))
        assert torch.equal(out, torch.arange(256.0) * 2)
        print(dict(kmod_trip.launches))
        """, target, modules, TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict")
    assert hit.returncode == 0, hit.stderr
    best = load(original)["best"]["config"]["BLOCK"]
    assert hit.stdout.strip() == str({best: 1})  # one call with the cached best, nothing measured


def test_import_again_changes_nothing_and_a_newer_local_entry_is_kept(seeded, tmp_path, capsys):
    archive = tmp_path / "a.tar.gz"
    assert run(capsys, "export", str(archive))[0] == 0
    code, doc = run_json(capsys, "import", str(archive))
    assert code == 0 and doc["written"] == [] and len(doc["unchanged"]) == 2
    local = next(p for p in entries(seeded, "scale") if load(p)["key"] == SHAPE_KEY)
    entry = load(local)
    entry["created"] = "2999-01-01T00:00:00.000000+00:00"
    local.write_text(dumps_entry(entry))
    code, doc = run_json(capsys, "import", str(archive))
    assert code == 0 and doc["kept_newer"] == [local.relative_to(seeded).as_posix()]
    code, doc = run_json(capsys, "import", str(archive), "--replace")
    assert code == 0 and doc["written"] == [local.relative_to(seeded).as_posix()]
    assert load(local)["created"] != entry["created"]
    assert len(list((seeded / "scale" / "history").glob("*.json"))) == 1  # the replaced one


def test_export_skips_unusable_files_and_dry_run_import_writes_nothing(seeded, tmp_path, capsys):
    (seeded / "scale" / "broken.json").write_text("{")
    archive = tmp_path / "a.tar.gz"
    code, doc = run_json(capsys, "export", str(archive), "scale")
    assert code == 0 and len(doc["written"]) == 2
    assert [Path(s["path"]).name for s in doc["skipped"]] == ["broken.json"]
    target = tmp_path / "t"
    code, doc = run_json(capsys, "import", str(archive), "--dir", str(target), "--dry-run")
    assert code == 0 and len(doc["written"]) == 2 and not target.exists()


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def _refused(capsys, archive: Path, target: Path, what: str) -> None:
    code, out, err = run(capsys, "import", str(archive), "--dir", str(target))
    assert code == 1, out
    assert "nothing was imported" in err and what in err
    assert files(target) == []


@pytest.mark.parametrize("bad", ["absolute", "dotdot", "symlink", "hardlink", "foreign", "renamed",
                                 "wrong_function", "not_layout", "log_without_entry", "bad_schema"])
def test_import_refuses_the_whole_archive_for_one_bad_member(seeded, tmp_path, capsys, bad):
    good = next(p for p in entries(seeded, "scale"))
    raw = good.read_bytes()
    ok = (_member(f"scale/{good.name}"), raw)
    entry = json.loads(raw)
    members = {
        "absolute": [(_member(f"/tmp/evil/{good.name}"), raw)],
        "dotdot": [(_member(f"scale/../../{good.name}"), raw)],
        "symlink": [(_member(f"scale/{'a' * 32}.json", tarfile.SYMTYPE, "/etc/passwd"), None)],
        "hardlink": [(_member(f"scale/{'b' * 32}.json", tarfile.LNKTYPE, f"scale/{good.name}"), None)],
        "foreign": [(_member(f"scale/{'c' * 32}.json"), b'{"schema": "something/else"}')],
        "renamed": [(_member(f"scale/{'d' * 32}.json"), raw)],
        "wrong_function": [(_member(f"other/{good.name}"), raw)],
        "not_layout": [(_member("scale/run.py"), b"import os; os.system('echo pwned')")],
        "log_without_entry": [(_member(f"scale/{'e' * 32}.log"), b"a log")],
        "bad_schema": [(_member(f"scale/{'f' * 32}.json"),
                        json.dumps({**entry, "id": "f" * 32, "best": {"config": [1]}}).encode())],
    }[bad]
    target = tmp_path / "target"
    archive = _archive(tmp_path / "bad.tar.gz", [ok, *members])
    if bad == "log_without_entry":
        code, out, err = run(capsys, "import", str(archive), "--dir", str(target), "--logs")
        assert code == 1 and "without its entry" in err and files(target) == []
        return
    _refused(capsys, archive, target, members[0][0].name)
    assert entry["id"] == good.stem


def test_import_of_a_truncated_archive_is_refused(seeded, tmp_path, capsys):
    archive = tmp_path / "a.tar.gz"
    assert run(capsys, "export", str(archive), "--logs")[0] == 0
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    code, _, err = run(capsys, "import", str(archive), "--dir", str(tmp_path / "t"))
    assert code == 1 and "cannot read the archive" in err
    assert files(tmp_path / "t") == []


def test_logs_and_history_travel_only_when_asked(seeded, tmp_path, capsys, import_module):
    import torch

    import_module("kmod_arch2", KERNEL_MODULE).scale.tune(torch.arange(256.0))  # the old one -> history
    archive = tmp_path / "a.tar.gz"
    assert run(capsys, "export", str(archive), "--logs", "--history")[0] == 0
    target = tmp_path / "t"
    code, doc = run_json(capsys, "import", str(archive), "--dir", str(target))
    assert code == 0 and all(name.endswith(".json") and "history" not in name for name in doc["written"])
    assert {s["why"].split(" (")[0] for s in doc["skipped"]} == {"a log", "history"}
    code, doc = run_json(capsys, "import", str(archive), "--dir", str(target), "--logs", "--history")
    assert code == 0
    def kept(root):
        return [f for f in files(root) if ".locks/" not in f]

    assert kept(target) == kept(seeded), (files(target), files(seeded))


def test_export_of_a_function_the_cache_does_not_have_is_an_error(seeded, tmp_path, capsys):
    """A typo in a function name wrote an empty archive and exited 0: it seeded nothing."""
    archive = tmp_path / "typo.tar.gz"
    code, out, err = run(capsys, "export", str(archive), "scael", "--dir", str(seeded))
    assert code != 0 and not archive.exists()
    assert "no entries of scael" in out + err and "scale" in out + err  # names what the cache has
    code, out, _ = run(capsys, "export", str(archive), "scale", "--dir", str(seeded))
    assert code == 0 and "exported 2 file(s)" in out
