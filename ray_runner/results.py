"""The results stream of a campaign: one JSON line per finished case, appended as cases finish.

``<report_dir>/<name>.results.jsonl`` is what the driver keeps of a case once it is done: the
report is built from it (:mod:`ray_runner.report`), and a campaign run again after its driver was
killed resumes from it. Each run of the campaign appends a header line (``{"run": n, "digest":
..}``) and then one row per finished case (tuned, cached, merged or failed), written and flushed
right after the case's entry is in the cache: a row therefore always names an entry that exists,
and a driver killed at any instant loses no finished case.

Resuming: a case whose last row is ``tuned``/``cached``/``merged`` (and whose entry file is still
there, readable, and made by the target's current source for every config of its current
space, as the hit rule asks: ``serves``; a target the driver cannot import is not taken on trust:
its cases go to the actors, which skip what a job would hit) is not dispatched again, provided
the stream was written for the same campaign (its targets, environment, device, correctness check,
cache root and the code of its modules: the ``digest``). A different digest,
or ``--force``, starts a new stream (the old one is kept as ``.results.prev.jsonl``; the log names
the parts that differ); the cases then go through the usual identification, which still skips
what the cache holds. One driver at a time appends (``.results.jsonl.lock``, :class:`RunLock`). Deciding what
is done reads the file once: 5,000 rows take ~0.1 s.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from triton_dist._store import files as _cache

from .run_lock import RunLock
from .spec import Campaign, CaseSpec, case_text

__all__ = ["UNCHECKED", "ResultStream", "RunLock", "campaign_digest", "case_id", "digest_parts", "case_row",
           "config_text", "entry_paths", "entry_paths_by_kind", "read_rows", "row_key", "stream_path"]

log = logging.getLogger(__name__)

#: statuses of a finished case that a re-run does not redo (failed cases are tried again)
DONE = ("tuned", "cached", "merged")
#: an error message is cut to this many characters in a row (tracebacks live in the driver's log)
MAX_ERROR_CHARS = 2000


def stream_path(campaign: Campaign, report_dir: str | None = None) -> Path:
    """``<report_dir>/<name>.results.jsonl`` (``report_dir``: ``--report-dir``, else the campaign's)."""
    return Path(report_dir or campaign.report_dir).expanduser().absolute() / f"{campaign.name}.results.jsonl"


def case_id(spec: CaseSpec) -> str:
    """A case's identity across runs of a campaign file (its position may change when edited)."""
    text = json.dumps([spec.target.function, spec.target.args, spec.world_size, case_text(spec.case)])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def row_key(cid: str, hardware: str | None) -> str:
    """What a row stands for: a case, on one accelerator kind when the campaign has several
    (:mod:`ray_runner.fleet`): a campaign over two kinds is done with a case once both have it."""
    return f"{cid}@{hardware}" if hardware else cid


def _key(row: dict[str, Any]) -> str:
    return row_key(row["case_id"], row.get("hardware"))


def digest_parts(campaign: Campaign, root: Path) -> dict[str, str]:
    """What a stream's rows are valid for, part by part (a new stream names the parts that
    changed): the campaign's targets, its settings (environment, device, resource, correctness
    check), the cache root and the code (:func:`ray_runner.pool.code_digest`) of the target modules."""
    from .pool import code_digest

    def h(value: Any) -> str:
        return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:12]

    return {"targets": h([(t.function, t.args, t.world_size) for t in campaign.targets]),
            "settings": h([sorted(campaign.env), campaign.device, campaign.ray_resource, campaign.check_correctness]),
            "cache root": str(Path(root).resolve()),
            "code": code_digest(path.split(":")[0] for t in campaign.targets for path in (t.function, t.args))}


def campaign_digest(campaign: Campaign, root: Path, parts: dict[str, str] | None = None) -> str:
    """One digest of :func:`digest_parts` (``parts``, when computed already): a stream written
    under another is not resumed."""
    parts = digest_parts(campaign, root) if parts is None else parts
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _value_text(value: Any) -> str:
    if isinstance(value, dict) and len(value) == 1:
        (tag, inner), = value.items()
        if tag == "triton.Config" and isinstance(inner, dict):
            kwargs = inner.get("kwargs", {})
            pairs = kwargs.get("dict", []) if isinstance(kwargs, dict) else []
            parts = [f"{k}={_value_text(v)}" for k, v in pairs]
            parts += [f"{name}={inner[name]}" for name in ("num_warps", "num_stages") if name in inner]
            return ", ".join(parts)
        if tag == "tuple" and isinstance(inner, list):
            return "(" + ", ".join(_value_text(v) for v in inner) + ")"
        if tag == "dict" and isinstance(inner, list):
            return "{" + ", ".join(f"{_value_text(k)}: {_value_text(v)}" for k, v in inner) + "}"
        if tag in ("set", "frozenset") and isinstance(inner, list):
            items = ", ".join(_value_text(v) for v in inner)
            return ("{" + items + "}" if tag == "set" else f"frozenset({{{items}}})") if inner else f"{tag}()"
        if tag == "float":
            return str(inner)
        if tag == "repr":
            return str(inner).split(":", 1)[-1]
    if isinstance(value, list):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def config_text(config: Any) -> str:
    """A short readable form of an encoded config (``BLOCK=256, num_warps=4``)."""
    if not isinstance(config, dict):
        return str(config)
    if len(config) == 1:
        (name, value), = config.items()
        if isinstance(value, dict) and "triton.Config" in value:
            return _value_text(value)
    return ", ".join(f"{k}={_value_text(v)}" for k, v in config.items())


def case_row(run: Any) -> dict[str, Any]:
    """What the report keeps of a finished case (the entry itself stays in the cache)."""
    spec, entry, ident = run.spec, run.entry or {}, run.identity or {}
    best = entry.get("best") or {}
    best_ms, default_ms = best.get("time_ms"), entry.get("default_time_ms")
    return {
        "number": spec.number,
        "case_id": case_id(spec),
        "target": spec.target_index,
        "function": spec.target.function,
        "world_size": spec.world_size,
        "case": spec.case,
        "status": run.status,
        "hardware": getattr(run, "hardware", None),
        "attempts": run.attempts,
        "retries": max(0, run.attempts - 1),
        "errors": [e[:MAX_ERROR_CHARS] for e in run.errors],
        "known_failures": {str(k): v for k, v in run.known_failures.items()},
        "key": entry.get("key") or ident.get("key"),
        "entry_id": entry.get("id") or ident.get("id"),
        "digest": (entry.get("hardware") or {}).get("digest") or ident.get("digest"),
        "path": run.path,
        "best_index": best.get("index"),
        "best_config": config_text(best.get("config")) if best else None,
        "best_ms": best_ms,
        "default_ms": default_ms,
        "speedup": default_ms / best_ms if best_ms and default_ms else None,
        "seconds": round(run.seconds, 4) if run.seconds is not None else None,
        "busy_seconds": round(run.busy_seconds, 4),
        "overhead_s": round(run.overhead_s, 5) if run.overhead_s is not None else None,
        "gang": run.gang,
        "ranks": list(run.ranks),
        "host": run.host,
        "nodes": list(run.nodes),
        "merged_into": getattr(run, "merged_into", None),
    }


#: how a record starts (:meth:`ResultStream.__init__`'s header, :func:`case_row`'s row): where a
#: record glued to a torn fragment begins
_STARTS = (b'{"run":', b'{"number":')


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """The stream's records; a torn last line (the driver killed mid-write) and any line that is not
    a JSON object in UTF-8 are skipped. A record that an older writer appended right after a torn
    fragment, on its line, is read from where it starts (it was lost with the fragment: a run's
    header, so the run after it took the same run number; a tester)."""
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is skipped like a torn one
        for line in f:
            record = _record(line)
            if record is None:  # the first place after the fragment where a whole record parses
                # (the last such place may be a dict nested in a glued record's case: a reviewer)
                starts = sorted({i for start in _STARTS for i in _finds(line, start) if i > 0})
                record = next((r for i in starts if (r := _record(line[i:])) is not None), None)
            if isinstance(record, dict):
                yield record


def _finds(line: bytes, needle: bytes) -> Iterator[int]:
    at = line.find(needle)
    while at >= 0:
        yield at
        at = line.find(needle, at + 1)


def _record(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:  # UnicodeDecodeError too
        return None


def read_rows(path: Path, run: int | None = None) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(the last row of each case by :func:`row_key` (its ``case_id``, and its kind in a campaign
    over several), the header of each run); rows of runs up to ``run`` (None: every run)."""
    rows: dict[str, dict[str, Any]] = {}
    headers: list[dict[str, Any]] = []
    if not path.exists():
        return rows, headers
    for record in _lines(path):
        if "digest" in record and "case_id" not in record:
            headers.append(record)
        elif "case_id" in record and (run is None or record.get("run", 0) <= run):
            rows[_key(record)] = record
    return rows, headers


class ResultStream:
    """Appends one row per finished case to the campaign's stream (flushed per row)."""

    def __init__(self, path: Path, digest: str, *, resume: bool,
                 serves: Callable[[dict[str, Any], dict[str, Any]], str | None] | None = None,
                 parts: dict[str, str] | None = None, run_lock: RunLock | None = None) -> None:
        """``serves(row, entry)``: why an earlier run's entry no longer serves its case (its
        target's source or space changed since), or None; such a case is run again. ``parts``:
        the digest's parts (:func:`digest_parts`), recorded so that a later run names what changed.
        ``run_lock``: the stream's :class:`RunLock`, taken already (released with the stream).

        One run at a time appends to a stream: a second driver of the same campaign (and report
        folder) is an :class:`~ray_runner.errors.InfrastructureError` naming the first (two drivers
        appended to one stream and tuned the same cases twice: a tester, 2026-12-05)."""
        self.path = path
        self.digest = digest
        #: row_key -> status of the cases an earlier run finished (what this run skips)
        self.done: dict[str, str] = {}
        #: hardware digests of the entries of those cases, by accelerator kind (None: no kinds)
        self.hardware: dict[str | None, set[str]] = collections.defaultdict(set)
        #: row_keys of this run's rows (see :meth:`write_missing`)
        self.written: set[str] = set()
        self.run = 1
        #: final statuses of this run's cases and of the resumed ones
        self.counts: collections.Counter[str] = collections.Counter()
        #: the lanes of a campaign over several kinds (ray_runner.fleet) write from their threads
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._run_lock = run_lock if run_lock is not None else RunLock(path)
        try:
            self._open(path, digest, resume, serves, parts)
        except BaseException:
            self._run_lock.release()
            raise

    def _open(self, path: Path, digest: str, resume: bool,
              serves: Callable[[dict[str, Any], dict[str, Any]], str | None] | None,
              parts: dict[str, str] | None) -> None:
        rows, headers = read_rows(path)
        if headers and headers[-1].get("digest") == digest and resume:
            self.run = int(headers[-1].get("run", 0)) + 1
            for cid, row in rows.items():
                merged = row.get("status") == "merged"
                if row.get("status") in DONE and (not _unchecked(row, serves) if merged else _exists(row, serves)):
                    self.done[cid] = row["status"]
                    self.counts[row["status"]] += 1
                    if row.get("digest"):
                        self.hardware[row.get("hardware")].add(row["digest"])
            del rows
        elif path.exists():
            why = "--force" if not resume else _changed(headers[-1] if headers else {}, parts)
            os.replace(path, path.with_name(path.name.replace(".results.jsonl", ".results.prev.jsonl")))
            log.info("results file %s: %s; starting a new one (the old one is kept as .results.prev.jsonl)",
                     path, why)
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")
        if _torn(path):  # the last line is a fragment (a driver killed mid-append): start a line of our own
            self._file.write("\n")
        self._write({"run": self.run, "digest": digest, **({"parts": parts} if parts else {})})

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        self._file.flush()

    def write(self, run: Any) -> dict[str, Any]:
        """Append ``run``'s row; the run then forgets its entry (the row and the file have it)."""
        row = case_row(run)
        row["run"] = self.run
        with self._lock:
            self.counts[row["status"]] += 1
            try:
                self._write(row)
                self.written.add(_key(row))
            except (OSError, ValueError) as exc:  # the cache is what matters; say so once, go on in memory
                log.warning("cannot append to the results file %s (%s): the report will be incomplete",
                            self.path, exc)
                self._close()
        run.entry, run.identity = None, None
        return row

    def write_missing(self, runs: Iterable[Any]) -> None:
        """Rows for finished cases that have none: an interrupt (SIGTERM is raised in the main
        thread wherever it is) can land between a case's end and its row."""
        for run in runs:
            if run.done and row_key(case_id(run.spec), getattr(run, "hardware", None)) not in self.written:
                self.write(run)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        try:
            if self._file is not None:
                try:
                    self._file.close()
                finally:
                    self._file = None
        finally:
            self._run_lock.release()


def _changed(header: dict[str, Any], parts: dict[str, str] | None) -> str:
    """What differs between the stream's last run and this one, as the new stream's reason."""
    before = header.get("parts")
    if not isinstance(before, dict) or not parts:
        return "written for another campaign, cache root or code"
    changed = [name for name in parts if before.get(name) != parts[name]]
    if not changed:
        return "written for another campaign, cache root or code"
    if "cache root" in changed:
        changed[changed.index("cache root")] = f"cache root (was {before.get('cache root')})"
    return "its " + ", ".join(changed) + (" differ" if len(changed) > 1 else " differs") + " from the last run's"


def _torn(path: Path) -> bool:
    """The file does not end with a newline: its last line was cut short."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


#: what ``serves`` answers for a row whose target the driver cannot import to check (its actors
#: decide: the case is dispatched again, and skipped there as cached if a job would hit its entry)
UNCHECKED = "its target cannot be imported here to check it"


def _unchecked(row: dict[str, Any], serves: Callable[[dict[str, Any], dict[str, Any]], str | None] | None) -> bool:
    """Whether ``serves`` cannot check ``row``'s target here (asked of a merged row, whose entry is
    its owner's: with an empty entry, a checkable target answers something else)."""
    return serves is not None and serves(row, {}) == UNCHECKED


def _exists(row: dict[str, Any], serves: Callable[[dict[str, Any], dict[str, Any]], str | None] | None) -> bool:
    """The entry file is there and the reader would take it (an inline call's rule: the driver
    writes entries with the fsync in the background, so a machine crash may leave an empty file
    behind a row; anything may have damaged it since), and it still serves the case (``serves``).
    A case whose entry is not is tuned again."""
    path = row.get("path")
    if not isinstance(path, str):
        return False
    entry, why = _cache.load_json(Path(path))
    if entry is None:
        if why != "missing":
            log.warning("the entry %s of a case an earlier run finished is unusable (%s): the case is tuned "
                        "again", path, why)
        return False
    why = serves(row, entry) if serves is not None else None
    if why == UNCHECKED:
        return False  # said once per target (resume.entry_serves)
    if why:
        log.warning("the entry %s of a case an earlier run finished no longer serves %s (%s): the case is "
                    "tuned again", path, row.get("function"), why)
        return False
    return True


def entry_paths(path: Path, campaign: Campaign, kinds: Iterable[str | None] = (None,)) -> list[str]:
    """The cache files of the campaign's cases that have one (tuned or cached, this run or an
    earlier one), in case order (each kind's, for a campaign over several): what ``--seed`` copies."""
    return [p for paths in entry_paths_by_kind(path, campaign, kinds).values() for p in paths]


def entry_paths_by_kind(path: Path, campaign: Campaign,
                        kinds: Iterable[str | None] = (None,)) -> dict[str | None, list[str]]:
    """:func:`entry_paths` by accelerator kind (``kinds``: the campaign's; None: no kinds)."""
    rows, _ = read_rows(path)
    kinds = list(kinds)
    out: dict[str | None, list[str]] = {kind: [] for kind in kinds}
    for spec in campaign.cases():
        cid = case_id(spec)
        for kind in kinds:
            row = rows.pop(row_key(cid, kind), None)
            if row is not None and row.get("status") in ("tuned", "cached") and row.get("path"):
                out[kind].append(row["path"])
    return out
