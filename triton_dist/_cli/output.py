"""What the cache commands print: a strict JSON document, or a line of text."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

__all__ = ["emit", "say"]


def emit(document: Any) -> None:
    """One strict JSON document: NaN and infinities become null (strict parsers reject them)."""
    sys.stdout.write(json.dumps(_json_safe(document), indent=2, sort_keys=True, default=str,
                                allow_nan=False) + "\n")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
