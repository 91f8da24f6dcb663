"""A miss that may reuse timings reads the entries of its own key, not every entry of the function
(``_store.keyindex``): on a node seeded with thousands of entries, the first call of a new shape
parsed all of them. Real entries from real tunings, packed as a seeded node holds them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.helpers import make_tuner
from tests.unit.test_packs import pack_in_place
from triton_dist._store import files, keyindex


def fresh_process_view(monkeypatch) -> list[bytes]:
    """Forget what this process learnt of the directories; count the entries parsed in full."""
    monkeypatch.setattr(keyindex, "_known", {})
    parsed: list[bytes] = []
    real = files.parse_entry

    def counting(raw: bytes):
        parsed.append(raw)
        return real(raw)

    monkeypatch.setattr(keyindex._cache, "parse_entry", counting)
    return parsed


def entries(cache_dir: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["key"]: json.loads(p.read_text()) for p in (cache_dir / "host").glob("*.json")}


def seeded(cache_dir: Path, monkeypatch, keys: int) -> tuple[dict[str, dict], dict[str, bytes], list[bytes]]:
    """``keys`` real tunings packed as a seeded node holds them: (entries by key, packed bytes by
    id, the entries parsed in full from now on)."""
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    for n in range(keys):
        tuned(n)
    by_key = entries(cache_dir)
    packed = pack_in_place(cache_dir)
    return by_key, packed, fresh_process_view(monkeypatch)


def test_a_packed_directory_is_read_for_one_key_without_parsing_the_other_entries(cache_dir, monkeypatch) -> None:
    by_key, _, parsed = seeded(cache_dir, monkeypatch, 40)
    key = by_key[next(k for k in by_key if "7" in k)]["key"]
    found = keyindex.entries_with_key(cache_dir / "host", cache_dir, key)
    assert [entry["key"] for _, entry in found] == [key]
    assert found[0][0].parent.parent.name == "packs"  # served from the pack
    assert len(parsed) == 1  # the one entry of that key, not the 40 of the function
    assert keyindex.entries_with_key(cache_dir / "host", cache_dir, "no such key") == []


def test_loose_files_shadow_packed_ones_and_new_or_removed_files_are_seen(cache_dir, monkeypatch) -> None:
    _, packed, _ = seeded(cache_dir, monkeypatch, 5)
    eid, blob = next(iter(packed.items()))
    entry = json.loads(blob)
    directory = cache_dir / "host"
    assert [p for p, _ in keyindex.entries_with_key(directory, cache_dir, entry["key"])][0].parent.name != "host"
    loose = directory / f"{eid}.json"
    loose.write_text(json.dumps({**entry, "created": "2030-01-01T00:00:00+00:00"}))  # another layout: one line
    [(path, served)] = keyindex.entries_with_key(directory, cache_dir, entry["key"])
    assert path == loose and served["created"].startswith("2030")  # the loose file wins, in any layout
    loose.unlink()
    [(path, served)] = keyindex.entries_with_key(directory, cache_dir, entry["key"])
    assert path.parent.parent.name == "packs" and served["created"] == entry["created"]


@pytest.mark.parametrize("layout", ["current", "indent"])
def test_the_key_is_read_from_either_layout_and_escapes_survive(layout) -> None:
    key = '((4096,), "torch.float32", \'q\\\\x\', "é")'
    entry = {"key": key, "candidates": [{"key": "not this one"}], "id": "0" * 32}
    text = files.dumps_entry(entry) if layout == "current" else json.dumps(entry, indent=2, sort_keys=True)
    assert keyindex.key_of(text.encode()) == key
    assert keyindex.key_of(b"not json") is None and keyindex.key_of(b'{"candidates": []}') is None


def test_a_job_tuning_many_new_shapes_does_not_reread_its_growing_directory(cache_dir, monkeypatch) -> None:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    for n in range(30):
        tuned(n)
    reads: list[str] = []
    real = keyindex.key_of
    monkeypatch.setattr(keyindex, "key_of", lambda blob: reads.append("x") or real(blob))
    tuned(1000)
    tuned(1001)  # its own new entry is the only new name the second miss reads
    assert len(reads) <= 2
