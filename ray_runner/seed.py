"""Writing merged entries where training jobs will look for them.

- the driver's cache root (always: what a re-run of the campaign skips);
- ``--seed shared``: one directory (``--cache-dir``) that every node mounts; the driver writes it
  (one loose file per entry, as the driver's own cache);
- ``--seed nodes``: every alive node's own cache root, one task pinned to each node
  (``NodeAffinitySchedulingStrategy(soft=False)``). A node's root is ``--cache-dir`` when given,
  else that node's ``TRITON_DIST_AUTOTUNE_DIR`` (or ``~/.triton_dist/autotune``) as its Ray
  worker processes see it. On a fleet of several accelerator kinds each kind's nodes receive
  that kind's entries (``nodes``: :meth:`ray_runner.fleet.Fleet.seed`).

Seeding is flat in the node count: the driver reads the campaign's entry files once, builds one
*pack* per function (``triton_dist._store.packfile``: the entries' bytes, byte-identical, behind
a sorted index) per :data:`CHUNK_BYTES` of entries (a 20,000-case campaign of small entries is
one chunk), puts the packs into the object store once (``ray.put``; each node pulls the object
once) and starts one task per node. A node answers with counts, errors and one digest of the
bytes it now serves for those entries (read back from its disk), which the driver compares with
the digest of what it sent: every node is verified byte-identical to the driver's cache without
the entries coming back.

A node writes one file per function (``triton_dist._store.packs.install``, under the function's
pack lock: a byte-identical pack already there is left alone, so seeding again adds nothing and no
history; older packs lose the ids, a loose file of one of them that differs goes to history),
then flushes its file system once (:func:`_flush`). Creating one file per entry instead cost a
node >= 0.15 s of CPU per 10,000 entries, and on one machine of a test cluster (and on a busy
node) a node's own work is what grows with the node count (issue 21).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store import packfile, packs

__all__ = ["CHUNK_BYTES", "build_packs", "check_node_roots", "mark_lost", "probe_writable", "seed_nodes", "write_packs"]

log = logging.getLogger(__name__)

#: the most entry bytes one object (and one task per node) carries: bounds the driver's memory
CHUNK_BYTES = 64 * 2**20


def _relative(rel: str) -> tuple[str, str]:
    """(``<function>``, ``<id>``) of ``<function>/<id>.json``, refusing anything that would
    leave the cache root or is not an entry's name."""
    parts = rel.split("/")
    if (len(parts) != 2 or any(p in ("", ".", "..") or "\0" in p for p in parts)
            or not _is_entry_name(parts[1]) or parts[0] != _cache.safe_name(parts[0])):
        raise ValueError(f"not an entry's path inside a cache root: {rel!r}")
    return parts[0], parts[1][:-5]


def _is_entry_name(name: str) -> bool:
    return len(name) == 37 and name.endswith(".json") and all(c in "0123456789abcdef" for c in name[:32])


def build_packs(items: Sequence[tuple[str, bytes]]) -> tuple[list[tuple[str, bytes]], str]:
    """The packs of entry files ``(relative path, bytes)``: ``[(function directory, pack bytes)]``
    and the digest a node answers when it serves every entry byte for byte (:func:`write_packs`:
    of each pack as it reads it back from its disk; a loose file of the same id that it leaves in
    place was compared with the pack's bytes)."""
    by_folder: dict[str, dict[str, bytes]] = {}
    for rel, data in items:
        folder, eid = _relative(rel)
        by_folder.setdefault(folder, {})[eid] = data
    digest = hashlib.sha256()
    out = []
    for folder, entries in by_folder.items():
        out.append((folder, packfile.build(entries.items())))
        _add(digest, folder, out[-1][1])
    return out, digest.hexdigest()


def write_packs(root: str | Path | None, shipped: Sequence[tuple[str, bytes]]) -> dict[str, Any]:
    """Install packs (``(function directory, pack bytes)``, :func:`build_packs`) under ``root``
    (None: this process's settings root); a summary with the digest of the bytes now served for
    their entries (each pack read back from the disk). Then one flush of the root's file system
    for the whole batch (:func:`_flush`)."""
    from triton_dist.settings import get_settings

    root = Path(root).expanduser() if root is not None else get_settings().autotune_dir
    started, cpu = time.perf_counter(), time.process_time()
    written = unchanged = 0
    errors: list[str] = []
    digest = hashlib.sha256()
    for folder, data in shipped:
        try:
            if folder in ("", ".", "..") or "/" in folder or "\0" in folder or folder != _cache.safe_name(folder):
                raise ValueError(f"not a function directory's name: {folder!r}")
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            served, count, changed, problems = packs.install(root, folder, data)
            errors += problems
            written, unchanged = written + changed, unchanged + count - changed
            digest.update(folder.encode())
            digest.update(bytes.fromhex(served))
        except (OSError, ValueError) as exc:
            errors.append(f"{root}/{folder}: {exc}")
            digest.update(b"\0failed")
    synced = time.perf_counter()
    if written:
        _flush(root)
    return {"host": socket.gethostname(), "root": str(root), "written": written, "unchanged": unchanged,
            "errors": errors, "digest": digest.hexdigest(), "seconds": round(time.perf_counter() - started, 3),
            "cpu_s": round(time.process_time() - cpu, 3), "flush_s": round(time.perf_counter() - synced, 3)}


def _flush(root: Path) -> None:
    """The batch's one durability barrier: flush the file system that holds ``root``
    (``syncfs``, Linux; elsewhere ``os.sync``, every file system) instead of one fsync per file.

    Each pack was renamed into place complete, so until the flush only a crash of the machine
    (not of a process: the page cache survives it) could leave a pack missing, empty, zeroed or
    cut short. None of those is ever a wrong config: a reader checks a pack's header and index,
    each entry's bytes against the CRC-32 of the index, then parses and checks the entry
    (``_store.packfile``, ``_store.check``), so it is a miss with a warning; and seeding again
    finds the pack different and writes it again."""
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
    """One pack into a seeding's digest: its function directory and the SHA-256 of its bytes."""
    digest.update(rel.encode())
    digest.update(hashlib.sha256(data).digest())


def digest_of(items: Sequence[tuple[str, bytes]]) -> str:
    """The digest :func:`write_packs` returns when every entry file of ``items`` is served byte
    for byte (:func:`build_packs`'s)."""
    return build_packs(items)[1]


def _seed_here(shipped: Sequence[tuple[str, bytes]], root: str | None,
               binaries: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    import json

    import ray

    result = write_packs(root, shipped)
    if binaries:  # the compiled winners of these entries, into this node's Triton cache
        from .binaries import install_here

        entries = [json.loads(blob) for _, data in shipped
                   for eid, blob, _ in packfile.Pack.from_bytes(data).entries(data)
                   if eid in binaries and blob is not None]
        result["binaries"] = install_here(entries, binaries)
        result["errors"] += result["binaries"]["errors"]
    result["node_id"] = ray.get_runtime_context().get_node_id()
    return result


def _chunks(paths: Sequence[str], root: Path, refused: list[str]) -> Iterator[list[tuple[str, bytes]]]:
    """The entry files under ``root``, read once, in chunks of at most ~:data:`CHUNK_BYTES`; one
    that the reader would not take (damaged since its case finished) is left out and said in
    ``refused``: a node's good copy must not be replaced by it."""
    chunk: list[tuple[str, bytes]] = []
    size = 0
    for path in paths:
        rel = Path(path).relative_to(root).as_posix()
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            refused.append(f"{path}: {type(exc).__name__}: {exc}"[:500])
            continue
        entry, why = _cache.parse_entry(data)
        if entry is None:
            refused.append(f"{path}: {why}"[:500])
            continue
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
    refused: list[str] = []
    for chunk in _chunks(paths, Path(root), refused):
        built, expected = build_packs(chunk)  # once, here: a node writes one file per function
        ids = {PurePosixPath(rel).stem for rel, _ in chunk}
        shipped = ray.put({i: b for i, b in binaries.items() if i in ids}) if binaries else None
        payload = ray.put(built)  # once: every node's task pulls the same object
        del chunk, built
        refs = {n["NodeID"]: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(payload, cache_dir, shipped) for n in nodes}
        del payload, shipped
        _collect(ray, refs, totals, expected, timeout_s)
    results = list(totals.values())
    for result in results:  # every node lacks them: each one's summary says so (and the run fails)
        result["errors"] += [f"not seeded, the driver's entry is unusable (run the campaign again to tune "
                             f"its case): {why}" for why in refused]
    if any(r["errors"] for r in results):  # a node that died while seeding is lost, not failed
        mark_lost(results, _alive_after_deaths(results, alive_nodes))
    for result in results:
        log.info("seeded node %s (%s): %d written, %d already there, root %s, %.1fs%s", result["node_id"][:12],
                 result["address"], result["written"], result["unchanged"], result["root"], result["seconds"],
                 f", {len(result['errors'])} errors" if result["errors"] else
                 " (left the cluster while seeding)" if result.get("lost") else "")
    whole = [r for r in results if not r["errors"] and not r.get("lost")]
    log.info("seeded %d entries on %d of %d node(s) in %.1fs%s", len(paths) - len(refused), len(whole),
             len(nodes), time.monotonic() - started,
             "" if len(whole) == len(nodes) else
             "; not on " + ", ".join(f"{r['address']} ({r['node_id'][:12]})" for r in results if r not in whole))
    return results


#: the errors of a seed task whose node may have died (not a problem of the node's disk)
_DEATHS = ("NodeDiedError", "WorkerCrashedError", "TaskUnschedulableError", "ObjectLostError", "OwnerDiedError",
           "ActorDiedError", "RaySystemError", "LocalRayletDiedError")
#: how long a node whose task died may still be listed alive: Ray calls a crashed node dead only
#: after its health checks fail (tens of seconds by default; a shut-down node at once)
NODE_DEATH_WAIT_S = 60.0


def _alive_after_deaths(results: Sequence[dict[str, Any]], alive_nodes: Any) -> set[str]:
    """The alive nodes' ids, once every node whose task died of a death error is known dead or
    :data:`NODE_DEATH_WAIT_S` has passed (a crash was exit 1 with Ray's error while Ray still
    listed the node: a reviewer, 2026-12-05)."""
    suspects = {r["node_id"] for r in results if any(str(e).startswith(_DEATHS) for e in r["errors"])}
    deadline = time.monotonic() + NODE_DEATH_WAIT_S
    while True:
        alive = {n["NodeID"] for n in alive_nodes()}
        if not suspects & alive or time.monotonic() >= deadline:
            return alive
        time.sleep(1.0)


def mark_lost(results: Sequence[dict[str, Any]], alive: set[str]) -> None:
    """Nodes of ``results`` that are no longer alive left the cluster: their errors (the task
    could not be scheduled, its worker died) become ``lost``, said in a warning, and do not fail
    the run: a node that is gone needs no entries, and one that comes back (or its replacement)
    is found by ``preflight`` and seeded by running the campaign again (it resumes and only seeds).
    A node that died before or while seeding was an error in one run and nothing in another (a
    tester, 2026-12-05)."""
    for result in results:
        if result.get("node_id") in alive or result.get("lost"):
            continue
        result["lost"] = "; ".join(result.pop("errors", []) or ["left the cluster during the campaign"])[:500]
        result["errors"] = []
        log.warning("node %s (%s) left the cluster before it was seeded: its cache has none of this campaign's "
                    "entries. When it (or a replacement) joins, `python -m ray_runner preflight` names it and "
                    "running the campaign again with --seed nodes seeds it without tuning",
                    result.get("address"), str(result.get("node_id"))[:12])


def probe_writable(folder: Path, mode: int = 0o700) -> None:
    """Make ``folder`` (``mode``, with its parents) if need be, then create and remove one file in
    it: raises the ``OSError`` of a folder this user cannot write (a read-only mount, another
    user's folder, a file in its path). The driver checks its cache root and report directory
    with it (``campaign``), each node its cache root (:func:`check_node_roots`)."""
    import tempfile

    folder.mkdir(mode=mode, parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
        pass


def _root_here(cache_dir: str | None) -> dict[str, Any]:
    """This node's cache root (as :func:`write_packs` resolves it), made and written to once."""
    import ray

    from triton_dist.settings import get_settings

    root = Path(cache_dir).expanduser() if cache_dir is not None else get_settings().autotune_dir
    error = None
    try:
        probe_writable(root)
    except OSError as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "root": str(root),
            "error": error}


def check_node_roots(cache_dir: str | None, timeout_s: float = 60.0) -> list[str]:
    """Before a ``--seed nodes`` campaign tunes anything: every alive node's cache root can be
    created and written (one task per node, no CPU asked). One line per node that cannot (a
    read-only mount, a root owned by another user); a node that does not answer in ``timeout_s``
    is said in a warning only. An unwritable node root was found only when seeding, after every
    case was tuned (a tester, 2026-12-05)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ._ray import alive_nodes, import_ray

    ray = import_ray()
    task = ray.remote(num_cpus=0, max_retries=0)(_root_here)
    nodes = alive_nodes()
    refs = {task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
            .remote(cache_dir): n for n in nodes}
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    problems = []
    for ref in ready:
        node = refs[ref]
        try:
            answer = ray.get(ref, timeout=0)
        except Exception as exc:  # noqa: BLE001 - a node that died meanwhile: seeding says so
            log.warning("node %s: its cache root was not checked: %s", node.get("NodeManagerAddress"), exc)
            continue
        if answer["error"]:
            problems.append(f"node {node.get('NodeManagerAddress')} ({answer['node_id'][:12]}, host "
                            f"{answer['host']}): cache root {answer['root']}: {answer['error']}")
    for ref in late:
        ray.cancel(ref, force=True)
        log.warning("node %s did not say within %gs whether its cache root is writable; seeding will tell",
                    refs[ref].get("NodeManagerAddress"), timeout_s)
    return problems


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
