"""A module's name as the cache writes it, the same whether a script runs as ``__main__`` or a
campaign imports it by name (``_store.fingerprint`` for the hashes, ``_store.files`` for configs)."""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["module_text"]


def module_text(name: Any) -> str:
    """A module as the hashes take it: its last component, and a script's ``__main__`` (or a
    spawned child's ``__mp_main__``) by the name a campaign imports it by. A function decorated
    under ``@autotune`` (``functools.wraps``) captures the original, whose module was in the hash:
    ``python train.py`` missed every entry a campaign seeded by importing ``train`` (a reviewer,
    2026-12-04); ``python pkg/train.py`` against ``pkg.train`` is why only the last component."""
    if not isinstance(name, str):
        return ""
    if name in ("__main__", "__mp_main__"):
        main = sys.modules.get(name)
        spec = getattr(main, "__spec__", None)
        file = getattr(main, "__file__", None)
        if spec is not None and getattr(spec, "name", None) not in (None, "__main__", "__mp_main__"):
            name = spec.name
        elif isinstance(file, str):
            name = os.path.splitext(os.path.basename(file))[0]
    return name.rsplit(".", 1)[-1]
