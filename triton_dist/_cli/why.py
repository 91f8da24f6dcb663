"""``cache why FUNCTION KEY``: whether a call would hit the cache here, and if not, why: the
entry expected, the nearest one and what differs (:mod:`triton_dist._store.diagnose`). The
function is compared when it imports (``module:attr``, or the ``qualname`` its entries record).
Exit status: 0 a hit, 1 a miss, 2 a FUNCTION that names no autotuned function, 3 unknown (the
function's code was not compared)."""

from __future__ import annotations

import argparse
import ast
import importlib
import itertools
import os
import re
import sys
from pathlib import Path
from typing import Any

from triton_dist._cli.access import require_readable
from triton_dist._cli.output import emit, note, say
from triton_dist._cli.render import shorten, table
from triton_dist._store import diagnose as _diagnose
from triton_dist._store import files as _cache
from triton_dist._store.scan import folder_outside, iter_function_dir, key_entries
from triton_dist.errors import CacheAdminError

__all__ = ["EXIT_UNKNOWN", "cmd_why", "this_digest"]

#: the verdict is unknown (the function's code was not compared), neither hit (0) nor miss (1)
EXIT_UNKNOWN = 3
#: a FUNCTION that names no autotuned function (no such module or attribute, or not one
#: decorated): bad usage, not a miss (exit 1 told a script asking "would it hit?" that it would not)
EXIT_USAGE = 2


def _tuples(value: Any) -> Any:
    # keys are hashable, so a list in KEY (e.g. written as JSON) stands for a tuple
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    return value


_NUMPY = re.compile(r"\bnp\.(?:u?int\d*|float\d*|bool_?|str_|longdouble|double|half|single)\(([^()]*)\)")
_SIZE = re.compile(r"\btorch\.Size\(\[([^\[\]]*)\]\)")
_DTYPE = re.compile(r"\btorch\.([a-z][a-z0-9_]*)\b")
_STRING = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


def _key_text(text: str) -> str:
    """The key as its entry names it: "((4096,),'f32')", "((4096,), 'f32')" and '[[4096], "f32"]'
    are one key, and so are "(2.0,)" and "(2,)" (``stable_key_text``)."""
    from triton_dist._store.keytext import stable_key_text
    from triton_dist.errors import KeyFunctionError

    # what NumPy 2 and torch print for the values a key_fn returns: np.int64(3), torch.Size([2, 3])
    # (literal_eval reads neither; a tester's `why` missed what a call hit): read as the plain
    # values they equal, where the text as given is no literal
    plain = _NUMPY.sub(r"\1", text).replace("np.True_", "True").replace("np.False_", "False")
    plain = _SIZE.sub(lambda m: f"({m.group(1)},)" if m.group(1).strip() else "()", plain)
    stand_ins, dtypes = _dtypes_as_strings(plain)
    for candidate in (text, plain, stand_ins):
        try:
            read = stable_key_text(_tuples(ast.literal_eval(candidate)))  # literals only: never runs code
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, KeyFunctionError):
            continue
        for stand_in, name in dtypes.items():
            read = read.replace(stand_in, name)
        return read
    return plain


def _dtypes_as_strings(text: str) -> tuple[str, dict[str, str]]:
    """``torch.float16`` (a torch dtype as ``print(key)`` writes it, which literal_eval cannot read)
    as a string literal standing in for it, and the map from that literal's text back: a vLLM-style
    key ``(torch.Size([4, 40, 24]), torch.float32)`` read as its text and missed what the call hit."""
    if "torch." not in text:
        return text, {}
    import torch

    found: dict[str, str] = {}

    def stand_in(match: re.Match[str]) -> str:
        if not isinstance(getattr(torch, match.group(1), None), torch.dtype):
            return match.group(0)
        literal = repr(f"\0{match.group(0)}\0")
        found[literal] = match.group(0)
        return literal

    # outside string literals only: a key of str(x.dtype) holds 'torch.float16' as a string
    parts = _STRING.split(text)
    return "".join(p if i % 2 else _DTYPE.sub(stand_in, p) for i, p in enumerate(parts)), found


def _load_tuner(spec: str) -> Any:
    from triton_dist.tune import AutoTuner

    module_name, _, attr = spec.rpartition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m` does
        sys.path.insert(0, os.getcwd())
    file = Path(module_name)
    if file.suffix == ".py":  # path/to/module.py:attr: import it by its name from its directory
        if str(file.parent.resolve()) not in sys.path:
            sys.path.insert(0, str(file.parent.resolve()))
        module_name = file.stem
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise _import_failed(spec, module_name, exc) from exc  # one the module imports is missing
        raise CacheAdminError(f"cannot import {spec!r}: {type(exc).__name__}: {exc}. Give the "
                              "import path of the autotuned function as module:attr.",
                              exit_status=EXIT_USAGE) from exc
    except Exception as exc:
        raise _import_failed(spec, module_name, exc) from exc
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise CacheAdminError(f"cannot import {spec!r}: module {module_name!r} has no attribute {attr!r}. Give "
                              "the import path of the autotuned function as module:attr.",
                              exit_status=EXIT_USAGE) from exc
    if not isinstance(obj, AutoTuner):
        raise CacheAdminError(f"{spec!r} is a {type(obj).__name__}, not a function decorated with "
                              "triton_dist.tune.autotune", exit_status=EXIT_USAGE)
    return obj


def _import_failed(spec: str, module_name: str, exc: BaseException) -> CacheAdminError:
    """The module was found, and its own code failed while it was imported: a module that reads
    ``os.environ["LOCAL_RANK"]`` at import, run outside the job, was told to "give the import path
    as module:attr", which it had (2026-12-05). The environment kept `why` from comparing, so its
    verdict is unknown: exit 3 (``exit_status``), not 1, which a script reads as "it would miss"."""
    return CacheAdminError(
        f"cannot import {spec!r}: importing module {module_name!r} raised {type(exc).__name__}: {exc}. Its code "
        "failed at import, so the verdict is unknown (exit 3): run `why` in the environment of one of the job's "
        "ranks (what the module reads at import, e.g. RANK, LOCAL_RANK, WORLD_SIZE, as that rank has them), "
        "with its modules importable", exit_status=EXIT_UNKNOWN, verdict="unknown")


def _from_qualname(qualname: str) -> Any | None:
    """The AutoTuner at a dotted path ("pkg.mod.fn", as entries record it), or None."""
    parts = qualname.split(".")
    if len(parts) < 2 or parts[0] == "__main__" or not all(p.isidentifier() for p in parts):
        return None  # "<locals>" and scripts cannot be imported
    for cut in range(len(parts) - 1, 0, -1):
        try:
            return _load_tuner(".".join(parts[:cut]) + ":" + ".".join(parts[cut:]))
        except CacheAdminError:
            continue
    return None


#: the most of a function's other files ``_guess_tuner`` reads for a ``qualname`` that imports
GUESS_FILES = 64


def _guess_tuner(root: Path, name: str, key_text: str) -> tuple[Any | None, str | None]:
    """A plain function name: the AutoTuner its entries' ``qualname`` names, if it imports: this
    key's entries (newest first), then the function's other files one at a time, up to 3
    qualnames and :data:`GUESS_FILES` files (every entry of the function was read and held)."""
    directory = root / _cache.safe_name(name)
    if folder_outside(directory, root):  # a link out of the root: nothing in it is read
        return None, None
    mine = sorted((entry for _, entry in key_entries(directory, root, key_text)),
                  key=lambda entry: str(entry.get("created", "")), reverse=True)
    others = (entry for _, entry, _ in itertools.islice(iter_function_dir(directory, root), GUESS_FILES)
              if entry is not None and entry["key"] != key_text)
    tried: list[str] = []
    for entry in itertools.chain(mine, others):
        qualname = entry.get("qualname")
        if len(tried) >= 3:
            break
        if not isinstance(qualname, str) or qualname in tried:
            continue
        tried.append(qualname)
        tuner = _from_qualname(qualname)
        if tuner is not None and tuner.target.name == name:
            return tuner, qualname
    return None, None


def this_digest() -> str:
    """This machine's hardware digest."""
    from triton_dist._backends import get_backend
    from triton_dist._store.fingerprint import hardware_info

    return hardware_info(get_backend())["digest"]


def _require_function_name(spec: str, root: Path) -> None:
    """A FUNCTION without ``:`` names a folder of the root (its last dotted part): a path there
    (``why ../outside``) was shown as the function "/outside" (a tester, 2026-12-05)."""
    if any(sep in spec for sep in "/\\\0") or not spec.rpartition(".")[2]:
        raise CacheAdminError(
            f"{spec!r} is not a function of the cache root {root}: FUNCTION is an autotuned function's name "
            "as `ls` shows it (its folder in the root), or its import path module:attr (or pkg.module.attr, "
            "or path/to/module.py:attr); nothing outside the root is read. `ls` lists the functions there",
            exit_status=2)


def cmd_why(args: argparse.Namespace, root: Path, as_json: bool) -> int:
    if ":" not in args.function:
        _require_function_name(args.function, root)
    key_text = _key_text(args.key)
    tuner, resolved = None, None
    if ":" in args.function:
        tuner, resolved = _load_tuner(args.function), args.function
    elif "." in args.function:
        tuner, resolved = _from_qualname(args.function), args.function
    elif not args.no_import:
        tuner, resolved = _guess_tuner(root, args.function, key_text)
    name = tuner.target.name if tuner is not None else args.function.rpartition(".")[2]
    if not folder_outside(root / _cache.safe_name(name), root):  # (else the diagnosis says so, reading nothing)
        require_readable(root, [name])  # not "no usable entry": the folder could not be read
    diag = _diagnose.explain_here(root, name, key_text, args.world_size,
                                  tuner.target if tuner is not None else None, digest=args.hardware)
    if diag.hit and tuner is not None and tuner.target.prune_fn is not None:
        # prune_fn needs the call's arguments: a cached best it rejects now is a miss this cannot see
        # (a strict job failed on an edited prune_fn, and the `why` its error named said HIT; a tester)
        diag.reason += (f", if {name}'s prune_fn keeps the entry's best config for the call: `why` cannot ask "
                        "prune_fn (it needs the call's arguments); a strict job's CacheMissError or "
                        "`python -m ray_runner preflight` does")
    status = {"miss": 1, "unknown": EXIT_UNKNOWN}.get(diag.verdict, 0)
    if as_json:
        emit({**diag.to_dict(), "root": str(root), "hardware_digest": args.hardware or this_digest(),
              "imported": resolved})
        return status
    say("\n".join(f"{k:<9} {v}" for k, v in [
        ("function", diag.function + (f" (compared with {resolved})" if resolved else "")),
        ("key", diag.key), ("verdict", diag.verdict.upper()),
        ("reason", diag.reason), ("expected", diag.expected_path or "(unknown without module:attr)"),
        ("nearest", diag.nearest_path or "-")]))
    if diag.differences:
        say("\n" + table(["COMPONENT", "NOW", "ENTRY", "MISS?", "DETAIL"],
                         [[d.component, shorten(d.now or "-", 24), shorten(d.entry or "-", 24),
                           "yes" if d.blocking else "no", d.detail] for d in diag.differences], indent="  "))
    if diag.others:
        say("\nother entries: " + "; ".join(f"{Path(o['path']).name} ({', '.join(o['components']) or 'match'})"
                                            for o in diag.others))
    if diag.skipped:
        note(f"{len(diag.skipped)} unusable file(s) skipped; `verify` says which and why")
    if diag.verdict == "unknown":
        say("\n" + _unknown_advice(args, name))
    return status


def _unknown_advice(args: argparse.Namespace, name: str) -> str:
    """What an UNKNOWN verdict did not compare, and how to get a HIT or MISS instead."""
    if args.no_import:
        why, how = "--no-import", "drop --no-import (the module its entries record is then imported) or give"
    else:
        why, how = "the module its entries record could not be imported", "give"
    return (f"unknown (exit {EXIT_UNKNOWN}): the entry matches key and hardware, but {name}'s source "
            f"and config space were not compared ({why}). To know, {how} its import path: "
            f"`why module:attr KEY` (e.g. mypkg.kernels:{name}).")
