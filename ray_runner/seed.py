"""Writing merged entries where training jobs will look for them.

- the driver's cache root (always: what a re-run of the campaign skips);
- ``--seed shared``: one directory (``--cache-dir``) that every node mounts; the driver writes it;
- ``--seed nodes``: every alive node's own cache root, one task pinned to each node
  (``NodeAffinitySchedulingStrategy(soft=False)``). A node's root is ``--cache-dir`` when given,
  else that node's ``TRITON_DIST_AUTOTUNE_DIR`` (or ``~/.triton_dist/autotune``) as its Ray
  worker processes see it. On a fleet of several accelerator kinds each kind's nodes receive
  that kind's entries (``nodes``: :meth:`ray_runner.fleet.Fleet.seed`).

Seeding is flat in the node count: the driver reads the campaign's entry files once, puts their
bytes into the object store once (``ray.put``; each node pulls the object once), and starts one
task per node (one per node and per :data:`CHUNK_BYTES` of entries: a 20,000-case campaign of
small entries is one chunk). A node answers with counts, errors and one digest of the bytes now
on its disk, which the driver compares with the digest of what it sent: every node is verified
byte-identical to the driver's cache without the entries coming back.

A node's own work is small, because on one machine of a test cluster (and on a busy node) it is
what grows with the node count (issue 21; ~0.1 s of CPU to re-seed 10,000 identical entries,
~0.3 s to create them): each directory's names are listed once; an entry already there is read
once and compared (a byte-identical one is left alone, so seeding again adds no history, and a
different one is replaced with ``write_entry_text``, under the entry's lock, the old file to
history); a missing one is created with ``triton_dist._store.files.create_entry_text`` (an
unnamed file linked in place: the name appears complete, never replaces a file, so no lock, and
one change to the directory per file); then one flush of the root's file system for the whole
batch instead of an fsync per file (:func:`_flush` says why that is safe).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import socket
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from triton_dist._store import files as _cache

__all__ = ["CHUNK_BYTES", "seed_nodes", "write_files"]

log = logging.getLogger(__name__)

#: the most entry bytes one object (and one task per node) carries: bounds the driver's memory
CHUNK_BYTES = 64 * 2**20


def _relative(rel: str) -> tuple[str, str]:
    """(``<function>``, ``<id>.json``), refusing anything that would leave the cache root."""
    parts = rel.split("/")
    if (len(parts) != 2 or any(p in ("", ".", "..") or "\0" in p for p in parts) or not parts[1].endswith(".json")
            or parts[1] == ".json"):
        raise ValueError(f"not an entry's path inside a cache root: {rel!r}")
    return parts[0], parts[1]


#: what :func:`_read` answers for a name that is there but is not a plain file (a link, a FIFO)
_NOT_PLAIN = object()


def _read(folder: int, name: str, size: int) -> Any:
    """The bytes of the plain file ``name`` in the directory ``folder`` (at most ``size + 1``:
    enough to tell it from ``size`` bytes), None if there is none, :data:`_NOT_PLAIN` if something
    else is there. One open and one read: comparing 10,000 entries with what is on disk costs
    ~0.05 s (issue 21)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symbolic link: never followed, replaced
            return _NOT_PLAIN
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return _NOT_PLAIN
        # one read: a plain file gives all it has up to the count (a short read would only make
        # an identical file look different, and be replaced by the same bytes)
        return os.read(fd, size + 1)
    finally:
        os.close(fd)


def write_files(root: str | Path | None, items: Sequence[tuple[str, bytes]]) -> dict[str, Any]:
    """Write entry files (``(relative path, bytes)``) under ``root`` (None: this process's
    settings root); a summary with the digest of the bytes now on disk (:func:`digest_of`).

    Per file (module docstring): a read and compare if one is there, else a creation without
    lock or fsync; a different one is replaced under its lock. Then one flush of the root's file
    system for the whole batch (:func:`_flush`)."""
    from triton_dist.settings import get_settings

    root = Path(root).expanduser() if root is not None else get_settings().autotune_dir
    started, cpu = time.perf_counter(), time.process_time()
    written = unchanged = 0
    errors: list[str] = []
    digest = hashlib.sha256()
    folders: dict[str, int] = {}  # open descriptors of the directories checked (private, inside the root)
    present: dict[str, set[str]] = {}  # the names in each directory when seeding began
    base = str(root)
    try:
        for rel, data in items:
            path = f"{base}/{rel}"
            try:
                folder, name = _relative(rel)
                if folder not in folders:
                    root.mkdir(mode=0o700, parents=True, exist_ok=True)
                    _cache.ensure_private_dir(root / folder, root)
                    folders[folder] = os.open(root / folder, os.O_RDONLY | os.O_DIRECTORY)
                    present[folder] = set(os.listdir(folders[folder]))  # a fresh node: no read per entry
                fd = folders[folder]
                on_disk = _read(fd, name, len(data)) if name in present[folder] else None
                if on_disk is None and _cache.create_entry_text(path, data, fsync=False, folder=fd):
                    written += 1
                    on_disk = data
                else:
                    if on_disk is None:  # created meanwhile by another writer
                        on_disk = _read(fd, name, len(data))
                    if on_disk == data:
                        unchanged += 1
                    else:
                        _cache.write_entry_text(root, Path(path), data.decode("utf-8"), durable=False)
                        written += 1
                        on_disk = Path(path).read_bytes()  # what a training job on this node will read
                _add(digest, rel, on_disk)
            except (OSError, ValueError) as exc:
                errors.append(f"{path}: {exc}")
                _add(digest, rel, b"")
    finally:
        for fd in folders.values():
            os.close(fd)
    synced = time.perf_counter()
    if written:
        _flush(root)
    return {"host": socket.gethostname(), "root": str(root), "written": written, "unchanged": unchanged,
            "errors": errors, "digest": digest.hexdigest(), "seconds": round(time.perf_counter() - started, 3),
            "cpu_s": round(time.process_time() - cpu, 3), "flush_s": round(time.perf_counter() - synced, 3)}


def _flush(root: Path) -> None:
    """The batch's one durability barrier: flush the file system that holds ``root``
    (``syncfs``, Linux; elsewhere ``os.sync``, every file system) instead of one fsync per file.

    Each file was linked into place complete, so until the flush only a crash of the machine (not
    of a process: the page cache survives it) could leave an entry missing, empty, zeroed or cut
    short. None of those is ever a wrong config: entries carry no checksum, but a reader parses
    every entry and checks it (``_store.files.load_json``, ``_store.check``), and a cut-short
    JSON object never parses (its closing brace comes last), so it is a miss with a warning; and
    seeding again finds the file different and replaces it."""
    fd = None
    try:
        import ctypes

        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) == 0:
            return
    except (OSError, AttributeError):  # no syncfs in this C library
        pass
    finally:
        if fd is not None:
            os.close(fd)
    os.sync()


def _add(digest: Any, rel: str, data: bytes) -> None:
    digest.update(rel.encode())
    digest.update(hashlib.sha256(data).digest())


def digest_of(items: Sequence[tuple[str, bytes]]) -> str:
    """The digest :func:`write_files` returns when every file is on disk byte for byte."""
    digest = hashlib.sha256()
    for rel, data in items:
        _add(digest, rel, data)
    return digest.hexdigest()


def _seed_here(items: Sequence[tuple[str, bytes]], root: str | None,
               binaries: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    import json

    import ray

    result = write_files(root, items)
    if binaries:  # the compiled winners of these entries, into this node's Triton cache
        from .binaries import install_here

        entries = [json.loads(data) for rel, data in items if PurePosixPath(rel).stem in binaries]
        result["binaries"] = install_here(entries, binaries)
        result["errors"] += result["binaries"]["errors"]
    result["node_id"] = ray.get_runtime_context().get_node_id()
    return result


def _chunks(paths: Sequence[str], root: Path) -> Iterator[list[tuple[str, bytes]]]:
    """The entry files under ``root``, read once, in chunks of at most ~:data:`CHUNK_BYTES`."""
    chunk: list[tuple[str, bytes]] = []
    size = 0
    for path in paths:
        rel = Path(path).relative_to(root).as_posix()
        data = Path(path).read_bytes()
        chunk.append((rel, data))
        size += len(data)
        if size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def seed_nodes(paths: Sequence[str], root: str | Path, cache_dir: str | None, timeout_s: float,
               binaries: dict[str, dict[str, Any]] | None = None,
               nodes: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Copy the entry files ``paths`` (inside the driver's cache ``root``) into the cache root of
    every alive node (or of ``nodes``, records of ``ray.nodes()``: seeding by accelerator kind,
    :mod:`ray_runner.fleet`), verified byte-identical; one summary per node. ``binaries`` (entry
    id -> bundle, :mod:`ray_runner.binaries`) go into each node's Triton cache."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ._ray import alive_nodes, import_ray

    ray = import_ray()
    task = ray.remote(num_cpus=0, max_retries=1)(_seed_here)
    nodes = alive_nodes() if nodes is None else list(nodes)
    totals = {n["NodeID"]: {"node_id": n["NodeID"], "host": n.get("NodeManagerAddress"), "root": cache_dir,
                            "address": n.get("NodeManagerAddress"), "written": 0, "unchanged": 0, "errors": [],
                            "seconds": 0.0, "cpu_s": 0.0, "flush_s": 0.0} for n in nodes}
    started = time.monotonic()
    for chunk in _chunks(paths, Path(root)):
        expected = digest_of(chunk)
        ids = {PurePosixPath(rel).stem for rel, _ in chunk}
        shipped = ray.put({i: b for i, b in binaries.items() if i in ids}) if binaries else None
        payload = ray.put(chunk)  # once: every node's task pulls the same object
        del chunk
        refs = {n["NodeID"]: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(payload, cache_dir, shipped) for n in nodes}
        del payload, shipped
        _collect(ray, refs, totals, expected, timeout_s)
    results = list(totals.values())
    for result in results:
        log.info("seeded node %s (%s): %d written, %d already there, root %s, %.1fs%s", result["node_id"][:12],
                 result["address"], result["written"], result["unchanged"], result["root"], result["seconds"],
                 f", {len(result['errors'])} errors" if result["errors"] else "")
    log.info("seeded %d entries on %d node(s) in %.1fs", len(paths), len(nodes), time.monotonic() - started)
    return results


def _collect(ray: Any, refs: dict[str, Any], totals: dict[str, dict[str, Any]], expected: str,
             timeout_s: float) -> None:
    """Add each node's answer for one chunk to its summary; a node whose bytes differ from the
    driver's, that died or timed out gets an error."""
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    ready_set = set(ready)
    for node_id, ref in refs.items():
        total = totals[node_id]
        try:
            if ref not in ready_set:
                ray.cancel(ref, force=True)
                raise TimeoutError(f"the seed task did not finish within {timeout_s:g}s")
            result = ray.get(ref, timeout=0)
        except Exception as exc:  # noqa: BLE001 - a node that died or timed out is reported, not fatal
            total["errors"].append(f"{type(exc).__name__}: {exc}"[:500])
            continue
        for field in ("written", "unchanged", "seconds", "cpu_s", "flush_s"):
            total[field] += result[field]
        total["errors"] += result["errors"]
        total["host"], total["root"] = result["host"], result["root"]
        if "binaries" in result:
            seen = total.setdefault("binaries", {"installed": 0, "unchanged": 0, "skipped": [], "errors": []})
            for field in ("installed", "unchanged", "skipped", "errors"):
                seen[field] += result["binaries"].get(field, 0 if field in ("installed", "unchanged") else [])
            seen["dir"] = result["binaries"].get("dir", "")
        if result["digest"] != expected and not result["errors"]:
            total["errors"].append(f"the entries on {result['host']} under {result['root']} are not byte-identical "
                                   "to the driver's after seeding")
