"""The text of a business key: what names its cache entry (issue 17, items 14 and 15).

``repr(key)``, except that sets and frozensets are written with their items sorted (their order
depends on ``PYTHONHASHSEED``), that values Python holds equal are written alike (``2.0`` as
``2``, ``-0.0`` as ``0``, ``torch.Size([64])`` as ``(64,)``, ``np.int64(64)`` as ``64``), and
refused when it could not name a readable entry.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import numbers
import sys
import types
from collections.abc import Callable
from typing import Any

from triton_dist.errors import KeyFunctionError

__all__ = ["MAX_KEY_BYTES", "KeyTexts", "key_repr", "stable_key_text"]

#: a key's text, JSON-escaped, may take at most this much of an entry (whose reader stops at
#: 8 MiB): a longer key was written, never read back, and re-tuned by every process
MAX_KEY_BYTES = 2**20


def key_repr(key: Any) -> str | None:
    """The key's text if it is stable across processes, else None.

    That is ``repr(key)``, except that sets and frozensets inside tuples, lists, dicts, dataclass
    instances and enum members are written with their items sorted by their own text: their
    iteration order depends on ``PYTHONHASHSEED``, so a plain repr names a different entry in
    every process (issue 17), and ranks holding equal keys disagree. A dataclass or enum member
    holding one is written as its generated repr prints it (``Spec(ops=frozenset({'a', 'b'}), n=4)``,
    ``<Fused.GELU: frozenset({'bias', 'gelu'})>``), whatever its own ``__repr__``.

    Values that Python holds equal, and that a process therefore takes as one decision, are
    written alike (a tester, 2026-12-04: a campaign's ``alpha: 2`` named another entry than a
    training job's ``2.0``, and ``CACHE_ONLY=strict`` refused the call): an integral float as
    the int it equals (``2.0`` -> ``2``, ``-0.0`` -> ``0``), ``torch.Size`` as the tuple it
    equals, and a NumPy scalar as the Python number it equals (``np.int64(64)`` -> ``64``).
    """
    def text_of(value: Any) -> str:
        return _canonical_repr(value, 0) if _needs_canonical(value, 0) else repr(value)

    text = text_of(key)
    if " at 0x" in text or text_of(key) != text:  # an address, or a repr that changes per call
        return None
    return text


_CONTAINERS = (tuple, list, dict, set, frozenset)


def _first_in(value: Any, depth: int, leaf: Callable[[Any], str]) -> str:
    """``leaf(v)`` of the first value ``v`` inside the built-in containers of ``value`` (keys and
    values of dicts) for which it is not "", else ""."""
    if depth > 50 or not isinstance(value, _CONTAINERS):
        return leaf(value)
    items = value.items() if isinstance(value, dict) else ((v, None) for v in value)
    for k, v in items:
        found = _first_in(k, depth + 1, leaf) or _first_in(v, depth + 1, leaf)
        if found:
            return found
    return ""


def _unstable_part(value: Any, depth: int) -> str:
    """What in a key could not find its config again ("" when nothing): a tensor or an array
    (hashed by identity, or not at all, and printed with its data, cut short with ``...``: every
    call would tune, and keys of other shapes would name the same file), or a NaN (never equal
    to itself: never found again)."""
    return _first_in(value, depth, _unstable_leaf)


def _unstable_leaf(value: Any) -> str:
    # any number's NaN: np.float32/np.float16 (no float subclass), Decimal("NaN"), complex NaNs (testers)
    if isinstance(value, numbers.Number) and _is_nan(value):
        return "a NaN (never equal to itself, so the key is never found again and every call would tune)"
    kind = _array_kind(value)
    if kind:
        return (f"{kind} (keyed by its identity and printed with its data: every call would tune again, "
                "and tensors of other shapes would share a cache file)")
    return _module_part(value)


def _is_nan(value: Any) -> bool:
    try:
        return bool(value != value)
    except Exception:  # noqa: BLE001 - a signalling Decimal NaN refuses comparison: it is one
        return True


def _array_kind(value: Any) -> str:
    """``"a torch.Tensor"`` (``"a torch.Parameter"``, ``"a numpy.ndarray"``, ``"a torch.Tensor
    subclass ScaledTensor"``) for a tensor or an array of any subclass, else "". No module can
    make one before it is imported."""
    for module, base in (("torch", "Tensor"), ("numpy", "ndarray")):
        lib = sys.modules.get(module)
        if lib is not None and isinstance(value, getattr(lib, base)):
            name = type(value).__name__
            if name in ("Tensor", "Parameter", "ndarray"):
                return f"a {module}.{name}"
            return f"a {module}.{base} subclass {type(value).__qualname__}"
    return ""


def _module_part(value: Any) -> str:
    """A ``torch.nn.Module`` in a key (U15): a method's ``key_fn`` gets ``self`` first, and
    upstream's ``to_hashable(A)`` returns it as it is. Compared by identity, every instance tuned
    anew and was kept alive, parameters and all, by the tuner's decisions; printed without an
    address (``Linear(in_features=4, ...)``, ``MyModule()``), instances that print alike named one
    cache entry whatever their parameters' shapes."""
    torch = sys.modules.get("torch")  # no module can exist before torch is imported
    if torch is None or not isinstance(value, torch.nn.Module):
        return ""
    return (f"the torch.nn.Module {type(value).__qualname__} itself (compared by identity: every instance "
            "would tune again and stay alive in the tuner's decisions, while instances that print alike "
            "share one cache file). A method's key_fn gets self first: key it by the attributes that "
            "decide the config, e.g. key_fn=lambda self, x, *args, **kwargs: (self.weight.shape, "
            "to_hashable(x))")


def _needs_canonical(value: Any, depth: int) -> bool:
    """Whether ``value`` holds what its plain repr writes unlike an equal value (or in an order
    of the hash seed's): a set, an integral float, a ``torch.Size``, a NumPy scalar."""
    if isinstance(value, (set, frozenset)) or _equal_number(value) is not None or _is_size(value):
        return True
    if depth > 50:
        return False
    if _is_dataclass_instance(value):
        return any(_needs_canonical(getattr(value, f.name, None), depth + 1) for f in _shown_fields(value))
    if isinstance(value, enum.Enum):
        return _needs_canonical(value.value, depth + 1)
    if not isinstance(value, _CONTAINERS):
        return False
    items = value.items() if isinstance(value, dict) else ((v, None) for v in value)
    return any(_needs_canonical(k, depth + 1) or _needs_canonical(v, depth + 1) for k, v in items)


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _shown_fields(value: Any) -> list[dataclasses.Field]:
    """The fields a dataclass's generated repr prints."""
    return [f for f in dataclasses.fields(value) if f.repr]


def _equal_number(value: Any) -> int | float | str | None:
    """The plain Python number that ``value`` equals and should be written as, where its repr
    differs from that number's (an integral float, a NumPy scalar); None for anything else."""
    numpy = sys.modules.get("numpy")  # (np.float64 is a float subclass: first)
    if numpy is not None and isinstance(value, (numpy.integer, numpy.floating, numpy.bool_, numpy.str_)):
        number = value.item()  # (np.str_ and np.bool_ too: the str and bool they equal)
        if type(number) not in (bool, int, float, str):  # np.longdouble's item is itself
            return None
        return int(number) if isinstance(number, float) and number.is_integer() else number
    if type(value) is float and value.is_integer():  # (a float subclass prints itself)
        return int(value)
    return None


def _is_size(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Size)


def _canonical_repr(value: Any, depth: int) -> str:
    number = _equal_number(value)
    if number is not None:
        return repr(number)
    if _is_size(value):
        value = tuple(value)
    # the built-in containers' own reprs are rebuilt (their subclasses may print themselves), and
    # those a dataclass or an enum member generates, where a set is inside (the caller's check)
    if depth <= 50 and _is_dataclass_instance(value) and _needs_canonical(value, depth):
        return f"{type(value).__qualname__}(" + ", ".join(
            f"{f.name}={_canonical_repr(getattr(value, f.name, None), depth + 1)}" for f in _shown_fields(value)) + ")"
    if depth <= 50 and isinstance(value, enum.Enum) and _needs_canonical(value.value, depth):
        return f"<{type(value).__name__}.{value.name}: {_canonical_repr(value.value, depth + 1)}>"
    namedtuple = isinstance(value, tuple) and hasattr(value, "_fields")
    if depth > 50 or (type(value) not in _CONTAINERS and not namedtuple):
        return repr(value)
    if type(value) is dict:
        return "{" + ", ".join(f"{_canonical_repr(k, depth + 1)}: {_canonical_repr(v, depth + 1)}"
                               for k, v in value.items()) + "}"
    items = [_canonical_repr(v, depth + 1) for v in value]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple, as it prints itself
        return f"{type(value).__name__}(" + ", ".join(
            f"{name}={item}" for name, item in zip(value._fields, items, strict=True)) + ")"
    if type(value) is tuple:
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if type(value) is list:
        return "[" + ", ".join(items) + "]"
    body = "{" + ", ".join(sorted(items)) + "}"
    if type(value) is set:
        return body if items else "set()"
    return f"frozenset({body})" if items else "frozenset()"


def stable_key_text(key: Any) -> str:
    """The text that names ``key``'s cache entry, or :class:`KeyFunctionError` for a key that
    cannot name one (a repr with an address, or too long to be read back)."""
    unstable = _unstable_part(key, 0)
    if unstable:
        raise KeyFunctionError(
            f"key_fn returned {key!r:.200}, which holds {unstable}. Return what decides the best "
            "config as plain values: to_hashable(x) (shape, strides, dtype) or tuple(x.shape), "
            "str(x.dtype), e.g. key_fn=lambda x, *args, **kwargs: (to_hashable(x),)."
        )
    text = key_repr(key)
    if text is None:
        raise KeyFunctionError(
            f"key_fn returned {type(key).__name__} {key!r:.200}, whose repr is not stable across "
            "processes (it contains a memory address), so it cannot name a cache file. Return a "
            "tuple of plain values: shapes, dtypes as strings, world size."
        )
    size = len(json.dumps(text))
    if size > MAX_KEY_BYTES:
        # an entry holding it would exceed the reader's limit: written, never read back, and
        # re-tuned by every process (issue 17)
        raise KeyFunctionError(
            f"key_fn returned a key whose text takes {size} bytes in a cache entry ({text[:100]}...); "
            f"keys may take at most {MAX_KEY_BYTES} bytes. Return a short tuple of what "
            "decides the best config (shapes, dtypes as strings, world size), not the data itself.",
            size=size,
        )
    return text


class KeyTexts:
    """The keys a tuner decided, by the text that names their cache entries (U15's leftover).

    A key that prints like a decided one but is not equal to it is refused on its miss: an
    object whose class prints itself (no address, so :func:`stable_key_text` takes it) but
    compares by identity (no ``__eq__``/``__hash__`` of its own) is a new key at every call,
    made anew per call as configs often are. Every call then missed, read the entry its text
    names from disk and kept the object alive in the tuner's decisions; and two unequal keys
    that print alike share one entry, the second reading the first's config."""

    def __init__(self) -> None:
        self._by_text: dict[str, Any] = {}

    def check(self, key: Any, qualname: str) -> str | None:
        """``key``'s text (None where it has no stable one: the entry's naming refuses it), or
        :class:`KeyFunctionError` where a decided key that is not equal to it prints the same."""
        text = key_repr(key)
        if text is None or text not in self._by_text:
            return text
        other = self._by_text[text]
        try:
            same = other is key or bool(other == key)
        except Exception:  # noqa: BLE001 - a comparison that fails tells them apart no better
            same = False
        if same:
            return text
        part = _identity_part(key, 0)
        holds = (f"it holds {part}, so a new one is a new key at every call (tuned or read from disk "
                 "again, and kept alive by the tuner)") if part else "keys that print alike share one cache entry"
        raise KeyFunctionError(
            f"key_fn of {qualname} returned {key!r:.200}, which prints like a key decided before but is "
            f"not equal to it: {holds}. Give the class __eq__ and __hash__ (e.g. "
            "@dataclasses.dataclass(frozen=True)), or return the fields that decide the config as plain "
            "values, e.g. key_fn=lambda x, cfg, *args, **kwargs: (to_hashable(x), cfg.block_m, cfg.block_n)."
        )

    def record(self, key: Any, text: str | None) -> None:
        if text is not None:
            self._by_text[text] = key

    def clear(self) -> None:
        self._by_text.clear()


def _identity_part(value: Any, depth: int) -> str:
    """The first object in ``value`` compared by identity that is not a class, module or
    constant ("" when none): what makes equal-looking keys unequal."""
    return _first_in(value, depth, _identity_leaf)


def _identity_leaf(value: Any) -> str:
    kind = type(value)
    if (kind.__eq__ is object.__eq__ and kind.__hash__ is object.__hash__ and value is not None
            and value is not Ellipsis and not isinstance(value, (type, types.ModuleType))):
        return f"a {kind.__qualname__} compared by identity (its class defines no __eq__ or __hash__)"
    return ""
