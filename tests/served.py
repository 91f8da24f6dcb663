"""What a cache root serves for a function, whatever its layout: loose files and packed entries
(``triton_dist._store.packs``), by entry id. Seeded nodes hold packs; a driver's root, loose files."""

from __future__ import annotations

from pathlib import Path

from triton_dist._store import packfile, packs


def served(root: Path, function: str) -> dict[str, bytes]:
    """{entry id: the bytes a reader of ``root`` gets for it} of ``function``'s directory."""
    directory = Path(root) / function
    out = {p.stem: p.read_bytes() for p in directory.glob("*.json")}
    data: dict[str, bytes | None] = {}
    for pack, eid in packs.packed_ids(directory, Path(root)):
        if pack.path not in data:
            data[pack.path] = packfile.read_all(pack.path)
        blob, why = pack.slice(data[pack.path], eid)
        assert blob is not None, why
        out[eid] = blob
    return out


def pack_files(root: Path, function: str) -> list[Path]:
    """The pack files of ``function``'s directory under ``root``, newest first."""
    return [Path(p) for p in packfile.pack_paths(Path(root) / function)]
