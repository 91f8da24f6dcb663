"""Packed entries (issue 21): the pack format, the one lookup (a loose file wins, then the newest
pack), the hit rule on a packed entry, bad packs as misses with a warning, removal, and a fresh
process whose first call hits a packed entry. Real files, real tuning of a host function."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tests.served import pack_files, served
from tests.unit.helpers import make_tuner
from triton_dist._store import decide, files, packfile, packs
from triton_dist._store.scan import scan_function_dir
from triton_dist.errors import TritonDistWarning

REPO = Path(__file__).resolve().parents[2]


def pack_in_place(root: Path, function: str = "host") -> dict[str, bytes]:
    """Replace the loose entries of ``function`` under ``root`` by one pack (as a seeded node has)."""
    directory = root / function
    items = {p.stem: p.read_bytes() for p in directory.glob("*.json")}
    for eid in items:
        (directory / f"{eid}.json").unlink()
    packs.install(root, function, packfile.build(items.items()))
    assert not list(directory.glob("*.json")) and len(pack_files(root, function)) == 1
    return items


def tuned_entries(cache_dir: Path, keys: range = range(1, 4)) -> dict[str, bytes]:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    for n in keys:
        assert tuned(n)[1] == 1
    return pack_in_place(cache_dir)


def test_a_pack_holds_entries_byte_for_byte_behind_a_sorted_index(tmp_path: Path) -> None:
    items = {f"{n:032x}": json.dumps({"n": n}).encode() * (n + 1) for n in (7, 3, 250, 0)}
    data = packfile.build(items.items())
    magic, version, count = struct.unpack_from("<8sII", data)
    assert (magic, version, count) == (b"TDAPACK\n", 1, 4)
    pack = packfile.Pack.from_bytes(data)
    assert pack.ids() == sorted(items)
    assert {eid: blob for eid, blob, _ in pack.entries(data)} == items
    assert pack.find("f" * 32) is None and pack.find("not hex") is None
    path = tmp_path / packfile.pack_name(1, data)
    path.write_bytes(data)
    opened = packfile.Pack.open(path)
    assert all(opened.read(eid) == (blob, None) for eid, blob in items.items()) and opened.read("1" * 32) is None
    with pytest.raises(ValueError):
        packfile.build([("x" * 32, b"")])
    with pytest.raises(ValueError):
        packfile.build([("0" * 32, b"a"), ("0" * 32, b"b")])


def test_the_hit_rule_reads_a_packed_entry_and_a_loose_file_wins_over_it(cache_dir: Path) -> None:
    items = tuned_entries(cache_dir)
    again, probe = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    assert [again(n)[1] for n in range(1, 4)] == [1, 1, 1] and probe.benches == 0  # every key hit the pack
    call = decide.identify(again.target, ("x", 2), 1)
    verdict = decide.decide(call, cache_dir, version_check=False, cache_only=False)
    assert verdict.hit and verdict.path == files.entry_path(cache_dir, "host", call.id)
    assert packs.is_packed(verdict.source) and verdict.source.parent == pack_files(cache_dir, "host")[0]
    # inline tuning on the node writes loose files: the loose one wins, the packed one is history
    loose = json.loads(items[call.id])
    loose["best"] = {**loose["best"], "index": 2, "config": loose["candidates"][2]["config"]}
    files.write_entry(cache_dir, loose)
    assert [p.read_bytes() for p in (cache_dir / "host" / "history").iterdir()] == [items[call.id]]
    assert decide.decide(call, cache_dir, version_check=False, cache_only=False).index == 2
    entries, skipped = scan_function_dir(cache_dir / "host", cache_dir)
    assert len(entries) == 3 and not skipped  # the shadowed packed copy is not listed
    # an unusable loose file is a miss with a warning (it is the newer one): never the pack's
    (cache_dir / "host" / f"{call.id}.json").write_text("{")
    with pytest.warns(TritonDistWarning, match="ignoring cache file"):
        verdict = decide.decide(call, cache_dir, version_check=False, cache_only=False)
    assert not verdict.hit and verdict.why == "cache entry unusable (see warning)"


def test_of_several_packs_the_newest_that_holds_the_id_serves_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "f" / "packs").mkdir(parents=True)
    ids = [f"{n:032x}" for n in range(6)]
    for seq, chunk in ((1, ids[:4]), (2, ids[2:5]), (3, ids[5:])):  # 2 and 3 in two packs (by hand)
        data = packfile.build((eid, json.dumps({"seq": seq, "id": eid}).encode()) for eid in chunk)
        (root / "f" / "packs" / packfile.pack_name(seq, data)).write_bytes(data)
    got = {eid: json.loads(blob)["seq"] for eid, blob in served(root, "f").items()}
    assert got == {ids[0]: 1, ids[1]: 1, ids[2]: 2, ids[3]: 2, ids[4]: 2, ids[5]: 3}
    for eid, seq in got.items():
        entry, where, why = packs.load_entry(root, "f", eid)
        assert entry is None and why is not None and "not a triton_dist.autotune" in why  # not an entry
        assert where is not None and where.parent.name.startswith(f"{seq:08d}-")


def _corrupt(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flipped byte":
        data[-50] ^= 0x20
    elif how == "cut short":
        del data[-100:]
    elif how == "index cut":
        del data[20:]
    elif how == "foreign":
        data[:8] = b"PK\x03\x04...."
    elif how == "swapped records":  # the index names one entry but points at another's bytes
        first, second = data[16 + 16: 16 + 32], data[48 + 16: 48 + 32]
        data[16 + 16: 16 + 32], data[48 + 16: 48 + 32] = second, first
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flipped byte", "cut short", "index cut", "foreign", "swapped records"])
def test_a_bad_pack_is_a_miss_with_a_warning_never_a_crash_nor_another_config(cache_dir: Path, how: str) -> None:
    tuned_entries(cache_dir)
    (pack,) = pack_files(cache_dir, "host")
    _corrupt(pack, how)
    again, probe = make_tuner(times={0: 3.0, 1: 3.0, 2: 1.0})  # re-tuning now picks c=2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [again(n)[1] for n in range(1, 4)]
    assert any("ignoring cache" in str(w.message) for w in caught), [str(w.message) for w in caught]
    # each key is either a hit of its own intact entry (c=1) or re-tuned (c=2); never a crash
    retuned = [n for n, c in zip(range(1, 4), results, strict=True) if c == 2]
    assert set(results) <= {1, 2} and retuned and probe.benches == 3 * len(retuned)
    assert all(r == 1 for n, r in zip(range(1, 4), results, strict=True) if n not in retuned)


def test_removing_a_packed_entry_rewrites_its_pack(cache_dir: Path) -> None:
    items = tuned_entries(cache_dir)
    gone, kept = sorted(items)[0], sorted(items)[1:]
    (old,) = pack_files(cache_dir, "host")
    assert packs.remove(cache_dir, cache_dir / "host", [gone, "f" * 32]) == [gone]
    (new,) = pack_files(cache_dir, "host")
    assert new != old and new.name[:8] == old.name[:8]  # same place in the order, new bytes
    assert served(cache_dir, "host") == {eid: items[eid] for eid in kept}
    assert packs.load_entry(cache_dir, "host", gone) == (None, None, None)
    assert packs.remove(cache_dir, cache_dir / "host", kept) == kept and pack_files(cache_dir, "host") == []


RUNNER = textwrap.dedent('''
    import json

    import tuned_module

    result = tuned_module.work(4)
    print(json.dumps({"result": result, "calls": dict(tuned_module.CALLS)}))
''')


def test_a_fresh_process_hits_a_packed_entry_on_its_first_call(tmp_path: Path, cache_dir: Path) -> None:
    from tests.unit.test_cross_process import MODULE

    (tmp_path / "tuned_module.py").write_text(MODULE)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache_dir), "TRITON_DIST_DEVICE": "cpu",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])}

    def run() -> dict:
        done = subprocess.run([sys.executable, str(tmp_path / "runner.py")], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=100)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    tuned = run()
    assert sum(tuned["calls"].values()) == 3 * 15 + 1
    pack_in_place(cache_dir, "work")
    hit = run()
    assert hit["result"] == tuned["result"] and sum(hit["calls"].values()) == 1  # measured nothing
    # (how long that first call takes with a packed entry: benchmarks/p5_first_call.py)
