"""Gangs kept alive between campaigns: ``ray_runner run --keep-gangs SECONDS``.

A gang's start-up (worker processes, torch/Triton imports, device contexts, communicators) costs
5-10 s per gang on a GPU node: a short campaign on few devices spends much of its wall there
(docs/performance.md, P4). With ``--keep-gangs``, a campaign's gangs are named, detached Ray
actors on a named, detached placement group; when the campaign ends they stay, and the next
campaign on the same cluster that is also run with ``--keep-gangs`` claims them instead of starting
its own, until they have been idle for SECONDS, when they remove their placement group (which ends
them) themselves. Until then they hold their devices: a campaign run without ``--keep-gangs``
(its gangs are not pooled: it never looks for kept ones) or of another shape has fewer devices,
and its placement-timeout message names the kept gangs (``gang._kept_gangs_note``).

A pooled gang is reused only by a campaign that would have started the very same gang: same
device kind, resource, placement strategy, environment, world size and block sizes, and the same
code: the files of every target's and builder's top-level package (or module), of triton_dist
and of ray_runner are hashed into the pool key, because the actors keep what they imported,
with the user's own modules those files import (outside the standard library and site-packages).
An installed package is not covered: ``python -m ray_runner pool stop`` after changing it.
A kept gang that lost an actor is not reused: its rank 0 ends it once idle;
one that lost its rank 0 (its node died; Ray may place the group again, empty) is removed by the
next ``--keep-gangs`` run that looks at its slot, and ``pool ls`` shows how many actors live.
A gang is claimed by one campaign at a time (its rank 0 holds the claim);
a gang whose case failed is killed, not kept.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import re
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["NAMESPACE", "PREFIX", "code_digest", "gang_key", "list_pooled", "stop_pooled"]

log = logging.getLogger(__name__)

NAMESPACE = "ray_runner_pool"
PREFIX = "ray_runner-pool-"
#: how many pooled gangs of one key may exist side by side (one per concurrent gang)
MAX_SLOTS = 64
#: at most this many files of one package are hashed (a huge tree is hashed by name and size)
MAX_FILES = 5000


def _find_spec(top: str) -> importlib.machinery.ModuleSpec | None:
    """Where the top-level module ``top`` is found on sys.path, nothing imported; None where it is
    not (or its name is no module name)."""
    try:
        return importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None


def _package_files(module: str) -> list[tuple[str, Path]]:
    """The ``.py`` files of ``module``'s top-level package (or the module's file), each with its
    path relative to the folder that holds the package: the digest must not change with where the
    code lies (``ray job submit --working-dir`` unpacks it into a new session folder each time)."""
    top = module.split(".")[0]
    spec = _find_spec(top)
    if spec is None:
        # where the actors look last (worker.load_attr): the working directory, which a console
        # script (`ray-runner`) does not put on sys.path as `python -m ray_runner` does; without
        # it an edited or renamed target there went unnoticed by a resumed run (a tester, session 28)
        here = Path.cwd()
        package, single = here / top, here / f"{top}.py"
        if (package / "__init__.py").is_file():
            return [(f.relative_to(here).as_posix(), f) for f in sorted(package.rglob("*.py"))]
        return [(single.name, single)] if single.is_file() else []
    if spec.submodule_search_locations:
        files: list[tuple[str, Path]] = []
        for root in spec.submodule_search_locations:
            base = Path(root)
            files.extend((f"{top}/{f.relative_to(base).as_posix()}", f) for f in sorted(base.rglob("*.py")))
        return files
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return [(Path(spec.origin).name, Path(spec.origin))]
    return []


#: a top-level name a file imports: ``from a.b import x`` (not a relative import), ``import a.b, c as d``
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([A-Za-z_]\w*)[\w.]*[ \t]+import\b|import[ \t]+([\w. \t,]+))", re.M)
#: ours, hashed whole: their imports are not followed
_OURS = ("triton_dist", "ray_runner")


def _imports(files: list[tuple[str, Path]]) -> set[str]:
    """The top-level names that ``files`` import (a cheap scan of their lines, nothing imported)."""
    names: set[str] = set()
    for _, path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in _IMPORT.finditer(text):
            if match.group(1):
                names.add(match.group(1))
            else:
                names.update(part.split()[0].split(".")[0] for part in match.group(2).split(",") if part.split())
    return names


def _users_own(top: str) -> bool:
    """Whether the top-level module ``top`` is the user's code: neither the standard library nor an
    installed package (site-packages), found on sys.path or, as the actors look last, in the
    working directory."""
    if top in _OURS or top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return False
    spec = _find_spec(top)
    if spec is None:
        return bool(_package_files(top))
    where = spec.origin if spec.origin not in (None, "built-in", "frozen") else next(
        iter(spec.submodule_search_locations or ()), None)
    return where is not None and not {"site-packages", "dist-packages"} & set(Path(where).parts)


def _with_own_imports(modules: Iterable[str]) -> set[str]:
    """The top-level packages (or modules) of ``modules`` and, followed from their files, those of
    the user's own code they import: a target's constants, ``key_fn`` or ``prune_fn`` read from a
    settings module beside it (``from usercfg import GRAIN``) change the keys and verdicts without
    a byte of the target's package changing, and a resumed run took the cases as finished (the
    strict job then missed every key; 2026-12-05). At most :data:`MAX_FILES` files are scanned."""
    tops = {m.split(".")[0] for m in modules}
    todo, scanned = sorted(tops - set(_OURS)), 0
    while todo and scanned < MAX_FILES:
        files = _package_files(todo.pop())
        scanned += len(files)
        for name in sorted(_imports(files[:MAX_FILES]) - tops):
            if _users_own(name):
                tops.add(name)
                todo.append(name)
    return tops


def code_digest(modules: Iterable[str]) -> str:
    """A hash of the code pooled actors would run: the given modules' top-level packages (every
    ``.py`` file), those of the user's own code they import (:func:`_with_own_imports`),
    triton_dist and ray_runner."""
    h = hashlib.sha256()
    seen: set[Path] = set()
    for module in sorted({*_with_own_imports(modules), *_OURS}):
        files = _package_files(module)
        for i, (rel, path) in enumerate(files):
            if path in seen:
                continue
            seen.add(path)
            h.update(rel.encode() + b"\0")
            try:
                h.update(path.read_bytes() if i < MAX_FILES else str(path.stat().st_size).encode())
            except OSError:
                h.update(b"?")
    return h.hexdigest()[:16]


def gang_key(code: str, kind: str, resource: str, strategy: str, env: dict[str, str], world_size: int,
             sizes: list[int]) -> str:
    blob = json.dumps([code, kind, resource, strategy, sorted(env.items()), world_size, sorted(sizes)])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pg_name(key: str, slot: int) -> str:
    return f"{PREFIX}{key}-{slot}"


def actor_name(key: str, slot: int, rank: int) -> str:
    return f"{pg_name(key, slot)}-r{rank}"


_lock = threading.Lock()
#: slots this process is creating a gang in (gangs of one key start side by side in threads)
_forming: set[tuple[str, int]] = set()


def claim(ray: Any, key: str, world_size: int, token: str, timeout_s: float = 5.0,
          first_slot: int = 0) -> tuple[Any, list[Any] | None, int]:
    """Claim an idle pooled gang of ``key``: (placement group, actors, slot); or, when there is
    none, (None, None, the first free slot), reserved in this process until :func:`formed` (the
    caller creates the gang there); -1: every slot is taken."""
    from ray.util import get_placement_group

    for slot in range(first_slot, MAX_SLOTS):
        with _lock:
            if (key, slot) in _forming:
                continue
        try:
            pg = get_placement_group(pg_name(key, slot))
        except ValueError:  # no such group: a new gang goes here
            with _lock:
                if (key, slot) in _forming:
                    continue
                _forming.add((key, slot))
            return None, None, slot
        try:
            actors = [ray.get_actor(actor_name(key, slot, r), namespace=NAMESPACE) for r in range(world_size)]
        except ValueError:  # forming in another driver, or some actor died: not ours to touch ...
            if not _orphaned(ray, pg, pg_name(key, slot), world_size):
                continue
            # ... unless rank 0, its only reaper, is gone (its node died; Ray may place the group
            # again, empty): it held its devices for ever (a tester, a reviewer)
            _remove(pg, pg_name(key, slot))
            continue
        try:
            if ray.get(actors[0].claim.remote(token), timeout=timeout_s):
                ray.get([a.node.remote() for a in actors], timeout=timeout_s)
                return pg, actors, slot
        except Exception as exc:  # noqa: BLE001 - busy (a case is running) or dead: try the next slot
            log.debug("pooled gang %s not available: %s", pg_name(key, slot), exc)
    return None, None, -1


def formed(key: str, slot: int) -> None:
    """The gang of ``key`` in ``slot`` exists now, or could not be created: release the slot."""
    with _lock:
        _forming.discard((key, slot))


def _alive(ray: Any, name: str, world_size: int, ranks: range | None = None) -> int:
    """How many actors of the pooled gang ``name`` exist (a dead one loses its name); of
    ``ranks`` only, when given."""
    alive = 0
    for r in ranks if ranks is not None else range(world_size):
        try:
            ray.get_actor(f"{name}-r{r}", namespace=NAMESPACE)
            alive += 1
        except ValueError:  # no actor of that name: it died (or is not made yet)
            pass
        except Exception as exc:  # noqa: BLE001 - cannot tell (the control server is slow): not called dead
            log.debug("looking up %s-r%d: %s", name, r, exc)
            alive += 1
    return alive


#: seconds between the two looks that call a placed gang without actors orphaned (a driver that
#: places a gang names its actors right after the group is ready: milliseconds)
ORPHAN_RECHECK_S = 2.0


def _orphaned(ray: Any, pg: Any, name: str, world_size: int) -> bool:
    """Whether the group ``name`` is placed and its rank 0 (the only reaper: it ends an idle gang)
    is gone, twice ``ORPHAN_RECHECK_S`` apart (a group still pending is another driver's gang
    waiting for devices; a driver names rank 0 first, right after the group is placed)."""
    import time

    try:
        placed = ray.util.placement_group_table(pg).get("state") == "CREATED"
    except Exception as exc:  # noqa: BLE001 - removed meanwhile
        log.debug("state of %s: %s", name, exc)
        return False
    first = range(1)
    if not placed or _alive(ray, name, world_size, first):
        return False
    time.sleep(ORPHAN_RECHECK_S)
    return not _alive(ray, name, world_size, first)


def _remove(pg: Any, name: str) -> None:
    from ray.util import remove_placement_group

    try:
        remove_placement_group(pg)
        log.warning("kept gang %s had lost its rank 0 (its node died?), which ends it once idle, and still held "
                    "its devices: removed", name)
    except Exception as exc:  # noqa: BLE001 - removed by another driver meanwhile
        log.debug("removing %s: %s", name, exc)


def list_pooled(ray: Any) -> list[dict[str, Any]]:
    """The pooled gangs' placement groups alive on the cluster: name, state, bundles, and how
    many of their actors exist (``actors``; fewer than ``bundles``: some died, 0: orphaned)."""
    table = ray.util.placement_group_table()
    rows = []
    for info in table.values():
        name = info.get("name") or ""
        if name.startswith(PREFIX) and info.get("state") != "REMOVED":
            bundles = len(info.get("bundles") or {})
            rows.append({"name": name, "state": info.get("state"), "bundles": bundles,
                         "strategy": info.get("strategy"), "actors": _alive(ray, name, bundles)})
    return sorted(rows, key=lambda r: r["name"])


def stop_pooled(ray: Any) -> list[str]:
    """Remove every pooled gang (their actors end with their placement groups); their names."""
    from ray.util import get_placement_group, remove_placement_group

    stopped = []
    for row in list_pooled(ray):
        try:
            remove_placement_group(get_placement_group(row["name"]))
            stopped.append(row["name"])
        except Exception as exc:  # noqa: BLE001 - already gone
            log.debug("removing %s: %s", row["name"], exc)
    return stopped
