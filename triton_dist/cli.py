"""The cache command line: ``python -m triton_dist.cache`` and the ``triton-dist-cache`` script.

Exit status: 0 done (``why``: would hit), 1 a negative answer (``verify`` found problems,
``why`` found a miss, an entry was not found, an archive was refused) or a file-system error
(permissions, a full disk: one ``error:`` line) or a reader that stopped reading the output
(``ls | head``: no message), 2 bad usage or settings, 3 ``why`` could not tell (verdict
unknown: the function's code was not compared), 130 stopped by Ctrl-C and 143 by SIGTERM (one
``interrupted:`` line saying what was done: ``_cli.stopping``).
See docs/cache.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from triton_dist.errors import CacheAdminError, TritonDistError

__all__ = ["build_parser", "main"]

log = logging.getLogger(__name__)


def _common() -> argparse.ArgumentParser:
    # SUPPRESS: an option given before the command is not reset by the command's own default
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=Path, default=argparse.SUPPRESS,
                        help="cache root (default: $TRITON_DIST_AUTOTUNE_DIR, else ~/.triton_dist/autotune)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable output (one JSON document on stdout)")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log INFO messages to stderr")
    return common


def prog_name() -> str:
    """How this program was started: the ``triton-dist-cache`` script or ``python -m``."""
    started = os.path.basename(sys.argv[0] or "")
    return "triton-dist-cache" if started.startswith("triton-dist-cache") else "python -m triton_dist.cache"


def _command(sub: Any, name: str, common: argparse.ArgumentParser, summary: str,
             details: str = "") -> argparse.ArgumentParser:
    """A command whose own ``--help`` starts with what it does (the summary), not only its options."""
    return sub.add_parser(name, parents=[common], help=summary,
                          description=f"{summary}. {details}" if details else summary)


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog=prog_name(), parents=[common],
        description="Inspect and manage the triton_dist autotune disk cache.",
        epilog="Exit status: 0 done, 1 a negative answer (problems, a miss, refused), 2 bad usage, "
               "3 `why` could not tell (verdict unknown), 130 stopped by Ctrl-C, 143 by SIGTERM.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(sub, "ls", common, "list entries: function, key, best config, age, hardware")
    p.add_argument("functions", nargs="*", metavar="FUNCTION", help="only these function names")

    p = _command(sub, "show", common, "one entry with every candidate's time or failure")
    p.add_argument("entry", metavar="ENTRY", help="a path, an entry id, a unique id prefix, or FUNCTION/ID")

    p = _command(sub, "why", common, "why (FUNCTION, KEY) misses: what differs from the nearest entry",
                 "Exit status: 0 it would hit, 1 it would miss, 2 bad usage (a module:attr that names no "
                 "autotuned function: no such module or attribute, or not decorated; a FUNCTION that is a "
                 "path), 3 unknown (FUNCTION given by name and its "
                 "module not imported: its source and config space were not compared; give module:attr; "
                 "or its module's code failed at import here: run it in a rank's environment).")
    p.add_argument("function", metavar="FUNCTION",
                   help="the autotuned function: module:attr or module.attr (imported, to compare its "
                        "source and config space), or its name (then the module its entries record is "
                        "imported, unless --no-import)")
    p.add_argument("key", metavar="KEY",
                   help="the key's repr, as key_fn returns it, e.g. \"((4096,), 'torch.float32')\"")
    p.add_argument("--hardware", metavar="DIGEST", help="compare with this hardware digest instead of this machine's")
    p.add_argument("--no-import", action="store_true",
                   help="with a plain name: import nothing; compare only key, hardware and versions")
    p.add_argument("--world-size", type=int, metavar="N",
                   help="the caller tunes over N ranks (autotune_pg's size; 1 without one): an entry "
                        "measured over another number is a miss (default: not compared)")

    p = _command(sub, "verify", common, "check every file; exit 1 on corrupt, foreign or unreadable ones")

    p = _command(sub, "export", common, "write entries into one archive file (tar.gz)")
    p.add_argument("archive", type=Path, metavar="ARCHIVE", help="the tar.gz file to write (replaced if it exists)")
    p.add_argument("functions", nargs="*", metavar="FUNCTION", help="only these function names")
    p.add_argument("--history", action="store_true", help="include history entries")
    p.add_argument("--logs", action="store_true", help="include the tuning logs")

    p = _command(sub, "import", common, "check an archive, then add its entries atomically")
    p.add_argument("archive", type=Path, metavar="ARCHIVE", help="the tar.gz file that `export` wrote")
    p.add_argument("--dry-run", action="store_true", help="check and report, write nothing")
    p.add_argument("--replace", action="store_true", help="replace local entries even when they are newer")
    p.add_argument("--history", action="store_true", help="also import history entries")
    p.add_argument("--logs", action="store_true", help="also import tuning logs")

    p = _command(sub, "prune", common, "remove old entries, other hardware's entries, history")
    p.add_argument("--older-than", type=float, metavar="DAYS", help="entries and history older than DAYS days")
    p.add_argument("--other-hardware", action="store_true",
                   help="entries and history for hardware other than this machine's (or --hardware)")
    p.add_argument("--hardware", metavar="DIGEST", help="the hardware digest to keep with --other-hardware")
    p.add_argument("--history", action="store_true", help="all history entries")
    p.add_argument("--invalid", action="store_true",
                   help="files that verify reports as corrupt, foreign or inconsistent, except those "
                        "another triton_dist version wrote (kept: that version reads them)")
    p.add_argument("--other-versions", action="store_true",
                   help="entries, history and packs that another triton_dist version wrote (another "
                        "schema or pack version); only where no job of that version uses the root")
    p.add_argument("--function", action="append", dest="functions", metavar="NAME",
                   help="only this function (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    return parser


def _root(args: argparse.Namespace) -> Path:
    directory = getattr(args, "dir", None)
    if directory is not None:
        return Path(directory).expanduser()
    from triton_dist.settings import get_settings

    return get_settings().autotune_dir


def main(argv: Sequence[str] | None = None) -> int:
    """Run one cache command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from triton_dist._cli import commands as _cache_commands

    as_json = bool(getattr(args, "json", False))
    try:
        status = _cache_commands.COMMANDS[args.command](args, _root(args), as_json)
        sys.stdout.flush()  # a reader that has gone is found here, not in the exit's flush
        return status
    except BrokenPipeError:
        return _reader_gone()
    except TritonDistError as exc:
        status = 2
        if isinstance(exc, CacheAdminError):  # 1 unless the command names another (`why`'s unknown: 3)
            status = exc.details.get("exit_status", 1)
        if as_json:
            _cache_commands.emit({"error": type(exc).__name__, "message": str(exc), **exc.details})
        print(f"error: {exc}", file=sys.stderr)
        return status
    except OSError as exc:  # permissions, a read-only or full file system: one line, not a traceback
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) not in str(exc) else ""
        message = (f"{exc}{where}. Check the permissions and free space there, or point --dir "
                   "(TRITON_DIST_AUTOTUNE_DIR) at a writable cache root.")
        if as_json:
            _cache_commands.emit({"error": type(exc).__name__, "message": message})
        print(f"error: {message}", file=sys.stderr)
        return 1


def _reader_gone() -> int:
    """stdout's reader stopped reading (``ls | head -1``): nothing is wrong with the cache, so
    no "error:" line about permissions and free space; stdout goes to /dev/null so that the
    interpreter's last flush does not fail again. Exit 1: the output is incomplete."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # a stdout without a file descriptor: nothing to flush to
        pass
    return 1


if __name__ == "__main__":
    sys.exit(main())
