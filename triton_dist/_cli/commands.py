"""The cache commands behind :mod:`triton_dist.cli`: run one, print a table or JSON, return the
exit status (0 done, 1 a negative answer, 2 bad usage, 3 ``why``'s verdict unknown)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_dist._cli.access import denied_line, report_denied, report_unreadable, require_readable
from triton_dist._cli.output import emit, note, say
from triton_dist._cli.render import (
    render_age,
    render_config,
    render_fields,
    render_mode,
    render_ms,
    table,
    terminal_width,
)
from triton_dist._cli.stopping import EXIT_INTERRUPTED, EXIT_TERMINATED, stoppable
from triton_dist._cli.why import EXIT_UNKNOWN, cmd_why, this_digest
from triton_dist._store import admin as _cache_admin
from triton_dist._store import archive as _cache_archive
from triton_dist._store import files as _cache_files
from triton_dist._store import packs as _packs
from triton_dist._store import verify as _cache_verify
from triton_dist._store.check import other_version
from triton_dist._store.denied import MODE, denied
from triton_dist._store.rules import RULES
from triton_dist.errors import CacheAdminError, TritonDistError

__all__ = ["COMMANDS", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_UNKNOWN", "emit"]


# ---------------------------------------------------------------------------- ls / show

def no_cache(root: Path) -> CacheAdminError:
    """A root that does not exist is most likely a typo, not an empty cache (issue 18 item 10)."""
    what = ("it is not a directory" if root.exists()
            else _cache_files.dangling_link(root) or "the directory does not exist")
    return CacheAdminError(f"no cache at {root}: {what}. Check --dir or "
                           "TRITON_DIST_AUTOTUNE_DIR (default ~/.triton_dist/autotune).")


def _nothing_listed(root: Path, functions: list[str] | None) -> str:
    if not functions:
        return f"no entries under {root}"
    rows, _ = _cache_admin.list_entries(root)
    names = sorted({r["function"] for r in rows})
    if not names:
        return f"no entries of {', '.join(functions)} under {root}, which has no entries at all"
    return (f"no entries of {', '.join(functions)} under {root}; it has {len(rows)} "
            f"entr{'y' if len(rows) == 1 else 'ies'} of: {', '.join(names)}")


def _require_functions(root: Path, functions: list[str] | None, outcome: str) -> None:
    """Refuse FUNCTION arguments without entries under ``root`` (a typo), naming what is there."""
    missing = [f for f in functions or () if not _cache_admin.function_dirs(root, [f])
               and not _cache_admin.unreadable_dirs(root, [f])]  # that one is reported as such
    if missing:
        raise CacheAdminError(f"{_nothing_listed(root, missing)}; {outcome}")


def cmd_ls(args: argparse.Namespace, root: Path, as_json: bool) -> int:
    if not root.is_dir():
        raise no_cache(root)
    skipped = report_unreadable(root, args.functions, named=bool(args.functions))
    status = 1 if args.functions and skipped else 0  # a FUNCTION asked for could not be listed
    rows, bad = _cache_admin.list_entries(root, args.functions)
    locked = report_denied(((b["path"], b["why"]) for b in bad if denied(b["why"])), "skipped it",
                           named=bool(args.functions))
    bad = [b for b in bad if not denied(b["why"])]  # counted apart: not unusable, unread
    status = 1 if args.functions and locked else status  # an entry of a FUNCTION asked for, unlisted
    if as_json:
        emit({"root": str(root), "entries": rows, "unusable": bad, "unreadable": [str(d) for d in skipped],
              "unreadable_files": locked})
        return status
    if not rows:
        if not status:  # else the folder asked for could not be read: said above
            say(_nothing_listed(root, args.functions))
            # FUNCTION asked for and none of it there: a negative answer, as `show` of an id
            # not there (a script asking "is f tuned?" read exit 0 as yes; a tester, 2026-12-05)
            status = 1 if args.functions else 0
    else:
        # the best config by the fields that differ between the entry's candidates (the deciding
        # ones), cut only to fit COLUMNS / the terminal (issue 18 item 9)
        say(table(
            ["FUNCTION", "ID", "KEY", "BEST CONFIG", "TIME ms", "SPEED-UP", "AGE", "HARDWARE", "RANKS"],
            [[r["function"], r["id"][:12], r["key"], render_fields(_cache_admin.config_fields(r["best"]), r["varying"]),
              render_ms(r["best_time_ms"]), _speedup(r["default_time_ms"], r["best_time_ms"]),
              render_age(r["age_s"]), r["hardware_digest"], r["world_size"] or "?"] for r in rows],
            width=terminal_width(), flexible={2: 12, 3: 24}, optional=(7, 8, 6, 5)))
        functions = len({r["function"] for r in rows})
        say(f"\n{len(rows)} entr{'y' if len(rows) == 1 else 'ies'} of {functions} function(s) under {root}")
    if bad:
        note(f"{len(bad)} unusable file(s) (treated as misses); `verify` says which and why")
    return status


def _speedup(default: Any, best: Any) -> str:
    if isinstance(default, (int, float)) and isinstance(best, (int, float)) and best > 0:
        return f"{default / best:.2f}x"
    return "-"


def _is_file(spec: str) -> bool:
    try:
        return Path(spec).expanduser().is_file()
    except OSError:  # a name too long for a file (ENAMETOOLONG) is no file: an id, or nothing (a tester)
        return False


def _rules_line(entry: dict[str, Any]) -> str:
    """The date of the rules the entry was named under (``_store.rules``): every triton_dist says
    0.1.0 in ``versions``, so this is what tells an older version's entry (an operator, 2026-12-05)."""
    theirs = entry.get("rules")
    if theirs == RULES:
        return f"{RULES} (this triton_dist's)"
    said = str(theirs)[:20] if isinstance(theirs, str) else "none recorded"
    which = "a newer" if isinstance(theirs, str) and theirs > RULES else "an older"
    return (f"{said} (this triton_dist's are of {RULES}: {which} version wrote it, and its id, key text or "
            "configs may be written otherwise; `why` compares them)")


def cmd_show(args: argparse.Namespace, root: Path, as_json: bool) -> int:
    if not root.is_dir() and not _is_file(args.entry):
        raise no_cache(root)
    if not _is_file(args.entry):
        function = args.entry.rpartition("/")[0]
        if function:
            require_readable(root, [function])
        else:  # an id is looked for in every folder: those that cannot be read are skipped
            report_unreadable(root)
    path = _cache_admin.find_entry(root, args.entry)
    entry, why = _packs.read_path(path)  # a loose file or a packed entry
    if entry is None and denied(why):  # its permissions, not its bytes: not "unusable"
        raise CacheAdminError(denied_line(path, str(why)))
    if entry is None:
        raise CacheAdminError(f"{path} is not a usable entry: {why}")
    problem = _cache_admin.entry_problem(entry, path)
    if as_json:
        emit({"path": str(path), "problem": problem, "entry": entry})
        return 0
    best, reused = entry["best"], entry.get("reused") or {}
    measurement = entry.get("measurement") or {}
    hw = entry["hardware"]
    lines = [
        ("entry", str(path)),
        ("function", f"{entry['function']} ({entry.get('qualname', '?')})"),
        ("key", entry["key"]),
        ("id", str(entry.get("id"))),
        ("created", f"{entry.get('created')} ({render_age(_cache_admin.age_s(entry))} ago)"),
        ("source", f"hash {entry['source_hash']}, body hash {entry.get('body_hash')}"),
        ("hardware", f"{hw.get('digest')}: " + ", ".join(f"{k}={v}" for k, v in sorted(hw.items()) if k != "digest")),
        ("versions", ", ".join(f"{k}={v}" for k, v in sorted(entry["versions"].items()))),
        ("rules", _rules_line(entry)),
        ("measured", f"{measurement.get('n_warmup', '?')} warm-up + {measurement.get('n_repeat', '?')} timed "
                     f"runs, timer {measurement.get('timer', '?')}, {render_mode(measurement)}; "
                     f"world size {entry.get('world_size', '?')}"),
        ("best", f"#{best.get('index')} {render_config(best.get('config'))}: {render_ms(best.get('time_ms'))} ms "
                 f"(default {render_ms(entry.get('default_time_ms'))} ms, "
                 f"{_speedup(entry.get('default_time_ms'), best.get('time_ms'))})"),
    ]
    if reused:
        lines.append(("reused", f"timings of {reused.get('indices')} from entry {reused.get('from')}, "
                                f"scaled by {reused.get('scale', 1.0):.4g}"))
    if problem:
        lines.append(("PROBLEM", problem))
    say("\n".join(f"{k:<9} {v}" for k, v in lines))
    rows = []
    varying = _cache_admin.varying_fields(c.get("config") for c in entry["candidates"] if isinstance(c, dict))
    for c in entry["candidates"]:
        if not isinstance(c, dict):
            continue
        status = ("best" if c.get("index") == best.get("index") else
                  "pruned" if c.get("pruned") else f"failed: {c['error']}" if c.get("error") else "")
        if c.get("index") in (reused.get("indices") or []):
            status = (status + " (reused)").strip()
        rows.append([c.get("index"), render_fields(_cache_admin.config_fields(c.get("config")), varying),
                     render_ms(c.get("time_ms")), "-" if c.get("error") else render_ms(c.get("sem_ms")), status])
    # the candidates by the fields that differ between them (the full best config is above)
    say("\n" + table(["#", "CONFIG", "TIME ms", "SEM ms", "STATUS"], rows, indent="  ",
                     width=terminal_width(), flexible={1: 24, 4: 24}))
    return 0


# ---------------------------------------------------------------------------- verify / prune

def cmd_verify(args: argparse.Namespace, root: Path, as_json: bool) -> int:
    findings = _cache_verify.verify(root)
    problems = [f for f in findings if f.problem]
    archived = [f for f in findings if f.archived]  # unusable history: information (docs/cache.md)
    counts = {kind: sum(1 for f in findings if f.kind == kind) for kind in ("ok", "history", "log", "leftover")}
    if as_json:
        emit({"root": str(root), "exists": root.exists(), "counts": counts, "ok": not problems,
              "problems": [f.__dict__ for f in problems],
              "unusable_history": [f.__dict__ for f in archived],
              "leftovers": [f.__dict__ for f in findings if f.kind == "leftover"]})
        return 1 if problems else 0
    if not root.exists():
        link = _cache_files.dangling_link(root)
        say(f"{root}: no cache there (nothing to verify)" + (f"; {link}" if link else ""))
        return 0
    say(f"{root}: {counts['ok']} entries, {counts['history']} history, {counts['log']} logs, "
        f"{counts['leftover']} leftovers (harmless); {len(problems)} problem(s)")
    if archived:
        say(f"{len(archived)} history file(s) are not usable entries (not a problem: history keeps the "
            "entries others replaced, corrupt ones included, and no reader serves it). `prune --history` "
            "clears all history, `prune --invalid` these:")
        say(table(["HISTORY", "FILE", "DETAIL"], [[f.kind, f.path, f.detail] for f in archived], indent="  "))
    if problems:
        say(table(["PROBLEM", "FILE", "DETAIL"], [[f.kind, f.path, f.detail] for f in problems], indent="  "))
        others = [f.path for f in problems if other_version(f.detail)]
        locked = [f.path for f in problems if f.kind == "unreadable" and f.detail.startswith("cannot list")]
        unread = [f.path for f in problems if denied(f.detail)]
        by_hand = [p for p in _not_pruned(root, problems) if p not in others and p not in locked + unread]
        if len(by_hand) + len(others) + len(locked) + len(unread) < len(problems):
            say("These files are treated as cache misses. Remove them (`prune --invalid`) or re-seed.")
        if others:
            say(f"{len(others)} of them another triton_dist version wrote: that version reads them, so "
                "`prune --invalid` keeps them; `prune --other-versions` removes them (only when no job of "
                "that version uses this root)")
        if locked:
            say(f"{len(locked)} folder(s) this user cannot read: fix their permissions (`chmod u+rwx "
                "FOLDER` as their owner) or run as their owner; the other commands skip them")
        if unread:
            say(f"{len(unread)} file(s) this user cannot read (their permissions, not their bytes; maybe "
                f"another user's): `prune` keeps them. Fix their permissions (`chmod {MODE} FILE` as their "
                "owner) or run as their owner")
        if by_hand:
            say("`prune --invalid` deletes only files the cache writes; move or delete these by hand:\n  "
                + "\n  ".join(by_hand))
    return 1 if problems else 0


def _not_pruned(root: Path, problems: list[_cache_verify.Finding]) -> list[str]:
    """The problems' paths that ``prune --invalid`` leaves (a stray file, a directory where a
    file belongs): asked of prune itself, so that verify's advice is what prune does."""
    try:
        pruned = {r.path for r in _cache_admin.prune(root, invalid=True, other_versions=True, dry_run=True)}
    except OSError:  # prune could not look (permissions): the one advice verify can give
        return []
    return [f.path for f in problems if f.path not in pruned]


def cmd_prune(args: argparse.Namespace, root: Path, as_json: bool) -> int:
    if args.older_than is None and not (args.other_hardware or args.history or args.invalid
                                        or args.other_versions):
        if args.functions:  # issue 18 item 10: --function narrows a choice, it is not one
            names = " ".join(f"--function {f}" for f in args.functions)
            raise TritonDistError(
                f"{names} only narrows what prune removes; say what to remove: --older-than DAYS, "
                "--other-hardware, --history, --invalid or --other-versions. To remove every entry of it: "
                f"`prune {names} --older-than 0` (add --dry-run first to see what would go)")
        raise TritonDistError("prune needs at least one of --older-than DAYS, --other-hardware, "
                              "--history, --invalid, --other-versions (add --dry-run to see what would go)")
    if not root.is_dir():
        raise no_cache(root)
    if args.older_than is not None and not args.older_than >= 0:
        raise TritonDistError(f"--older-than must be a number of days >= 0, got {args.older_than}")
    keep = None
    if args.other_hardware:
        if args.hardware:
            keep = args.hardware
        else:
            keep = this_digest()
    elif args.hardware:
        raise TritonDistError("--hardware only goes with --other-hardware")
    _require_functions(root, args.functions, "nothing removed")  # a typo would report success
    skipped = report_unreadable(root, args.functions, named=bool(args.functions))
    removals = _cache_admin.prune(root, older_than_days=args.older_than, keep_hardware=keep,
                                  history=args.history, invalid=args.invalid, other_versions=args.other_versions,
                                  dry_run=args.dry_run, functions=args.functions)
    failed = [r for r in removals if r.error]
    # files it could not judge (this user may not read them): kept, each named with its fix
    locked = report_denied(((r.path, r.reason) for r in removals.unreadable), "kept it",
                           named=bool(args.functions))
    # a FUNCTION asked for was not pruned (its folder), or not all of it (a file)
    status = 1 if failed or (args.functions and (skipped or locked)) else 0
    if as_json:
        emit({"root": str(root), "dry_run": args.dry_run, "kept_hardware": keep,
              "removals": [r.__dict__ for r in removals], "kept_other_versions": [r.path for r in removals.kept],
              "unreadable": [str(d) for d in skipped], "unreadable_files": locked})
        return status
    verb = "would remove" if args.dry_run else "removed"
    if removals:
        say(table(["FILE", "WHY", "RESULT"], [[r.path, r.reason, r.error or ("-" if args.dry_run else "removed")]
                                               for r in removals]))
    say(f"{verb} {len(removals) - len(failed)} file(s) under {root}" + (f"; {len(failed)} failed" if failed else ""))
    if removals.kept:
        note(f"kept {len(removals.kept)} file(s) that another triton_dist version wrote (another schema or "
            "pack version): not invalid, that version reads them from a shared root; `prune "
            "--other-versions` removes them")
    if locked:
        note(f"kept {len(locked)} file(s) this user cannot read (their permissions, not their bytes; maybe "
            "another user's): not judged, never removed; stderr names each with its fix (its permissions, "
            "or run as its owner)")
    return status


# ---------------------------------------------------------------------------- export / import

def cmd_export(args: argparse.Namespace, root: Path, as_json: bool) -> int:
    if not root.is_dir():
        raise no_cache(root)
    _require_functions(root, args.functions, "nothing exported")  # not an empty archive that seeds nothing
    if args.archive.is_dir():  # the archive is written beside it and renamed onto it: refused late
        raise CacheAdminError(f"ARCHIVE {args.archive} is a directory; name the file to write, "
                              f"e.g. {args.archive / 'autotune-cache.tar.gz'}")
    if args.functions:
        require_readable(root, args.functions)  # not an archive without a FUNCTION asked for
    else:
        report_unreadable(root)
    report = _cache_archive.export_archive(root, args.archive, args.functions, history=args.history,
                                           logs=args.logs)
    if as_json:
        emit(report.to_dict())
        return 0
    if report.leftovers_removed:  # the temporary archives of exports killed mid-write (SIGKILL)
        n = len(report.leftovers_removed)
        note(f"removed {n} temporary archive(s) that killed exports to {args.archive} had left beside it "
            f"(their processes no longer run): {', '.join(Path(p).name for p in report.leftovers_removed)}")
    say(f"exported {len(report.written)} file(s) from {root} to {args.archive}")
    for s in report.skipped:
        note(f"  skipped {s['path']}: {s['why']}")
    return 0


def cmd_import(args: argparse.Namespace, root: Path, as_json: bool) -> int:
    report = _cache_archive.import_archive(root, args.archive, dry_run=args.dry_run, replace=args.replace,
                                           logs=args.logs, history=args.history)
    if as_json:
        emit(report.to_dict())
        return 0
    verb = "would import" if args.dry_run else "imported"
    say(f"{verb} {len(report.written)} file(s) from {args.archive} into {root}; "
        f"{len(report.unchanged)} unchanged, {len(report.kept_newer)} newer local entr(ies) kept")
    for s in report.skipped:
        note(f"  skipped {s['member']}: {s['why']}")
    for name in report.kept_newer:
        note(f"  kept the newer local {name} (--replace imports the archive's)")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Path, bool], int]] = {
    name: stoppable(name, command) for name, command in {
        "ls": cmd_ls, "show": cmd_show, "why": cmd_why, "verify": cmd_verify,
        "export": cmd_export, "import": cmd_import, "prune": cmd_prune,
    }.items()
}
