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
import hashlib
import inspect
import json
import logging
import os
import platform
import textwrap
import weakref
from collections.abc import Callable
from importlib import metadata
from typing import Any

from triton_dist._backends import Backend
from triton_dist._store.modname import module_text

__all__ = ["HARDWARE_OVERRIDE", "body_hash", "digest", "hardware_info", "software_versions", "source_hash"]

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


def _kernel_sources(fn: Callable[..., Any]) -> list[str]:
    """Sources of the Triton kernels the function names as globals (``@triton.jit`` functions and
    ``@triton.autotune`` wrappers): editing a kernel changes what the best config is, so it must
    invalidate the host function's entries too. Found through the code's global names only (no
    import, no execution); then what its closure captures (:func:`_closure_texts`). A wrapper
    made with ``functools.wraps`` (a decorator under ``@autotune``) counts with the functions it
    wraps (``__wrapped__``): its own code names none of their kernels (U15)."""
    sources = _own_kernel_sources(fn)  # a function without __wrapped__: as before
    seen = {id(fn)}
    inner = getattr(fn, "__wrapped__", None)
    while inner is not None and id(inner) not in seen and len(seen) < 16:
        seen.add(id(inner))
        sources += [f"wraps {getattr(inner, '__qualname__', '?')}", *_own_kernel_sources(inner)]
        inner = getattr(inner, "__wrapped__", None)
    return sources


def _own_kernel_sources(fn: Callable[..., Any]) -> list[str]:
    code = getattr(fn, "__code__", None)
    namespace = getattr(fn, "__globals__", {})
    if code is None:
        return []
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    sources = []
    for name in sorted(names):
        text = _kernel_source(namespace.get(name))
        if text is not None:
            sources.append(f"{name}:{text}")
    return sources + _closure_texts(fn, 0)


def _kernel_source(obj: Any) -> str | None:
    """The source of a Triton kernel (``@triton.jit``, ``@triton.autotune``), None for anything else."""
    if not any(c.__name__ == "KernelInterface" for c in type(obj).__mro__):
        return None
    for _ in range(4):  # Autotuner -> Heuristics -> JITFunction/InterpretedFunction -> function
        obj = getattr(obj, "fn", None)
        if inspect.isfunction(obj):
            try:
                return inspect.getsource(obj)
            except (OSError, TypeError):
                return repr(obj.__code__.co_code)
    return None


def _closure_texts(fn: Any, depth: int) -> list[str]:
    """What the function's closure holds, as stable text: two functions made by one factory share
    their source but not what they capture (a kernel, a flag, a block size), and must not share
    their entries. A kernel counts by its source, a function by its name and its own closure, a
    value by its repr unless that is an address or long (then by its type alone)."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not cells or depth > 3:
        return []
    texts = []
    for name, cell in zip(code.co_freevars, cells, strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # not assigned yet
            continue
        if value is fn:  # a recursive function names itself
            continue
        kernel = _kernel_source(value)
        if kernel is not None:
            text = kernel
        elif inspect.isroutine(value) or inspect.isclass(value):
            inner = _closure_texts(value, depth + 1)
            text = f"{module_text(getattr(value, '__module__', ''))}.{getattr(value, '__qualname__', '?')}{inner}"
        else:
            text = _constant_text(value, 0)
        texts.append(f"closure {name}:{text}")
    return texts


def _constant_text(value: Any, depth: int) -> str:
    """A captured value as text: constants (numbers, strings, dtypes, tuples of them) by their
    repr, anything else by its type alone (its content may change while the process runs: a dict
    used as a memo, an object's state)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        text = repr(value)
        return text if len(text) <= 1000 else f"{type(value).__qualname__} of {len(text)} characters"
    if isinstance(value, (tuple, frozenset)) and depth < 3 and len(value) <= 64:
        items = [_constant_text(v, depth + 1) for v in value]
        return f"{type(value).__qualname__}({', '.join(sorted(items) if isinstance(value, frozenset) else items)})"
    cls = type(value)
    if cls.__module__ == "torch" and cls.__name__ == "dtype":
        return str(value)
    if cls.__module__ == "torch" and cls.__name__ == "device":  # its kind: the index is where a rank
        return f"device({value.type})"  # runs, not another function (ranks must agree on the hash)
    return f"{module_text(cls.__module__)}.{cls.__qualname__}"


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


def _once(cache: weakref.WeakKeyDictionary[Any, Any], compute: Callable[[Any], Any], fn: Any) -> Any:
    """``compute(fn)``, kept in ``cache`` for as long as the function object lives (computed
    every time for one that cannot be weakly referenced)."""
    try:
        return cache[fn]
    except KeyError:
        pass
    except TypeError:  # not weak-referenceable
        return compute(fn)
    value = cache[fn] = compute(fn)
    return value


def _compute_source_hash(fn: Callable[..., Any]) -> str:
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = repr((code.co_code, code.co_consts, code.co_names)) if code else repr(fn)
    text = "\n".join([_qualname_line(fn), text, *_kernel_sources(fn)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_body_hashes: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _compute_body_hash(fn: Callable[..., Any]) -> str | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return None  # no source (REPL, frozen app): never reuse across source changes
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
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
