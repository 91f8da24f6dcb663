"""The cache command line on a node's packed cache (issue 21): ``ls``, ``show``, ``why``,
``verify``, ``export``/``import`` and ``prune`` see the entries a seeding packed, and ``prune``
removes a packed entry by rewriting its pack."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.served import pack_files, served
from triton_dist._store import packfile, packs

from .test_commands import LIST_MODULE, SHAPE_KEY, run, run_json


def pack_root(source: Path, node: Path) -> None:
    """Seed ``node`` with every loose entry of ``source``, one pack per function."""
    for directory in sorted(p for p in source.iterdir() if p.is_dir()):
        items = [(p.stem, p.read_bytes()) for p in sorted(directory.glob("*.json"))]
        packs.install(node, directory.name, packfile.build(items))


@pytest.fixture
def node(cache_dir, import_module, tmp_path, monkeypatch):
    """A node's root that holds, packed, a cache tuned for real (a Triton kernel for two shapes,
    a host function); the command line and the tuner look at it."""
    import torch

    from .helpers import KERNEL_MODULE

    kmod = import_module("kmod", KERNEL_MODULE)
    kmod.scale(torch.arange(256.0))
    kmod.scale(torch.arange(64.0))
    import_module("lmod", LIST_MODULE.format(space=[{"c": 0}, {"c": 1}, {"c": 2}])).work(20)
    root = tmp_path / "node"
    pack_root(cache_dir, root)
    assert not list(root.glob("*/*.json")) and len(list(root.glob("*/packs/*.pack"))) == 2
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(root))
    return root


def _packed_scale(root: Path) -> Path:
    (pack,) = pack_files(root, "scale")
    entry = next(e for e in served(root, "scale").values() if json.loads(e)["key"] == SHAPE_KEY)
    return pack / f"{json.loads(entry)['id']}.json"


def test_ls_show_and_why_see_packed_entries(node, capsys):
    code, out, _ = run(capsys, "ls")
    assert code == 0 and "3 entries of 2 function(s)" in out and SHAPE_KEY in out
    code, doc = run_json(capsys, "ls", "scale")
    path = _packed_scale(node)
    row = next(r for r in doc["entries"] if r["key"] == SHAPE_KEY)
    assert row["path"] == str(path) and row["id"] == path.stem
    for spec in (path.stem[:8], f"scale/{path.stem[:6]}", str(path)):
        code, out, _ = run(capsys, "show", spec)
        assert code == 0 and SHAPE_KEY in out and "BLOCK=64" in out and str(path) in out, spec
    code, doc = run_json(capsys, "why", "kmod:scale", SHAPE_KEY)
    assert code == 0 and doc["verdict"] == "hit" and doc["components"] == []
    assert doc["nearest_path"] == str(path) and doc["expected_path"] == str(node / "scale" / f"{path.stem}.json")
    code, doc = run_json(capsys, "why", "kmod:scale", "((512,), 'torch.float32')")
    assert code == 1 and doc["components"] == ["key"]


def test_verify_classifies_packs_and_their_entries(node, capsys):
    code, doc = run_json(capsys, "verify")
    assert code == 0 and doc["counts"]["ok"] == 3 and doc["problems"] == []
    # a loose file of one id shadows its packed copy (history now); a pack of another name, a
    # pack whose bytes are cut short, are problems
    path = _packed_scale(node)
    shutil.copyfile(node / "scale" / "packs" / path.parent.name, node / "scale" / "packs" / "junk.pack")
    (node / "scale" / path.name).write_bytes(served(node, "scale")[path.stem])
    (lmod_pack,) = pack_files(node, "work")
    data = lmod_pack.read_bytes()
    lmod_pack.write_bytes(data[:-10])
    code, doc = run_json(capsys, "verify")
    kinds = sorted((Path(p["path"]).name, p["kind"]) for p in doc["problems"])
    (work_id,) = packfile.Pack.from_bytes(data).ids()
    assert code == 1 and kinds == [(f"{work_id}.json", "corrupt"), ("junk.pack", "foreign")], kinds
    assert doc["counts"]["ok"] == 2 and doc["counts"]["history"] == 1  # the loose file, the other packed one


def test_export_writes_packed_entries_as_loose_files_and_import_takes_them(node, capsys, tmp_path):
    archive = tmp_path / "node.tar.gz"
    code, doc = run_json(capsys, "export", str(archive))
    assert code == 0 and len(doc["written"]) == 3
    with tarfile.open(archive) as tar:
        names = sorted(m.name for m in tar.getmembers())
    ids = {*served(node, "scale"), *served(node, "work")}
    assert names == sorted(["MANIFEST.json", *(f"scale/{i}.json" for i in served(node, "scale")),
                            *(f"work/{i}.json" for i in served(node, "work"))]) and len(ids) == 3
    other = tmp_path / "other"
    code, doc = run_json(capsys, "import", str(archive), "--dir", str(other))
    assert code == 0 and len(doc["written"]) == 3
    # into the node itself: every entry is already there (packed), nothing is written
    code, doc = run_json(capsys, "import", str(archive))
    assert code == 0 and doc["written"] == [] and len(doc["unchanged"]) == 3


def test_prune_removes_a_packed_entry_by_rewriting_its_pack(node, capsys):
    path = _packed_scale(node)
    before = pack_files(node, "scale")
    code, doc = run_json(capsys, "prune", "--function", "work", "--older-than", "0")
    assert code == 0 and [Path(r["path"]).parent.parent.name for r in doc["removals"]] == ["packs"]
    assert all(r["done"] for r in doc["removals"])
    assert served(node, "work") == {} and pack_files(node, "work") == []  # its only entry: the pack goes
    assert pack_files(node, "scale") == before  # the other function's pack is untouched
    code, doc = run_json(capsys, "ls")
    assert {r["function"] for r in doc["entries"]} == {"scale"} and path.stem in {r["id"] for r in doc["entries"]}


def test_prune_invalid_removes_an_unreadable_pack_and_verify_is_clean_after(node, capsys):
    (pack,) = pack_files(node, "work")
    pack.write_bytes(b"not a pack at all")
    code, doc = run_json(capsys, "verify")
    assert code == 1 and [(Path(p["path"]).name, p["kind"]) for p in doc["problems"]] == [(pack.name, "foreign")]
    code, doc = run_json(capsys, "ls")  # the tools report it (the tuner warns: tests/unit/test_packs.py)
    assert code == 0 and {r["function"] for r in doc["entries"]} == {"scale"}
    assert [(u["path"], u["why"].split(":")[0]) for u in doc["unusable"]] == [(str(pack), "an unreadable pack")]
    code, doc = run_json(capsys, "prune", "--invalid")
    assert code == 0 and [r["path"] for r in doc["removals"]] == [str(pack)] and not pack.exists()
    code, doc = run_json(capsys, "verify")
    assert code == 0 and doc["counts"]["ok"] == 2
