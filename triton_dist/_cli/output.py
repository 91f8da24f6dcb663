"""What the cache commands print: a strict JSON document, or a line of text, on stdout (the
data: what was asked for, what was done); a note on stderr (files skipped, unusable or kept,
leftovers removed), so that ``ls | ...`` and ``export > file.txt`` see only the data (a tester,
2026-12-05: those notes were on stdout)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

__all__ = ["emit", "note", "say"]


#: what ``emit`` holds of the document's text before it writes it
CHUNK_CHARS = 1 << 16


def emit(document: Any) -> None:
    """One strict JSON document: NaN and infinities become null (strict parsers reject them).
    Written as it is encoded, :data:`CHUNK_CHARS` at a time: the whole text, made of millions of
    small pieces, was ~85 MB of `ls --json` on 10,000 entries (a tester)."""
    encoder = json.JSONEncoder(indent=2, sort_keys=True, default=str, allow_nan=False)
    pieces: list[str] = []
    size = 0
    for piece in encoder.iterencode(_json_safe(document)):
        pieces.append(piece)
        size += len(piece)
        if size >= CHUNK_CHARS:
            sys.stdout.write("".join(pieces))
            pieces, size = [], 0
    sys.stdout.write("".join(pieces) + "\n")


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


def note(text: str) -> None:
    """A diagnostic line, on stderr (in ``--json`` mode too: stdout holds the document alone)."""
    sys.stdout.flush()  # after the data said so far, where both go to one terminal
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
