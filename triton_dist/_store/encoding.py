"""How a config is written in a cache entry: a JSON form of its values that is equal for equal
configs across processes (:func:`encode_value`; a function, a Triton kernel, a tensor by what it
is, not where it is), and a config matched back against the current ``config_space`` by that
form (:func:`find_config`). Loading never executes code.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from triton_dist._store.modname import module_text

__all__ = ["SAME_ON_DISK", "config_text", "encode_config", "encode_value", "find_config", "told_by_content"]


def encode_value(value: Any) -> Any:
    """A JSON form of a config value that is equal for equal configs across processes."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        items = [encode_value(v) for v in value]
        return items if isinstance(value, list) else {"tuple": items}
    if isinstance(value, dict):
        return {"dict": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):  # items sorted: their order follows PYTHONHASHSEED
        return {"frozenset" if isinstance(value, frozenset) else "set":
                sorted((encode_value(v) for v in value), key=config_text)}
    cls = type(value)
    if cls.__name__ == "Config" and hasattr(value, "kwargs") and hasattr(value, "num_warps"):
        # triton.Config (and triton-ascend's): every plain attribute, a hook by its name and (a
        # function) a digest of its source: by its name alone, an edited pre_hook was a hit
        fields = {}
        for name, attr in sorted(vars(value).items()):
            if callable(attr):
                attr = _function_identity(attr) or getattr(attr, "__qualname__", type(attr).__name__)
            fields[name] = encode_value(attr)
        return {"triton.Config": fields}
    return {"repr": f"{cls.__module__}.{cls.__qualname__}:{_value_text(value)}"}


def told_by_content(value: Any) -> bool:
    """Whether ``encode_value`` writes ``value`` by what it holds, so that two values written
    alike are equal; False for a function or class (its name: two closures of one factory, two
    lambdas share one), a partial of one, a config holding one (a hook), and an object written
    by its type alone."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(told_by_content(v) for v in value)
    if isinstance(value, dict):
        return all(told_by_content(k) and told_by_content(v) for k, v in value.items())
    if isinstance(value, functools.partial) or inspect.isroutine(value) or inspect.isclass(value):
        return False
    if type(value).__name__ == "Config" and hasattr(value, "kwargs") and hasattr(value, "num_warps"):
        return all(told_by_content(v) for v in vars(value).values())
    if _content_digest(value) is not None or _kernel_identity(value) is not None:
        return True
    return " at 0x" not in repr(value)


def _function_identity(value: Any) -> str | None:
    """``fingerprint.function_identity`` for a Python function (imported only for one), else None."""
    if not inspect.isfunction(value):
        return None
    from triton_dist._store.fingerprint import function_identity

    return function_identity(value)


def _kernel_identity(value: Any) -> str | None:
    """``fingerprint.kernel_identity`` for a Triton kernel (imported only for one), else None."""
    if not any(c.__name__ == "KernelInterface" for c in type(value).__mro__):
        return None
    from triton_dist._store.fingerprint import kernel_identity

    return kernel_identity(value)


def _value_text(value: Any) -> str:
    """The text that stands for a value outside the JSON types: what it is, not where it is (a
    function by its qualified name, a partial by its parts, a tensor or array by its content's
    digest: their reprs are an address, or cut short with ``...``); a plain object, whose repr is
    its address, by its class alone (configs it cannot tell apart: ``TuneTarget``)."""
    if isinstance(value, functools.partial):
        parts = [_value_text(value.func), *(json.dumps(encode_value(a)) for a in value.args),
                 *(f"{k}={json.dumps(encode_value(v))}" for k, v in sorted(value.keywords.items()))]
        return f"partial({', '.join(parts)})"
    if inspect.isroutine(value) or inspect.isclass(value):
        owner = getattr(value, "__self__", None)
        if owner is not None and not inspect.ismodule(owner) and not inspect.isclass(owner):
            return f"{_value_text(owner)}.{getattr(value, '__name__', '?')}"  # a bound method
        # a function by its name and a digest of its source (with what it uses): an edited one is
        # another config (2026-12-06); a class or a builtin by its name
        name = _function_identity(value) or str(getattr(value, "__qualname__", None) or getattr(value, "__name__", "?"))
        module = getattr(value, "__module__", None)  # as a campaign imports it (not __main__: a tester)
        return f"{module_text(module)}.{name}" if module else name
    content = _content_digest(value)
    if content is not None:
        return content
    kernel = _kernel_identity(value)
    if kernel is not None:  # a Triton kernel: its name and its source's digest
        return kernel
    text = repr(value)
    if " at 0x" in text:  # default object repr: identity, not content
        cls = type(value)
        return f"{cls.__module__}.{cls.__qualname__}"
    return text


def _content_digest(value: Any) -> str | None:
    """``tensor(float16, [64, 64], sha256:…)`` for a torch tensor or numpy array, else None."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        return f"tensor({str(value.dtype).removeprefix('torch.')}, {list(value.shape)}, " \
               f"sha256:{hashlib.sha256(data).hexdigest()[:32]})"
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        data = numpy.ascontiguousarray(value).tobytes()
        return f"ndarray({value.dtype}, {list(value.shape)}, sha256:{hashlib.sha256(data).hexdigest()[:32]})"
    return None


def encode_config(config: dict[str, Any]) -> dict[str, Any]:
    return {str(k): encode_value(v) for k, v in config.items()}


#: the field that marks a config written alike another that differs (``_target.told_apart``)
SAME_ON_DISK = "#same-on-disk-as-another"


def config_text(encoded: Any) -> str:
    """A hashable text for an encoded config."""
    return json.dumps(encoded, sort_keys=True, separators=(",", ":"))


def find_config(encoded: Any, encoded_space: Sequence[dict[str, Any]], index: Any = None) -> int | None:
    """Index of the config whose encoding (taken at decoration time: ``TuneTarget.encoded``) is
    written as ``encoded`` is (compared as JSON text: ``True``, ``1`` and ``1.0`` are equal in
    Python and three configs on disk); of several, ``index`` (the entry's own) where it is one."""
    text = config_text(encoded)
    found = [i for i, config in enumerate(encoded_space) if config_text(config) == text]
    if type(index) is int and index in found:
        return index
    return found[0] if found else None
