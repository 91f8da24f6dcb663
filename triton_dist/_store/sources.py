"""What a function's source hash counts of it (``fingerprint``): its source, read and parsed once
per function object, and what its results depend on beyond that source: the Triton kernels it
names as globals, reaches as attributes or captures (each with the kernels and constants it uses
in turn), what its closure holds, and the module constants it reads (``_store.constants``).
Found without importing or running anything.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from collections.abc import Callable
from typing import Any

from triton_dist._store.constants import constants_read, names_read
from triton_dist._store.modname import module_text


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
    names = names_read(code)
    sources = []
    for name in sorted(names):
        text = _kernel_source(namespace.get(name))
        if text is not None:
            sources.append(f"{name}:{text}")
    # the module constants it reads (``_store.constants``): none read, the hash is as before
    return sources + _closure_texts(fn, 0) + _attribute_kernels(fn, _method_class(fn)) + constants_read(fn)


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
    for name in sorted(names_read(fn.__code__)):
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
