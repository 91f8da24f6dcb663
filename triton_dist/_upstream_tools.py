"""What upstream Triton-distributed's tools import from ``triton_dist.tune`` besides the tuner:
``load_autotune_data`` and ``pretty_triton_config_repr`` (its ``tools/tune/tune_gemm.py`` lists
and ranks a GEMM's tuned shapes with them, over ``glob(f"{func.func_dir()}/*.json")``).

Upstream's files hold ``{"config": [(ms, config), ...], "key": key, "func": name, "deps": {...},
"timestamp": ...}``, which its tool reads as ``(A_shape, A_stride, A_dtype), (B_shape, B_stride,
B_dtype) = data["key"]`` and ``config["config"].kwargs``. :func:`load_autotune_data` gives that
view of this project's entry files: the measured candidates fastest first (a failed one ``inf``;
a pruned one absent, as upstream leaves it out), the key read back from its text (tuples, lists,
dicts, numbers, strings, ``None`` and torch dtypes; a key it cannot read stays its text), and the
configs decoded from their JSON form (a ``triton.Config`` by its fields, without its ``pre_hook``;
a function or another object JSON cannot hold as the text the entry records). Nothing is
executed. The cache itself is read by the tuner, never through this view.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import inspect
import logging
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from triton_dist._store.encoding import SAME_ON_DISK
from triton_dist._store.files import load_json
from triton_dist._warn import warn_user

__all__ = ["load_autotune_data", "pretty_triton_config_repr"]

log = logging.getLogger("triton_dist.tune")


_repr_lock = threading.Lock()
_repr_blocks = 0  # pretty_triton_config_repr blocks open, in every thread
_repr_before: tuple[bool, Any] = (False, None)  # whether triton.Config had its own __repr__, and it


@contextlib.contextmanager
def pretty_triton_config_repr() -> Iterator[None]:
    """Inside the block, ``repr(config)`` of a ``triton.Config`` is its ``str`` (``BLOCK: 64,
    num_warps: 4, ...``, not ``<... Config object at 0x...>``), as upstream's helper of that name
    does; Triton's class is as it was once the last open block exits. The class is shared by every
    thread, so while any thread's block is open every thread sees the pretty ``repr``. Blocks are
    counted under a lock (a block opened while another thread's was open saved that block's patch
    as the original: the class kept the pretty ``repr`` for good, and lost it inside the later block
    when the earlier exited)."""
    import triton

    global _repr_blocks, _repr_before
    cls = triton.Config
    with _repr_lock:
        if _repr_blocks == 0:
            _repr_before = ("__repr__" in vars(cls), vars(cls).get("__repr__"))
            cls.__repr__ = cls.__str__
        _repr_blocks += 1
    try:
        yield
    finally:
        with _repr_lock:
            _repr_blocks -= 1
            if _repr_blocks == 0:
                had, previous = _repr_before
                if had:
                    cls.__repr__ = previous
                else:
                    del cls.__repr__


def load_autotune_data(filename: str | Path) -> dict[str, Any] | None:
    """One entry file (``<cache root>/<function>/<id>.json``) in the shape upstream's
    ``load_autotune_data`` returns; None, with a warning saying why, for a missing file or one
    that is not an entry of this cache."""
    entry, why = load_json(Path(filename))
    if entry is None:
        what = "missing" if why == "missing" else f"not a cache entry: {why}"
        warn_user(f"load_autotune_data: {filename} is {what}; give the path of an entry file, as "
                  "glob(f'{func.func_dir()}/*.json') lists them (`python -m triton_dist.cache ls` lists every "
                  "entry, packed ones included)", log=log)
        return None
    timings = []
    for candidate in entry["candidates"]:
        if candidate.get("pruned"):
            continue
        time_ms = candidate.get("time_ms")
        failed = candidate.get("error") is not None or not isinstance(time_ms, (int, float))
        config = {name: _decode(value) for name, value in candidate["config"].items() if name != SAME_ON_DISK}
        timings.append((math.inf if failed else float(time_ms), candidate.get("index", 0), config))
    timings.sort(key=lambda row: (row[0], row[1]))
    return {
        "config": [(time_ms, config) for time_ms, _, config in timings],
        "key": _read_key(entry["key"]),
        "func": entry["function"],
        "deps": {f"{name}.version": version for name, version in (entry.get("versions") or {}).items()},
        "timestamp": _timestamp(entry.get("created")),
    }


def _timestamp(created: Any) -> Any:
    try:  # upstream's form
        return datetime.datetime.fromisoformat(created).strftime("%Y-%m-%d_%H_%M_%S")
    except (TypeError, ValueError):
        return created


def _decode(value: Any) -> Any:
    """A config value from its JSON form (``_store.encoding.encode_value``)."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict) or len(value) != 1:
        return value
    ((tag, body),) = value.items()
    try:
        if tag == "tuple":
            return tuple(_decode(v) for v in body)
        if tag == "dict":
            return {_decode(k): _decode(v) for k, v in body}
        if tag in ("set", "frozenset"):
            items = (_decode(v) for v in body)
            return set(items) if tag == "set" else frozenset(items)
        if tag == "float":
            return float(body)
        if tag == "triton.Config":
            return _triton_config(body)
        if tag == "repr":  # a function, a tensor, an object: what the entry says it was
            return body
    except (TypeError, ValueError):  # an unhashable item: keep the JSON form
        return value
    return value


def _triton_config(fields: dict[str, Any]) -> Any:
    import triton

    accepted = inspect.signature(triton.Config).parameters
    options = {name: _decode(value) for name, value in fields.items()
               if name in accepted and name not in ("self", "kwargs", "pre_hook")}
    return triton.Config(_decode(fields.get("kwargs")) or {}, **options)


class _Unreadable(Exception):
    pass


def _read_key(text: str) -> Any:
    """The key whose text an entry records, read back without running it; else the text."""
    try:
        return _literal(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, _Unreadable):
        return text


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_literal(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items if isinstance(node, ast.List) else set(items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _Unreadable
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand)
        if isinstance(operand, (int, float, complex)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "frozenset" \
            and not node.keywords and len(node.args) <= 1:
        return frozenset(_literal(node.args[0]) if node.args else ())
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        import torch

        dtype = getattr(torch, node.attr, None)
        if isinstance(dtype, torch.dtype):  # torch.float16, as to_hashable writes a dtype
            return dtype
    raise _Unreadable
