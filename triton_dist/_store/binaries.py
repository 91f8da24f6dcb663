"""Triton's compiled binaries of tuned configs, shipped with the seeds (issue 23).

A seeded cache entry tells a fresh process *which* config to run; Triton still compiles that
config at its first launch, because its own cache (``TRITON_CACHE_DIR`` or ``~/.triton/cache``)
is empty in a new pod. A campaign therefore also collects the compiled kernels of each case's
best config where it tuned (:func:`bundle`: the files of Triton's cache directory
``<triton cache>/<hash>/`` of every kernel the config launches, found by a compile-only call of
it) and installs them on the nodes (:func:`install`), where Triton finds them under the same
hash: its first launch loads the binary instead of compiling.

Triton's hash covers its own build (``triton_key``), the kernel source, the backend (device
architecture, ``ptxas`` version), the options and the cache-invalidating environment. A bundle
records those of the process that compiled it (:func:`fingerprint`); a node whose own differ
would recompile, so it does not install the bundle and says why (:func:`differences`), and
``preflight`` reports it (:func:`check`).

Installing respects Triton's layout and its readers: each file is written to a temporary name
and renamed into place after its checksum was verified; the group file (``__grp__*.json``, the
entry Triton looks up first, whose ``child_paths`` are absolute and rewritten for this node)
goes last, as Triton itself writes it. A manifest per installed entry
(``<triton cache>/triton_dist/<function>/<entry id>.json``) lets ``preflight`` check it later.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from triton_dist._store.files import atomic_write_bytes, atomic_write_text, safe_name

__all__ = ["FORMAT", "bundle", "check", "differences", "fingerprint", "install", "kernel_dir_name",
           "manifest_path", "triton_cache_dir"]

FORMAT = 1
#: Triton's group files: the first file Triton reads for a hash
GROUP_PREFIX = "__grp__"
#: under Triton's cache directory: one manifest per installed entry
MANIFEST_DIR = "triton_dist"
#: fingerprint fields that need the device (absent where it is not visible, e.g. a seeding task)
DEVICE_FIELDS = ("target", "backend")
#: bounds on the host modules a bundle carries (:func:`host_module_dirs`)
MAX_HOST_MODULES = 16
MAX_HOST_MODULE_BYTES = 8 << 20


def triton_cache_dir() -> Path:
    """The directory Triton's file cache uses in this process (``TRITON_CACHE_DIR`` or default)."""
    try:
        from triton import knobs

        return Path(knobs.cache.dir)
    except (ImportError, AttributeError):  # Triton < 3.4: no knobs
        from triton.runtime.cache import default_cache_dir

        return Path(os.environ.get("TRITON_CACHE_DIR") or default_cache_dir())


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _triton_key() -> str:
    for module in ("triton.runtime.cache", "triton.compiler.compiler"):
        with contextlib.suppress(ImportError, AttributeError):
            return __import__(module, fromlist=["triton_key"]).triton_key()
    import triton

    return f"version {triton.__version__}"


def _env_vars() -> dict[str, Any]:
    for module in ("triton._C.libtriton", "triton.compiler.compiler", "triton.runtime.cache"):
        with contextlib.suppress(ImportError, AttributeError):
            return dict(__import__(module, fromlist=["x"]).get_cache_invalidating_env_vars())
    return {}


def fingerprint(device: bool = True) -> dict[str, str]:
    """What Triton's hash of a kernel depends on besides the kernel: equal fingerprints, equal
    hashes. ``device=False`` leaves out the fields that need the device (a task without one)."""
    import triton

    result = {"triton": str(triton.__version__), "triton_key": _digest(_triton_key()),
              "env": _digest(json.dumps(sorted(_env_vars().items()), default=str))}
    if device:
        try:
            from triton.compiler.compiler import make_backend
            from triton.runtime.driver import driver

            target = driver.active.get_current_target()
            result["target"] = str(target)
            result["backend"] = _digest(make_backend(target).hash())
        except Exception:  # noqa: BLE001 - no driver here (the interpreter, a task without a device)
            pass
    return result


def differences(shipped: Mapping[str, str], local: Mapping[str, str]) -> list[str]:
    """Why this node's Triton would compute other hashes (would recompile); [] when it would not.
    Fields only one side knows (the device's, in a task without one) are not compared."""
    return [f"{name}: {shipped[name]} (shipped) != {local[name]} (here)"
            for name in sorted(shipped.keys() & local.keys()) if shipped[name] != local[name]]


def _files(directory: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(directory.iterdir()) if p.is_file() and not p.name.startswith(".")
            and p.name != "lock"}


def kernel_dir_name(kernel_hash: str) -> str:
    """The directory name Triton's file cache gives a compiled kernel's hash (base32 since 3.4)."""
    try:
        from triton.runtime.cache import _base32
    except ImportError:  # Triton < 3.4: the hex digest itself
        return kernel_hash
    return _base32(kernel_hash)


def _read_dir(directory: Path) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for name, path in _files(directory).items():
        if name.startswith(GROUP_PREFIX):
            children = json.loads(path.read_text())["child_paths"]
            files[name] = {"group": sorted(children)}
        else:
            data = path.read_bytes()
            files[name] = {"sha256": hashlib.sha256(data).hexdigest(),
                           "data": base64.b64encode(data).decode("ascii")}
    return files


def host_module_dirs(root: Path) -> list[Path]:
    """Triton's cache directories of host modules its driver builds with the C compiler (the
    driver utilities and the per-signature kernel launchers: one ``*.so`` each, named by a hash
    of their source and platform). A fresh process builds them at its first launch (about a
    second, measured on the H200), so they travel with the kernels; at most
    ``MAX_HOST_MODULES``, the newest first."""
    try:
        dirs = [d for d in root.iterdir() if d.is_dir() and d.name != MANIFEST_DIR
                and any(p.suffix == ".so" for p in d.iterdir())
                and all(p.stat().st_size <= MAX_HOST_MODULE_BYTES for p in d.iterdir() if p.is_file())]
    except OSError:
        return []
    dirs.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    return dirs[:MAX_HOST_MODULES]


def bundle(kernels: Iterable[Any], *, cache_dir: Path | None = None, host_modules: bool = True) -> dict[str, Any]:
    """The files of the compiled ``kernels`` (Triton ``CompiledKernel`` or anything with its
    ``hash``) from Triton's cache, with this process's :func:`fingerprint`; with
    ``host_modules``, also the driver's host modules (:func:`host_module_dirs`). The bundle's
    ``kernels`` maps each cache directory name to its files."""
    root = Path(cache_dir) if cache_dir is not None else triton_cache_dir()
    payload: dict[str, dict[str, Any]] = {}
    for kernel in kernels:
        digest = kernel_dir_name(str(kernel.hash))
        if digest in payload:
            continue
        directory = root / digest
        if not directory.is_dir():
            raise FileNotFoundError(f"compiled kernel {getattr(kernel, 'name', digest)} has no directory "
                                    f"{directory} in Triton's cache (a custom TRITON_CACHE_MANAGER?)")
        payload[digest] = _read_dir(directory)
    if host_modules and payload:
        for directory in host_module_dirs(root):
            payload.setdefault(directory.name, _read_dir(directory))
    return {"format": FORMAT, "fingerprint": fingerprint(), "kernels": payload}


def _in_place(directory: Path, files: Mapping[str, Any]) -> bool:
    for name, spec in files.items():
        path = directory / name
        if "group" in spec:
            continue
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != spec["sha256"]:
            return False
    groups = [n for n in files if "group" in files[n]]
    return all((directory / n).is_file() for n in groups)


def _install_kernel(directory: Path, files: Mapping[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    blobs = {}
    for name, spec in files.items():
        if "/" in name or name.startswith("."):
            raise ValueError(f"refusing the file name {name!r} in a binaries bundle")
        if "group" not in spec:
            data = base64.b64decode(spec["data"])
            if hashlib.sha256(data).hexdigest() != spec["sha256"]:
                raise ValueError(f"{directory.name}/{name}: checksum mismatch (corrupted in transit)")
            blobs[name] = data
    for name, data in blobs.items():  # the children first, the group files last (as Triton)
        atomic_write_bytes(directory / name, data, verify=True)
    for name, spec in files.items():
        if "group" in spec:
            missing = [c for c in spec["group"] if c not in blobs and not (directory / c).is_file()]
            if missing:
                raise ValueError(f"{directory.name}/{name} names files the bundle lacks: {missing}")
            group = {"child_paths": {c: str(directory / c) for c in spec["group"]}}
            atomic_write_bytes(directory / name, json.dumps(group).encode(), verify=True)


def manifest_path(function: str, entry_id: str, cache_dir: Path | None = None) -> Path:
    root = Path(cache_dir) if cache_dir is not None else triton_cache_dir()
    return root / MANIFEST_DIR / safe_name(function) / f"{entry_id}.json"


def install(payload: Mapping[str, Any], function: str, entry_id: str, *, cache_dir: Path | None = None,
            device: bool = False) -> dict[str, Any]:
    """Install one entry's bundle into Triton's cache here; a summary (never raises OSError).

    Nothing is installed where :func:`differences` finds that Triton would recompile anyway."""
    root = Path(cache_dir) if cache_dir is not None else triton_cache_dir()
    summary: dict[str, Any] = {"installed": 0, "unchanged": 0, "skipped": "", "errors": []}
    if payload.get("format") != FORMAT:
        summary["errors"].append(f"{function} {entry_id}: bundle format {payload.get('format')!r}, "
                                 f"this triton_dist reads {FORMAT}")
        return summary
    diffs = differences(payload["fingerprint"], fingerprint(device))
    if diffs:
        summary["skipped"] = "this node's Triton would recompile: " + "; ".join(diffs)
        return summary
    for digest, files in payload["kernels"].items():
        try:
            if len(digest) < 16 or not all(c.isalnum() or c in "_-" for c in digest):
                raise ValueError(f"refusing the kernel directory name {digest!r}")
            directory = root / digest
            if directory.is_dir() and _in_place(directory, files):
                summary["unchanged"] += 1
                continue
            _install_kernel(directory, files)
            summary["installed"] += 1
        except (OSError, ValueError, KeyError) as exc:
            summary["errors"].append(f"{root / digest}: {exc}")
    if not summary["errors"]:
        manifest = {"format": FORMAT, "function": function, "entry_id": entry_id,
                    "fingerprint": payload["fingerprint"],
                    "kernels": {d: {n: s.get("sha256") for n, s in f.items()} for d, f in payload["kernels"].items()}}
        try:
            path = manifest_path(function, entry_id, root)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        except OSError as exc:
            summary["errors"].append(f"manifest of {function} {entry_id}: {exc}")
    return summary


def check(function: str, entry_id: str, *, cache_dir: Path | None = None) -> str | None:
    """None when a fresh process here finds the entry's shipped binaries in Triton's cache and
    would not recompile them; else why it would compile (for ``preflight``)."""
    path = manifest_path(function, entry_id, cache_dir)
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return f"no shipped binaries ({path} is missing): the first call compiles"
    except (OSError, ValueError) as exc:
        return f"unreadable manifest {path}: {exc}"
    diffs = differences(manifest.get("fingerprint", {}), fingerprint(device=True))
    if diffs:
        return "this node's Triton would recompile: " + "; ".join(diffs)
    root = path.parent.parent.parent
    for digest, files in manifest.get("kernels", {}).items():
        for name, sha in files.items():
            file = root / digest / name
            if not file.is_file():
                return f"shipped binary {file} is missing: the first call compiles"
            if sha is not None and hashlib.sha256(file.read_bytes()).hexdigest() != sha:
                return f"shipped binary {file} was changed since it was installed"
    return None
