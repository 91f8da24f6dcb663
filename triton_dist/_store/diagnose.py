"""Why a (function, key) misses the disk cache: the component that differs from the nearest entry.

Used by ``python -m triton_dist.cache why``, by the strict cache-only error, and by
``python -m ray_runner preflight`` (through :func:`explain_miss` or :func:`diagnose`).

An entry is found by ``<root>/<function_name>/<entry_id>.json`` (or, without that file, in the
function's packs: ``_store.packs``) where the id hashes (source hash, hardware digest, key). A
miss therefore means: no entry there (something in the triple differs from every entry there
is), or the entry is unusable, or it is usable but its best config is no longer in
``config_space`` / the space has configs the entry never measured, or (with
``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``) it was tuned with other software versions.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import heapq
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from triton_dist._store import files as _cache
from triton_dist._store.config_diff import nearest_config as _nearest_config
from triton_dist._store.config_diff import short as _short
from triton_dist._store.decide import CallId, config_key, decide, entry_world, versions_differ
from triton_dist._store.keytext import stable_key_text
from triton_dist._store.packs import canonical, load_entry
from triton_dist._store.reads import reads_changed, reads_of
from triton_dist._store.rules import note as rules_note
from triton_dist._store.scan import folder_outside, iter_function_dir, key_entries

__all__ = ["Diagnosis", "Difference", "diagnose", "explain_here", "explain_miss"]

#: how far an entry is from the caller when this component differs: a different key matters
#: most (another business case), then another world, other hardware, another source, the space
_WEIGHTS = {"entry": 64, "key": 32, "world": 16, "hardware": 8, "source": 4, "config_space": 2, "versions": 1}


@dataclasses.dataclass
class Difference:
    """One component in which the nearest entry differs from what the caller has now."""

    component: str
    """``key``, ``source``, ``hardware``, ``versions``, ``config_space`` or ``entry``."""
    now: str | None
    """The caller's value."""
    entry: str | None
    """The entry's value."""
    detail: str
    blocking: bool = True
    """False: it differs, but the entry would still be used (e.g. versions without the check)."""


@dataclasses.dataclass
class Diagnosis:
    function: str
    key: str
    verdict: str
    """``hit``, ``miss``, or ``unknown`` (no source hash given and an entry matches the rest)."""
    reason: str
    expected_path: str | None = None
    nearest_path: str | None = None
    differences: list[Difference] = dataclasses.field(default_factory=list)
    others: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """The next-nearest entries: path and the components in which they differ."""
    skipped: list[dict[str, str]] = dataclasses.field(default_factory=list)
    """Unusable files of the function's directory, with why."""
    scanned: int = 0

    @property
    def hit(self) -> bool:
        return self.verdict == "hit"

    def components(self) -> list[str]:
        return [d.component for d in self.differences if d.blocking]

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["components"] = self.components()
        return out


def _written_now(text: str) -> str | None:
    """How this version writes the key an entry's key text holds (literals only: never runs
    code; a text of at most 10,000 characters), or None when it cannot tell."""
    if len(text) > 10_000:
        return None
    try:
        return stable_key_text(ast.literal_eval(text))
    except Exception:  # noqa: BLE001 - not a literal, or not a key this version writes: cannot tell
        return None


def _rules_once(entry: dict[str, Any], diffs: Sequence[Difference]) -> str:
    """``": <why other rules may explain it>"``, or ``" (see above)"`` where an earlier
    component of the same entry said it already."""
    other = rules_note(entry)
    return " (see above)" if any(other in d.detail for d in diffs) else ": " + other


def _compare(entry: dict[str, Any], key_text: str, source_hash: str | None, body: str | None,
             hardware_digest: str | None, hardware: dict[str, Any] | None,
             versions: dict[str, str] | None, space: Sequence[Any] | None, version_check: bool,
             cache_only: bool, world: int | None, reads: list[str] | None = None) -> list[Difference]:
    diffs: list[Difference] = []
    if entry["key"] != key_text:
        detail = f"the entry is for key {_short(entry['key'])}"
        if rules_note(entry) and _written_now(entry["key"]) == key_text:  # 2.0 written as 2 since 2026-12-04
            detail += f", which this triton_dist writes as {_short(key_text)}: " + rules_note(entry)
        elif _equal_in_python(entry["key"], key_text):
            detail += (", a key equal to this call's in Python but of other types (True and 1, an IntEnum "
                       "and its int, a namedtuple and a tuple name different entries): key_fn returns another "
                       "type than when the entry was tuned; make it return one type (int(...) or bool(...) "
                       "everywhere), or seed the cache again")
        diffs.append(Difference("key", key_text, entry["key"], detail))
    if world is not None and entry_world(entry) != world:
        diffs.append(Difference("world", str(world), str(entry_world(entry)),
                                f"measured over {entry_world(entry)} rank(s); the caller tunes over {world}"))
    if source_hash is not None and entry["source_hash"] != source_hash:
        detail = (f"the function's source changed since the entry was tuned (source hash "
                  f"{entry['source_hash']} then, {source_hash} now)")
        constants = reads_changed(entry.get("reads"), reads)
        if constants:  # its own source may be as it was: name what did change (2026-12-05)
            detail = (f"a module constant the function reads changed since the entry was tuned ({constants}), "
                      f"which its source hash counts (source hash {entry['source_hash']} then, {source_hash} now)")
        if body is not None and entry.get("body_hash") == body:
            detail += "; only its decorators differ (e.g. the config space), so its timings can be reused"
        elif rules_note(entry):  # an upgrade changes the hash of unchanged code (a tester, 2026-12-05)
            detail += ", or this triton_dist computes it otherwise" + _rules_once(entry, diffs)
        diffs.append(Difference("source", source_hash, entry["source_hash"], detail))
    entry_digest = entry["hardware"].get("digest")
    if hardware_digest is not None and entry_digest != hardware_digest:
        fields = ""
        if hardware:
            # the fields of either side: an entry tuned under TRITON_DIST_HARDWARE_OVERRIDE, read
            # without it, differed in a field this process lacks, and no field was named (a tester)
            names = sorted(set(hardware) | set(entry["hardware"]))
            changed = [f"{k}: {entry['hardware'].get(k)!r} -> {hardware.get(k)!r}" for k in names
                       if k != "digest" and entry["hardware"].get(k) != hardware.get(k)]
            fields = f" ({'; '.join(changed)})" if changed else ""
            fields += _missing_device(entry["hardware"].get("device"), hardware.get("device"))
        diffs.append(Difference("hardware", hardware_digest, str(entry_digest),
                                f"tuned on other hardware: digest {entry_digest} then, {hardware_digest} now{fields}"))
    if versions is not None:
        changed = versions_differ(entry, versions)
        if changed:
            note = "" if version_check else " (a warning only; TRITON_DIST_AUTOTUNE_VERSION_CHECK=1 makes it a miss)"
            diffs.append(Difference("versions", json.dumps(versions, sort_keys=True),
                                    json.dumps(entry.get("versions"), sort_keys=True),
                                    f"tuned with other software versions: {'; '.join(changed)}{note}",
                                    blocking=version_check))
    if space is not None:
        keys = [config_key(c) for c in space]
        best = entry["best"].get("config")
        seen = {config_key(c.get("config")) for c in entry["candidates"] if isinstance(c, dict)}
        new = [i for i, k in enumerate(keys) if k not in seen]
        if config_key(best) not in keys:
            other = ", or this triton_dist writes it otherwise" + _rules_once(entry, diffs) if rules_note(entry) else ""
            diffs.append(Difference("config_space", f"{len(keys)} configs", _short(best),
                                    f"the entry's best config {_short(best)} is no longer in config_space"
                                    f"{_nearest_config(best, space)}{other}"))
        elif new:
            note = ("; in cache-only mode the entry's best is used and they stay untried" if cache_only
                    else "; they would be measured, with the entry's best, reusing the other timings "
                         "when the rules of docs/cache.md allow; a cache-only job (TRITON_DIST_AUTOTUNE_CACHE_ONLY"
                         "=1 or strict) uses the entry's best instead, a hit there (set the variable as the job "
                         "does to ask about it)")
            diffs.append(Difference("config_space", f"{len(keys)} configs", f"{len(seen)} configs",
                                    f"config_space has {len(new)} config(s) the entry never measured "
                                    f"(indices {new[:10]}){note}", blocking=not cache_only))
    return diffs


def explain_miss(root: Path | str, function_name: str, key_text: str, source_hash: str | None = None,
                 hardware_digest: str | None = None, versions: dict[str, str] | None = None,
                 config_space_encoded: Sequence[Any] | None = None, *, body_hash: str | None = None,
                 hardware: dict[str, Any] | None = None, version_check: bool = False,
                 cache_only: bool = False, world: int | None = None, reads: list[str] | None = None) -> Diagnosis:
    """Would ``(function_name, key_text)`` hit, and if not, which component differs?

    Any of source hash, hardware digest, versions, encoded config space and world may be None
    (unknown): that component is then not compared. When source, hardware, versions and space are
    known, the verdict is the hit rule's (``_decide.decide``); the scan explains a miss by the
    nearest entry. Reads JSON only; never executes anything. ``reads``: the module constants the
    function reads now (``_store.reads``), to name those that differ from an entry's.
    """
    root = Path(root)
    directory = root / _cache.safe_name(function_name)
    expected = None
    if source_hash is not None and hardware_digest is not None:
        expected = _cache.entry_path(root, function_name, _cache.entry_id(source_hash, hardware_digest, key_text))
    diag = Diagnosis(function_name, key_text, "miss", "", str(expected) if expected else None)
    if folder_outside(directory, root):  # a link out of the root: nothing in it is read
        diag.reason = (f"the function folder {directory} resolves outside the cache root {root} (a symbolic "
                       "link?): nothing in it is read or used; `verify` reports it")
        diag.differences = [Difference("entry", None, None, diag.reason)]
        return diag
    skipped: list[tuple[Path, str]] = []
    found = {"usable": 0, "expected": False}

    def usable(files: Iterable[tuple[Path, dict[str, Any] | None, str]]) -> Iterator[_Scored]:
        for path, entry, why in files:
            if entry is None:
                skipped.append((path, why))
                continue
            found["usable"] += 1
            found["expected"] = found["expected"] or (expected is not None and canonical(path) == expected)
            diffs = _compare(entry, key_text, source_hash, body_hash, hardware_digest, hardware, versions,
                             config_space_encoded, version_check, cache_only, world, reads)
            yield sum(_WEIGHTS[d.component] for d in diffs if d.blocking), path, entry, diffs

    # the nearest and the next 5 (``others``), kept while the files are read one at a time: an
    # entry of this key is always nearer than one of another (the key's weight exceeds the rest's
    # sum), so where the key has entries only they are read (the key log), else every file
    # (a tester's `why` on a function of 10,000 entries held them all, twice: 5 s, 300 MB)
    same = key_entries(directory, root, key_text)
    files = ([(path, entry, "") for path, entry in same] + _unusable_expected(root, function_name, expected)
             if same else iter_function_dir(directory, root))
    # among equals the file the tuner looks for, then the newest, then the order read
    scored = heapq.nsmallest(6, usable(files), key=lambda t: (t[0], len(t[3]), canonical(t[1]) != expected,
                                                              _newest_first(str(t[2].get("created", "")))))
    diag.skipped = [{"path": str(p), "why": why} for p, why in skipped]
    diag.scanned = found["usable"] + len(skipped)
    broken = next((why for p, why in skipped if expected is not None and canonical(p) == expected), None)

    if not scored:
        if broken is not None:
            diag.reason = f"the entry {expected} is unusable: {broken}"
            diag.differences = [Difference("entry", None, None, diag.reason)]
        elif not root.is_dir():
            diag.reason = f"no cache entries for function {function_name!r} under {root}" + _no_root(root)
        elif not directory.is_dir():
            others = sorted(p.name for p in root.iterdir() if p.is_dir())
            close = difflib.get_close_matches(_cache.safe_name(function_name), others, n=3)
            diag.reason = (f"no cache entries for function {function_name!r} under {root}"
                           + (f" (similar names there: {', '.join(close)})" if close else ""))
        else:
            diag.reason = f"{directory} holds no usable entry ({len(skipped)} unusable file(s))"
        return diag

    _, path, nearest, diffs = scored[0]
    diag.nearest_path, diag.differences = str(path), diffs
    diag.others = [{"path": str(p), "components": [d.component for d in ds if d.blocking]}
                   for _, p, _, ds in scored[1:6]]
    blocking = [d for d in diffs if d.blocking]
    notes = "; ".join(d.detail for d in diffs if not d.blocking)
    if broken is not None:
        diag.differences.insert(0, Difference("entry", None, None, f"the entry {expected} is unusable: {broken}"))
        diag.reason = f"the entry {expected} is unusable ({broken}); the nearest usable one is {path}"
    elif not blocking and source_hash is None:
        diag.verdict = "unknown"
        source = str(nearest["source_hash"])
        diag.reason = (f"{path} matches the key and hardware; it hits if the function's source hash "
                       f"is still {source} (give module:attr to check the source and config space)")
    elif not blocking and expected is not None and canonical(path) != expected:
        detail = (f"a matching entry sits at {path}, but the tuner looks for {expected.name} "
                  "(renamed or copied by hand?); `verify` reports it")
        diag.differences.insert(0, Difference("entry", str(expected), str(path), detail))
        diag.reason = detail
    elif not blocking:
        diag.verdict = "hit"
        diag.reason = f"would hit {path}" + (f" ({notes})" if notes else "")
    else:
        diag.reason = (f"the nearest entry {path} differs in {', '.join(d.component for d in blocking)}: "
                       + "; ".join(d.detail for d in blocking))
    if expected is not None and versions is not None and config_space_encoded is not None and found["expected"]:
        call = CallId(function_name, key_text, str(source_hash), str(hardware_digest), versions,
                      list(config_space_encoded), world)
        _apply_rule(diag, decide(call, root, version_check=version_check, cache_only=cache_only))
    return diag


_Scored = tuple[int, Path, dict[str, Any], list[Difference]]


def _newest_first(created: str) -> tuple[int, ...]:
    """A sort key that puts the later ``created`` text first (its characters negated; the end
    marked, so that a text sorts after the longer ones it begins)."""
    return (*(-ord(c) for c in created), 1)


def _unusable_expected(root: Path, function_name: str, expected: Path | None) -> list[tuple[Path, None, str]]:
    """The file the tuner looks for, where it is there but unusable (the key log names usable
    entries only)."""
    if expected is None:
        return []
    entry, where, why = load_entry(root, function_name, expected.stem)
    return [(where, None, why or "unusable")] if entry is None and where is not None else []


def _apply_rule(diag: Diagnosis, verdict: Any) -> None:
    """The verdict is the hit rule's; the scan above only explains it (they agree unless the
    rule checks something the comparison does not)."""
    if verdict.hit and diag.verdict != "hit":
        diag.verdict, diag.reason = "hit", f"would hit {verdict.path}"
    elif not verdict.hit and diag.verdict == "hit":
        diag.verdict, diag.reason = "miss", f"{verdict.path}: {verdict.why}"


def explain_here(root: Path | str, function_name: str, key_text: str, world: int | None,
                 target: Any = None, *, digest: str | None = None, backend: Any = None,
                 cache_only: bool | None = None) -> Diagnosis:
    """:func:`explain_miss` with this process's hardware, software versions and settings.

    With ``target`` (a ``TuneTarget``) every component is compared (its call as
    ``_decide.identify_text`` gathers it); without, only what the name tells (source and space
    unknown). ``digest``: compare with another machine's hardware digest instead of this one's.
    ``cache_only``: None takes ``TRITON_DIST_AUTOTUNE_CACHE_ONLY``."""
    from triton_dist._backends import get_backend
    from triton_dist._store.decide import identify_text
    from triton_dist._store.fingerprint import body_hash, hardware_info, software_versions
    from triton_dist.settings import get_settings

    settings = get_settings()
    backend = backend if backend is not None else get_backend()
    hw = hardware_info(backend)
    common: dict[str, Any] = dict(
        hardware=None if digest else hw, version_check=settings.version_check, world=world,
        cache_only=settings.cache_only != "off" if cache_only is None else cache_only)
    if target is None:
        return explain_miss(root, function_name, key_text, None, digest or hw["digest"],
                            software_versions(backend), None, **common)
    call = identify_text(target, key_text, world, backend)
    return explain_miss(root, call.function, call.key, call.source_hash, digest or call.digest, call.versions,
                        call.space, body_hash=body_hash(target.fn), reads=reads_of(target.fn), **common)


def diagnose(tuner: Any, key: Any, root: Path | str | None = None, world: int | None = 1) -> Diagnosis:
    """:func:`explain_miss` for an ``AutoTuner`` and a key (the key object, or its repr text),
    with this process's hardware, software versions and settings, for a call over ``world`` ranks
    (None: any)."""
    from triton_dist.settings import get_settings

    key_text = key if isinstance(key, str) else _cache.key_repr(key) or repr(key)
    root = root if root is not None else get_settings().autotune_dir
    return explain_here(root, tuner.target.name, key_text, world, tuner.target)


def _no_root(root: Path) -> str:
    """Why a root holds nothing when it does not exist: a typo in TRITON_DIST_AUTOTUNE_DIR (or
    ``--dir``) read as "no entries for this function", as after a seeding of other functions, with
    the seeded root beside it unnamed (a tester). A root that is there but no folder (a file) is
    said to be so, as the other cache commands say it (it was "does not exist", a tester)."""
    if root.exists():
        return (f": {root} is not a directory (a file?); point TRITON_DIST_AUTOTUNE_DIR or --dir at the "
                "cache folder")
    link = _cache.dangling_link(root)
    if link is not None:
        return f": {link}"
    parent = root.parent
    try:
        siblings = sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []
    except OSError:
        siblings = []
    close = difflib.get_close_matches(root.name, siblings, n=3)
    return (f": {root} does not exist (a typo in TRITON_DIST_AUTOTUNE_DIR or --dir, or a cache never seeded "
            "there?" + (f"; similar names beside it: {', '.join(str(parent / c) for c in close)}" if close else "")
            + ")")


def _equal_in_python(entry_key: str, key_text: str) -> bool:
    """Whether two key texts hold values that Python takes as equal, ``(True, 'f32')`` and
    ``(1, 'f32')`` (literals only, at most 10,000 characters: never runs code)."""
    if entry_key == key_text or len(entry_key) > 10_000 or len(key_text) > 10_000:
        return False
    try:
        return bool(ast.literal_eval(entry_key) == ast.literal_eval(key_text))
    except Exception:  # noqa: BLE001 - not literals: cannot tell
        return False


def _missing_device(then: Any, now: Any) -> str:
    """Why this process has no device of the entry's kind, where it probed for one and fell back
    (an NPU node whose CANN set_env.sh was not sourced: torch_npu failed to import, and the miss
    said only "device: 'npu' -> 'cpu'"; a tester, 2026-12-04)."""
    from triton_dist._kinds import KINDS

    kind = KINDS.get(then) if isinstance(then, str) else None
    if kind is None or then == now:
        return ""
    try:
        reason = kind.probe()  # (the CPU's: None)
    except Exception as exc:  # noqa: BLE001 - a hint only
        reason = f"{type(exc).__name__}: {exc}"
    return f"; this process found no {then} device: {reason}" if reason else ""
