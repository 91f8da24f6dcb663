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
import textwrap
import weakref
from collections.abc import Callable
from importlib import metadata
from typing import Any

from triton_dist._backends import Backend
from triton_dist._store.constants import constants_read
from triton_dist._store.modname import module_text

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


def _kernel_sources(fn: Callable[..., Any]) -> list[str]:
    """Sources of the Triton kernels the function names as globals (``@triton.jit`` functions and
    ``@triton.autotune`` wrappers): editing a kernel changes what the best config is, so it must
    invalidate the host function's entries too. Found through the code's global names only (no
    import, no execution); then what its closure captures (:func:`_closure_texts`). A wrapper
    made with ``functools.wraps`` (a decorator under ``@autotune``) counts with the functions it
    wraps (``__wrapped__``): its own code names none of their kernels (U15)."""
    return list(_once(_kernel_lists, _compute_kernel_sources, fn))  # both hashes ask: found once


def _compute_kernel_sources(fn: Callable[..., Any]) -> list[str]:
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
    names = _global_names(code)
    sources = []
    for name in sorted(names):
        text = _kernel_source(namespace.get(name))
        if text is not None:
            sources.append(f"{name}:{text}")
    # the module constants it reads (``_store.constants``): none read, the hash is as before
    return sources + _closure_texts(fn, 0) + _attribute_kernels(fn, _method_class(fn)) + constants_read(fn)


def _global_names(code: Any) -> set[str]:
    """The names a code object (and the code nested in it) reads as globals or attributes."""
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return names


def _kernel_function(obj: Any) -> Any:
    """The Python function under a Triton kernel's wrappers, None for anything but a kernel."""
    if not any(c.__name__ == "KernelInterface" for c in type(obj).__mro__):
        return None
    for _ in range(4):  # Autotuner -> Heuristics -> JITFunction/InterpretedFunction -> function
        obj = getattr(obj, "fn", None)
        if inspect.isfunction(obj):
            return obj
    return None


def _kernel_source(obj: Any) -> str | None:
    """The source of a Triton kernel (``@triton.jit``, ``@triton.autotune``) with what it uses
    (:func:`_kernel_uses`), None for anything else."""
    fn = _kernel_function(obj)
    if fn is None:
        return None
    text: str = _once(_kernel_texts, _compute_kernel_text, fn)
    return text


_kernel_texts: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


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


def _compute_kernel_text(fn: Any, depth: int = 0) -> str:
    raw = _raw_source(fn)  # not dedented: the text entries were written with
    source = raw if raw is not None else repr(fn.__code__.co_code)
    uses = _kernel_uses(fn, depth) if depth < 8 else []
    return "\n".join([source, *uses])  # nothing used: the source alone, as before (entries stay valid)


def _kernel_uses(fn: Any, depth: int) -> list[str]:
    """What a kernel's result depends on beyond its own source, as Triton's own cache key counts
    it: the ``@triton.jit`` functions it calls (by global name or a module's or class's attribute,
    with what they use in turn) and the constants it reads as globals (``tl.constexpr`` values,
    numbers, strings). Editing a helper the kernel calls, or a ``BLOCK: tl.constexpr = ...`` it
    reads, kept the host function's entries: a stale hit (a tester, 2026-12-05). Triton's own
    functions (``tl.sigmoid``) count by Triton's version, which entries record, not by source."""
    namespace = getattr(fn, "__globals__", {})
    uses = []
    for name in sorted(_global_names(fn.__code__)):
        if name not in namespace:
            continue
        value = namespace[name]
        if _kernel_function(value) is not None:
            if not _triton_own(value):
                uses.append(f"uses {name}:{_compute_kernel_text(_kernel_function(value), depth + 1)}")
        elif type(value).__name__ == "constexpr" and type(value).__module__.startswith("triton"):
            uses.append(f"constexpr {name}={_constant_text(getattr(value, 'value', None), 0)}")
        elif isinstance(value, (bool, int, float, str)):
            uses.append(f"global {name}={_constant_text(value, 0)}")
    for text in _attribute_kernels(fn, None, depth + 1):
        uses.append(f"uses {text}")
    return uses


def _triton_own(kernel: Any) -> bool:
    module = getattr(_kernel_function(kernel), "__module__", None) or ""
    return module == "triton" or module.startswith("triton.")


def _method_class(fn: Any) -> Any:
    """The class a method is defined in (found by its qualified name from its module's globals),
    None for a function that is not a class's own or whose class is not reachable that way."""
    parts = str(getattr(fn, "__qualname__", "")).split(".")
    if len(parts) < 2 or "<locals>" in parts:
        return None
    owner = getattr(fn, "__globals__", {}).get(parts[0])
    for part in parts[1:-1]:
        owner = inspect.getattr_static(owner, part, None)
    return owner if inspect.isclass(owner) else None


def _attribute_kernels(fn: Any, method_class: Any, depth: int = 0) -> list[str]:
    """``path:source`` of each Triton kernel the function reaches as an attribute: of a module
    (``kernels.matmul[grid](...)``), of a class (``Ops.kernel``), or of the method's own
    ``self``/``cls`` (``self.kernel`` in a method of ``method_class``). Resolved without running
    anything (``inspect.getattr_static``, no ``__getattr__``, no property): editing such a kernel
    kept the host function's entries (a tester, 2026-12-05). Triton's own modules are not walked."""
    tree = _source_tree(fn)
    if tree is None:
        return []
    code = fn.__code__
    namespace = getattr(fn, "__globals__", {})
    cells = dict(zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False))
    first = code.co_varnames[0] if method_class is not None and code.co_argcount else None
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        chain: list[str] = []
        base: Any = node
        while isinstance(base, ast.Attribute):
            chain.insert(0, base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or len(chain) > 8:
            continue
        if base.id == first:
            obj: Any = method_class
        elif base.id in cells:
            try:
                obj = cells[base.id].cell_contents
            except ValueError:
                continue
        elif base.id in namespace:
            obj = namespace[base.id]
        else:
            continue
        path = base.id
        for attr in chain:
            if not (inspect.isclass(obj) or (inspect.ismodule(obj) and not _triton_module(obj))):
                break
            obj = inspect.getattr_static(obj, attr, None)
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
            path = f"{path}.{attr}"
            kernel = _kernel_function(obj)
            if kernel is not None:
                if path not in found and not _triton_own(obj):
                    found[path] = _compute_kernel_text(kernel, depth)
                break
    return [f"{path}:{text}" for path, text in sorted(found.items())]


def _triton_module(module: Any) -> bool:
    name = getattr(module, "__name__", "") or ""
    return name == "triton" or name.startswith("triton.")


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
_source_texts: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
_source_trees: weakref.WeakKeyDictionary[Any, ast.Module | None] = weakref.WeakKeyDictionary()
_kernel_lists: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def _source_text(fn: Any) -> str | None:
    """``fn``'s dedented source, None without one (REPL, frozen apps). Read once per function
    object for both hashes and the attribute walk: each read tokenises the file's block, and four
    of them were ~1 ms of a first call (2026-12-05)."""
    text: str | None = _once(_source_texts, _read_source, fn)
    return text


def _read_source(fn: Any) -> str | None:
    raw = _raw_source(fn)
    return None if raw is None else textwrap.dedent(raw)


_raw_sources: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _raw_source(fn: Any) -> str | None:
    """``inspect.getsource(fn)`` (kept per function object), None without source."""
    text: str | None = _once(_raw_sources, _get_source, fn)
    return text


def _get_source(fn: Any) -> str | None:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def _source_tree(fn: Any) -> ast.Module | None:
    """The parsed :func:`_source_text` (kept, never changed in place), None without source."""
    tree: ast.Module | None = _once(_source_trees, _parse_source, fn)
    return tree


def _parse_source(fn: Any) -> ast.Module | None:
    text = _source_text(fn)
    if text is None:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


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
