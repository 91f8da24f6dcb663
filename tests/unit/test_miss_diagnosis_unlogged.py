"""The miss diagnosis of a running process (a strict cache-only miss names the nearest entry)
reads the entries of its key through the key log (``_store.keyindex``, since b20aed9). An entry
the log lacks (copied in by hand, written by an older version, or by a writer or ``cache import``
killed before it logged) was found only by the listing a process makes once a minute: within
that minute the diagnosis named a farther entry than the one it used to read. Real tunings,
real files."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.helpers import make_tuner
from triton_dist._store import files
from triton_dist._store.diagnose import explain_miss
from triton_dist._store.paths import entry_id


def _variant(entry: dict, **fields) -> dict:
    out = dict(entry, **fields)
    out["id"] = entry_id(out["source_hash"], out["hardware"]["digest"], out["key"])
    return out


def test_an_entry_the_key_log_lacks_is_named_when_nearer_also_after_an_earlier_diagnosis(cache_dir: Path) -> None:
    tuned, _ = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    tuned(1)
    directory = cache_dir / "host"
    (path,) = directory.glob("*.json")
    entry = json.loads(path.read_text())
    path.unlink()  # the key misses here: its entry is gone (the log still names it)
    other_hardware = _variant(entry, hardware=dict(entry["hardware"], digest="eeeeeeeeeeeeeeee"))
    files.write_entry(cache_dir, other_hardware)  # logged

    def nearest() -> str:
        diag = explain_miss(cache_dir, "host", entry["key"], entry["source_hash"], entry["hardware"]["digest"])
        assert diag.verdict == "miss"
        return Path(str(diag.nearest_path)).stem

    assert nearest() == other_hardware["id"]
    # copied in by hand (cp from another node): an entry of this hardware, of other source, nearer
    other_source = _variant(entry, source_hash="0123456789abcdef")
    (directory / f"{other_source['id']}.json").write_text(files.dumps_entry(other_source))
    assert nearest() == other_source["id"]
