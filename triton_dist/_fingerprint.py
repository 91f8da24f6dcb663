"""What a cache entry is valid for: the function's source, the hardware, the software."""

from __future__ import annotations

import hashlib
import inspect
import json
import platform
import textwrap
from collections.abc import Callable
from importlib import metadata
from typing import Any

from ._backends import Backend

__all__ = ["digest", "hardware_info", "software_versions", "source_hash"]

_hardware: dict[int, dict[str, Any]] = {}
_software: dict[int, dict[str, str]] = {}


def digest(value: Any, length: int = 16) -> str:
    """Stable short hash of a JSON-able value (sorted keys, no whitespace)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def source_hash(fn: Callable[..., Any]) -> str:
    """Hash of the decorated function's source (decorator lines included: they hold the space).

    Falls back to the code object when the source is unavailable (REPL, frozen apps).
    """
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = repr((code.co_code, code.co_consts, code.co_names)) if code else repr(fn)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def hardware_info(backend: Backend) -> dict[str, Any]:
    """Hardware description (computed once per backend) with its ``digest``."""
    info = _hardware.get(id(backend))
    if info is None:
        info = dict(backend.hardware())
        info["digest"] = digest(info)
        _hardware[id(backend)] = info
    return info


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def software_versions(backend: Backend) -> dict[str, str]:
    """Versions the entry was tuned with: python, torch, triton (or triton-ascend), the project,
    and the device stack (CUDA, or torch_npu + CANN)."""
    versions = _software.get(id(backend))
    if versions is None:
        import torch

        from . import __version__

        triton_version = _version("triton") or _version("triton-ascend") or "none"
        versions = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": triton_version,
            "triton_dist": __version__,
            **backend.software(),
        }
        _software[id(backend)] = versions
    return versions
