"""Per-tuning logs: a scoped object that writes one file and, when verbose, stdout.

No logging handler is ever installed or mutated: the library only uses
``logging.getLogger(__name__)`` loggers; a tuning's detailed log is a plain file opened for the
duration of that tuning and closed in ``close()``.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["TuningLog", "announce_once", "job_rank_fields", "job_rank_prefix", "record_fields"]

log = logging.getLogger("triton_dist.tune")

_announced: set[str] = set()

#: the longest a line of a tuning's log file waits in its buffer
FLUSH_S = 0.05


def _job_rank() -> tuple[int, int] | None:
    """(global rank, job size) in a torch.distributed job of more than one rank, else None."""
    dist = sys.modules.get("torch.distributed")  # never imported here for the question
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            size = int(dist.get_world_size())
            if size > 1:
                return int(dist.get_rank()), size
    except Exception:  # noqa: BLE001 - a torn-down group: no rank to name
        pass
    return None


def job_rank_prefix() -> str:
    """``[rank R/W] `` (global rank, job size) in a torch.distributed job of more than one rank,
    else ``""``: the lines of a rank tuning alone, and a hit's, name their rank (each rank of a
    64-rank job printed the same unattributed line; a tester, 2026-12-05)."""
    rank = _job_rank()
    return f"[rank {rank[0]}/{rank[1]}] " if rank is not None else ""


def record_fields(rank: int | None = None, world_size: int | None = None, function: str | None = None,
                  key: str | None = None) -> dict[str, Any]:
    """A record's ``extra``: what its text says in ``[rank R/N]`` and by name, as fields a JSON
    formatter reads (README "What it prints and logs"); ``None`` where it names none."""
    return {"rank": rank, "world_size": world_size, "function": function, "key": key}


def job_rank_fields(function: str | None = None, key: str | None = None) -> dict[str, Any]:
    """:func:`record_fields` with the job's global rank (as :func:`job_rank_prefix` names it)."""
    rank = _job_rank()
    if rank is None:
        return record_fields(function=function, key=key)
    return record_fields(rank[0], rank[1], function, key)


def announce_once(path: Path, message: str, *, level: int = logging.WARNING,
                  fields: dict[str, Any] | None = None) -> None:
    """Say ``message`` (by default a WARNING of the ``triton_dist`` logger: visible without any
    logging set-up) the first time this process writes ``path``; ``fields``: the record's ``extra``."""
    if str(path) not in _announced:
        _announced.add(str(path))
        logging.getLogger("triton_dist").log(level, "%s", message, extra=fields)


class TuningLog:
    """Lines of one tuning: to ``path`` (if given and writable), to stdout if ``verbose``."""

    def __init__(self, path: Path | None, verbose: bool, prefix: str = "", *,
                 defer: bool = False, prepare: Callable[[], None] | None = None, label: str = "",
                 fields: dict[str, Any] | None = None) -> None:
        """``defer``: the file is opened by :meth:`open` (a tuning calls it while the host waits
        for the device, ``_measure.spare``) or at :meth:`close`; lines said before are written
        then, with the times they were said. ``prepare`` runs before the file is opened (the
        directory's checks); an ``OSError`` of either means no file. ``label`` (the function) goes
        before the lines on stdout and in the records that do not name it: the file is the
        entry's, but two functions tuning at once in threads printed ``config 0 ...`` and ``best
        config for key (5,) ...`` lines that no one could tell apart (a tester, 2026-12-05).
        ``fields``: the records' ``extra`` (:func:`record_fields`: rank, function, key)."""
        self.verbose = verbose
        self.fields = fields if fields is not None else record_fields(function=label or None)
        self.started = time.monotonic()
        self.prefix = prefix
        self.label = label
        self.path = path
        self._file: IO[str] | None = None
        self._wrote = False
        self._flushed = 0.0
        self.lines: list[str] = []
        self._prepare = prepare
        self._held: list[str] | None = [] if defer and path is not None else None
        if path is not None and not defer:
            self.open()

    def open(self) -> None:
        """Open the file (once; a deferred log's lines so far go in first)."""
        held, self._held = self._held, None
        path = self.path
        if path is None or self._file is not None:
            return
        try:
            if self._prepare is not None:
                self._prepare()
        except OSError as exc:  # the directory cannot be ours: no log (the entry's write says why)
            log.debug("no tuning log %s: %s", path, exc)
            self.path = None
            return
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # O_NOFOLLOW: a log name planted as a symlink must not make us append elsewhere;
            # O_NONBLOCK and a regular file only: a FIFO there blocked the tuning forever in this
            # open (a tester, 2026-12-04), as docs/reliability.md R3 says a bad file must not
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | getattr(os, "O_NONBLOCK", 0), 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(f"{path} is not a regular file")
            self._file = open(fd, "a", encoding="utf-8")
        except OSError as exc:
            log.warning("cannot write the tuning log %s: %s", path, exc)
            self.path = None
            return
        if held:
            self._write("".join(held))

    def info(self, message: str, *args: object, level: int = logging.DEBUG) -> None:
        """A line of the tuning: a ``level`` record of ``triton_dist.tune`` (DEBUG; a tuning's
        start and result INFO: a long tuning said nothing at INFO without ``autotune_verbose``,
        a tester, 2026-12-05), a line of the file, and of stdout when verbose."""
        text = message % args if args else message
        line = f"{self.prefix}{text}"
        self.lines.append(line)
        shown = f"{self.prefix}{self.label}: {text}" if self.label and self.label not in text else line
        log.log(level, "%s", shown, extra=self.fields)
        if self._file is not None:
            self._write(f"{_dt.datetime.now().isoformat(timespec='milliseconds')} {line}\n")
        elif self._held is not None:
            self._held.append(f"{_dt.datetime.now().isoformat(timespec='milliseconds')} {line}\n")
        if self.verbose:
            sys.stdout.write(f"[triton_dist] {shown}\n")
            sys.stdout.flush()

    def _write(self, text: str) -> None:
        file = self._file
        if file is None:  # given up on (a full disk)
            return
        try:
            file.write(text)
            # flushed at most every FLUSH_S (and at close): a write per line was ~20 system
            # calls of a first call (P2, issue 16); a process killed mid-tuning loses at most
            # the last FLUSH_S of lines, and the first lines (what is being tuned) never once the
            # file is open (a deferred log: at the first wait for the device)
            if not self._wrote or time.monotonic() - self._flushed >= FLUSH_S:
                file.flush()
                self._flushed = time.monotonic()
            self._wrote = True
        except OSError as exc:
            self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        """The log is best effort: a full disk must not fail the tuning (issue 17). Logged at
        DEBUG only: the entry's write fails on the same disk and its warning says so once."""
        log.debug("stopped writing the tuning log %s: %s", self.path, exc)
        self.close()

    def close(self) -> None:
        if self._held is not None:  # deferred and never opened: the lines said so far go in now
            self.open()
        if self._file is None:
            return
        file, self._file = self._file, None
        try:
            file.close()
        except OSError as exc:  # the buffered tail could not be written (ENOSPC, EDQUOT)
            log.debug("could not finish the tuning log %s: %s", self.path, exc)
        if not self._wrote and self.path is not None:
            # created by this tuning and nothing got in: leave no empty .log behind
            try:
                if self.path.stat().st_size == 0:
                    self.path.unlink()
            except OSError:
                pass

    def __enter__(self) -> TuningLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
