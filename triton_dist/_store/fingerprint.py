"""What a cache entry is valid for: the function's source (and body, for timing reuse), the
hardware, the software.

``TRITON_DIST_HARDWARE_OVERRIDE`` (read here and nowhere else) is a test/ops override of the
hardware description: its text is added to the description as ``override`` and so changes the
hardware digest. Tests use it to give the nodes of a one-machine Ray cluster the digests of two
kinds of accelerator; an operator may use it to keep apart two kinds the backend cannot tell
apart. It is never a default: unset (or empty), the digest is the device's, and when it is set
every process that computes a digest logs a warning naming it (docs/cache.md).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import json
import logging
import os
import platform
import weakref
from collections.abc import Callable
from importlib import metadata
from typing import Any

from triton_dist._backends import Backend
from triton_dist._store.constants import constants_read as constants_read  # importable here, as before
from triton_dist._store.modname import module_text
from triton_dist._store.sources import (
    _kernel_function,
    _kernel_source,
    _kernel_sources,
    _once,
    _raw_source,
    _source_text,
    _source_tree,
)

__all__ = ["HARDWARE_OVERRIDE", "body_hash", "digest", "function_identity", "hardware_info", "kernel_identity",
           "software_versions", "source_hash"]

log = logging.getLogger(__name__)

#: environment variable of the test/ops override of the hardware description (module docstring)
HARDWARE_OVERRIDE = "TRITON_DIST_HARDWARE_OVERRIDE"

# by the backend itself (compared by identity), not its id: a backend made where a dead one had
# lived got the dead one's description by id (a test's fake device, U15)
_hardware: dict[tuple[Backend, str], dict[str, Any]] = {}
_software: dict[Backend, dict[str, str]] = {}


def digest(value: Any, length: int = 16) -> str:
    """Stable short hash of a JSON-able value (sorted keys, no whitespace)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def kernel_identity(obj: Any) -> str | None:
    """How a config that holds a Triton kernel is written (``files.encode_value``): the kernel's
    name as a campaign imports it and a digest of its source with what it uses, so that an edited
    kernel makes the configs that hold it new ones (measured, never taken from the disk); None for
    anything but a kernel. Written by its type alone (Triton's interpreter) or its name (a
    ``JITFunction``), an edit of the cached best's kernel was a hit (a tester, 2026-12-05)."""
    fn = _kernel_function(obj)
    if fn is None:
        return None
    text = _kernel_source(obj) or ""
    name = f"{module_text(getattr(fn, '__module__', '') or '')}.{fn.__qualname__}"
    return f"triton kernel {name} source sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def function_identity(obj: Any) -> str | None:
    """How a plain Python function held in a config is written (``files.encode_value``: a config's
    value, a ``triton.Config``'s ``pre_hook``/``post_hook``): its qualified name and a digest of
    its source with what it uses, as the host function's hash counts it (the kernels it calls,
    its closure, the module constants it reads), so that an edited function makes the configs
    that hold it new ones (measured, never taken from the disk); None for anything but a
    function. Written by its name alone, an edit of a ``pre_hook`` was a hit (2026-12-06)."""
    if not inspect.isfunction(obj):
        return None
    text: str = _once(_function_texts, _compute_function_text, obj)
    return f"{obj.__qualname__} source sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


_function_texts: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _compute_function_text(fn: Any) -> str:
    raw = _raw_source(fn)
    code = fn.__code__
    source = raw if raw is not None else repr((code.co_code, code.co_consts, code.co_names))
    return "\n".join([source, *_kernel_sources(fn)])


def source_hash(fn: Callable[..., Any]) -> str:
    """Hash of the decorated function's qualified name within its module (``Fast1.forward``), its
    source (decorator lines included: they hold the space) and the Triton kernels it calls by
    global name. The name: methods of two classes written alike (``return self.impl(x, B)``) named
    one cache entry, and the second class took the first one's config as a hit, 20x slower for it
    (a tester, 2026-12-04); the module stays out, as a script's ``__main__`` is the module a
    campaign imports by name. Computed once per function object, as
    :func:`body_hash` is (reading and tokenising the source file was ~0.3 ms of the first call
    of every new tuner of a function, P2 issue 16).

    Falls back to the code object when the source is unavailable (REPL, frozen apps).
    """
    return _once(_source_hashes, _compute_source_hash, fn)


_source_hashes: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _compute_source_hash(fn: Callable[..., Any]) -> str:
    text = _source_text(fn)
    if text is None:
        code = getattr(fn, "__code__", None)
        text = repr((code.co_code, code.co_consts, code.co_names)) if code else repr(fn)
    text = "\n".join([_qualname_line(fn), text, *_kernel_sources(fn)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_body_hashes: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _compute_body_hash(fn: Callable[..., Any]) -> str | None:
    tree = _source_tree(fn)
    if tree is None:
        return None  # no source (REPL, frozen app): never reuse across source changes
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    node = copy.copy(node)  # the kept tree stays whole (the attribute walk reads its decorators)
    node.decorator_list = []
    # ast.dump leaves out line numbers and comments: a reformat keeps the hash, a code edit not.
    # The Triton kernels it calls count as in the source hash: a kernel edit re-measures all.
    text = "\n".join([_qualname_line(fn), ast.dump(node), *_kernel_sources(fn)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _qualname_line(fn: Callable[..., Any]) -> str:
    """What the hashes take of the function's name: its qualified name within its module (a
    class's method is another function than a method of another class written alike: their
    entries must not serve, or lend timings to, each other)."""
    name = getattr(fn, "__qualname__", None)
    return f"qualname {name}" if isinstance(name, str) else ""


def body_hash(fn: Callable[..., Any]) -> str | None:
    """Hash of ``fn``'s definition without its decorators (and of the kernels it calls), or None
    without source (cached): growing the config space in the decorator keeps it, so the timings
    of an older entry may be reused (``_store.reuse``)."""
    result: str | None = _once(_body_hashes, _compute_body_hash, fn)
    return result


def hardware_info(backend: Backend) -> dict[str, Any]:
    """Hardware description (computed once per backend and override) with its ``digest``.

    With ``TRITON_DIST_HARDWARE_OVERRIDE`` set, its text is part of the description
    (``override``), so the digest differs from the device's own (module docstring).
    """
    override = os.environ.get(HARDWARE_OVERRIDE, "").strip()
    info = _hardware.get((backend, override))
    if info is None:
        info = dict(backend.hardware())
        if override:
            info["override"] = override
        info["digest"] = digest(info)
        if override:
            log.warning("%s=%r: the hardware digest is %s, not the device's own (a test/ops override; "
                        "entries tuned here hit only where it is set the same way)",
                        HARDWARE_OVERRIDE, override, info["digest"])
        _hardware[(backend, override)] = info
    return info


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def software_versions(backend: Backend) -> dict[str, str]:
    """Versions the entry was tuned with: python, torch, triton (or triton-ascend), the project,
    and the device stack (CUDA, or torch_npu + CANN)."""
    versions = _software.get(backend)
    if versions is None:
        import torch

        from triton_dist import __version__

        triton_version = _version("triton") or _version("triton-ascend") or "none"
        versions = {
            "python": platform.python_version(),
            "torch": str(torch.__version__),  # not TorchVersion: unpickling that imports torch (a Ray driver)
            "triton": triton_version,
            "triton_dist": __version__,
            **backend.software(),
        }
        _software[backend] = versions
    return versions
