"""``python -m triton_dist.cache ls|show|why|verify|export|import|prune``: the cache command line.

The same program as the ``triton-dist-cache`` console script (:func:`triton_dist.cli.main`);
see docs/cache.md. The disk cache itself lives in :mod:`triton_dist._store.files`.
"""

from __future__ import annotations

import sys

from triton_dist.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
