"""What identifies the way candidates are timed, beyond what an entry's ``measurement`` says of it
(the counts, the timer's kind, graphs, placements, flush): a digest of the code that times them
(this package and the backends' timers) and, for a custom ``do_bench``, that function's name and
source digest. Timing reuse (``_store.reuse``) compares it: every triton_dist records version
``0.1.0``, so the measuring code of another commit (a unit, what a sample holds, what is timed
with a run) had its timings reused beside ones measured this way, rescaled by one factor that
corrects a uniform change only. A digest of the code, not a number to bump by hand: any edit of
these files, even a comment, costs a grown space its reuse once (everything measured), never a
stale figure.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["measuring_code", "method_id"]

#: the subpackages of triton_dist whose code times candidates
_TIMING_CODE = ("_measure", "_backends")


@functools.cache
def measuring_code() -> str:
    """A digest of the files of :data:`_TIMING_CODE` (read once per process; a file that cannot be
    read counts by its name alone). An install without their sources (compiled only: ``compileall
    -b``, the ``.py`` removed) counts their ``.pyc``: the digest of no file was every such
    install's, whatever its measuring code."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for sub in _TIMING_CODE:
        for path in sorted((package / sub).glob("*.py")) or sorted((package / sub).glob("*.pyc")):
            digest.update(path.name.encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError:
                pass
            digest.update(b"\0")
    return digest.hexdigest()[:16]


def method_id(timer_text: str | None = None) -> str:
    """:func:`measuring_code`, with a custom ``do_bench``'s identity where one times (``timer_text``:
    its name and source digest, as a config's function is written: ``_store.encoding``)."""
    if timer_text is None:
        return measuring_code()
    return f"{measuring_code()}+{hashlib.sha256(timer_text.encode()).hexdigest()[:16]}"
